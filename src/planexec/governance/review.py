"""The review of a plan before it runs: policies first, then a person (or ``--yes``).

Owns `run_review` and its record `ReviewOutcome` (decision, the plan as
approved, possibly edited, the reason, who decided, the policies'
verdicts), and `ReviewTerminal`, the terminal it talks to (console, input
function, editor command: injectable, so tests drive it without a TTY).

On a terminal the person sees the plan as a table and a DAG, the diff
against the last approved version (or against the plan before an edit),
and every policy's verdict, then answers ``a`` approve, ``e`` edit (the
plan opens as JSON in ``$EDITOR``, default ``vi``; on save it is
validated with `check_plan`; problems are shown with the choice to edit
again or discard the edit; a valid edit is reviewed by the policies
again), ``r`` reject (a reason is asked and recorded), ``q`` or end of
input: reject without running. A policy's reject always wins: such a plan
can be edited or rejected, not approved. Without a terminal, ``--yes``
approves what no policy rejects (an escalation is then approved by
``--yes``, and recorded so). Imports `plan`, `policies`, `validation`,
`plan.view`, `plan_diff`, `records` and `errors`; never the engine.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from planexec.errors import PlanValidationError
from planexec.governance.policies import Policy, PolicyContext, PolicyVerdict, Review, narrow_plan, review_plan
from planexec.plan.diff import diff_plans
from planexec.plan.model import Plan
from planexec.plan.validation import check_plan
from planexec.plan.view import plan_graph, plan_table
from planexec.records import Record

__all__ = ["ReviewOutcome", "ReviewTerminal", "run_review", "verdicts_table"]

DecidedBy = Literal["person", "policy", "--yes", "nobody"]
_STYLE = {"approve": "green", "reject": "red", "escalate": "yellow"}
NO_ONE = "no one can be asked (stdin is not a terminal): approve it with --yes"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewOutcome(Record):
    """How a review ended: `decision`, the `plan` to run (edited when `edited`), why, and who decided.

    `by` is ``person`` (at the terminal), ``policy`` (a policy rejected, or
    every policy approved a plan that needs no person), ``--yes``, or
    ``nobody`` (a person was needed and none could be asked: not approved).
    `verdicts` are the policies' verdicts on the final plan.
    """

    decision: Literal["approve", "reject"]
    by: DecidedBy
    reason: str
    plan: Plan
    verdicts: list[PolicyVerdict] = field(default_factory=list)
    edited: bool = False

    @property
    def approved(self) -> bool:
        """True when the plan may run."""
        return self.decision == "approve"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data; the plan in its own JSON form (``id``, not ``step_id``)."""
        return {**Record.to_dict(self), "plan": self.plan.model_dump(mode="json", by_alias=True)}

    def to_json(self, *, indent: int | None = None) -> str:
        """The JSON form as text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


@dataclass
class ReviewTerminal:
    """Where a review talks to a person.

    `ask` reads one answer after a prompt and raises `EOFError` at the end
    of input (default: the console's input); `editor` is the command that
    opens a file (default ``$EDITOR``, else ``vi``); `interactive` is False
    when there is no one to ask.
    """

    console: Console
    ask: Callable[[str], str] | None = None
    editor: str | None = None
    interactive: bool = True

    def answer(self, prompt: str) -> str:
        """One stripped answer (`EOFError` at the end of input)."""
        ask = self.ask if self.ask is not None else self.console.input
        return ask(prompt).strip()

    def editor_command(self) -> list[str]:
        """The editor as an argument list."""
        return shlex.split(self.editor or os.environ.get("EDITOR") or "vi")

    def say(self, text: str, style: str | None = None) -> None:
        """Print a line as plain text (no markup)."""
        self.console.print(Text(text, style=style or ""), soft_wrap=True)


def verdicts_table(review: Review) -> Table:
    """One row per policy: its name, its decision and its reasons."""
    table = Table(title=f"policies: {review.decision}", title_justify="left")
    for name in ("policy", "verdict", "reasons"):
        table.add_column(name, overflow="fold")
    for v in review.verdicts:
        table.add_row(Text(v.policy), Text(v.decision, style=_STYLE[v.decision]), Text("\n".join(v.reasons)))
    return table


def run_review(
    plan: Plan,
    policies: Iterable[Policy] = (),
    context: PolicyContext | None = None,
    *,
    terminal: ReviewTerminal,
    yes: bool = False,
    person_required: bool = True,
    plan_shown: bool = False,
    graph_shown: bool = False,
) -> ReviewOutcome:
    """Review `plan` with `policies`, then ask a person (or take ``--yes``); see the module docstring.

    `person_required` False lets a plan every policy approves run without
    asking (a plan file its author wrote); a person is still asked when a
    policy escalates. `plan_shown`/`graph_shown`: the caller already printed
    the plan's table / DAG.
    """
    context = context if context is not None else PolicyContext()
    policies = list(policies)
    plan, notes = narrow_plan(plan, policies, context)
    for note in notes:
        terminal.say(f"narrowed by {note}")
    plan_shown = plan_shown and not notes
    result = review_plan(plan, policies, context)
    if yes or not terminal.interactive or (result.decision == "approve" and not person_required):
        return _without_person(plan, policies, result, terminal, yes=yes, person_required=person_required)
    return _with_person(plan, policies, context, result, terminal, plan_shown=plan_shown, graph_shown=graph_shown)


def _without_person(
    plan: Plan, policies: list[Policy], result: Review, terminal: ReviewTerminal, *, yes: bool, person_required: bool
) -> ReviewOutcome:
    if policies:
        terminal.console.print(verdicts_table(result))

    def outcome(decision: Literal["approve", "reject"], by: DecidedBy, reason: str) -> ReviewOutcome:
        return ReviewOutcome(decision=decision, by=by, reason=reason, plan=plan, verdicts=result.verdicts)

    if result.decision == "reject":
        return outcome("reject", "policy", "rejected by policy: " + "; ".join(result.reasons("reject")))
    if yes:
        if result.decision == "escalate":
            return outcome("approve", "--yes", "escalation approved by --yes: " + "; ".join(result.reasons("escalate")))
        return outcome("approve", "--yes", "approved with --yes")
    if result.decision == "escalate":
        return outcome("reject", "nobody", "a policy asks for a person (" + "; ".join(result.reasons("escalate")) + ") and " + NO_ONE)
    if not person_required:
        return outcome("approve", "policy", "every policy approved" if policies else "no policy objected (none configured)")
    return outcome("reject", "nobody", NO_ONE)


def _with_person(
    plan: Plan,
    policies: list[Policy],
    context: PolicyContext,
    result: Review,
    terminal: ReviewTerminal,
    *,
    plan_shown: bool,
    graph_shown: bool,
) -> ReviewOutcome:
    original, current, edited = plan, plan, False
    show_table, show_graph, show_review = not plan_shown, not graph_shown, True

    def outcome(decision: Literal["approve", "reject"], reason: str) -> ReviewOutcome:
        return ReviewOutcome(decision=decision, by="person", reason=reason, plan=current, verdicts=result.verdicts, edited=edited)

    while True:
        if show_review:
            _show(terminal, current, result, _baseline(context, original, edited), table=show_table, graph=show_graph)
            show_table = show_graph = True
            show_review = False
        rejected = result.decision == "reject"
        try:
            key = terminal.answer("edit, reject or quit? [e/r/q] " if rejected else "approve, edit, reject or quit? [a/e/r/q] ").lower()
        except EOFError:
            key = "q"
        if key in ("a", "approve"):
            if rejected:
                terminal.say("a policy rejected this plan: it cannot be approved as it is; edit it (e) or reject it (r)", "red")
                continue
            if result.decision == "escalate":
                return outcome("approve", "approved by a person after escalation: " + "; ".join(result.reasons("escalate")))
            return outcome("approve", "approved by a person")
        if key in ("r", "reject"):
            try:
                why = terminal.answer("reason for rejecting: ")
            except EOFError:
                why = ""
            return outcome("reject", why or "rejected by a person (no reason given)")
        if key in ("q", "quit"):
            return outcome("reject", "the person quit the review without running the plan")
        if key in ("e", "edit"):
            new = _edit(terminal, current, context)
            if new is not None:
                current, edited = narrow_plan(new, policies, context)[0], True
                result = review_plan(current, policies, context)
                show_review = True
            continue
        terminal.say("answer a (approve), e (edit), r (reject) or q (quit)")


def _baseline(context: PolicyContext, original: Plan, edited: bool) -> tuple[Plan, str] | None:
    """What the plan is compared with: the last approved version, else the plan before an edit."""
    if context.previous is not None:
        return context.previous, f"the approved version v{context.previous.version}"
    return (original, "the plan before the edit") if edited else None


def _show(terminal: ReviewTerminal, plan: Plan, result: Review, baseline: tuple[Plan, str] | None, *, table: bool, graph: bool) -> None:
    console = terminal.console
    if table:
        console.print(plan_table(plan))
    if graph:
        console.print(plan_graph(plan))
    if baseline is not None:
        terminal.say(f"changes since {baseline[1]}:\n{diff_plans(baseline[0], plan).render()}")
    if result.verdicts:
        console.print(verdicts_table(result))
    if result.decision == "reject":
        terminal.say("a policy rejected this plan: edit it (e) or reject it (r)", "red")
    elif result.decision == "escalate" and result.scope == "changes":
        terminal.say(f"policies ask a person to approve the new or changed steps: {', '.join(result.steps)}", "yellow")
    elif result.decision == "escalate":
        terminal.say("policies ask a person to approve the whole plan", "yellow")


def _edit(terminal: ReviewTerminal, plan: Plan, context: PolicyContext) -> Plan | None:
    """The edited plan, validated; None when the edit is discarded or changes nothing."""
    text = plan.to_json() + "\n"
    with tempfile.TemporaryDirectory(prefix="planexec-edit-") as folder:
        path = Path(folder) / "plan.json"
        path.write_text(text, encoding="utf-8")
        while True:
            command = terminal.editor_command()
            try:
                code = subprocess.run([*command, str(path)], check=False).returncode
            except OSError as exc:
                terminal.say(f"cannot start the editor {shlex.join(command)!r}: {exc.strerror or exc}; set $EDITOR", "red")
                return None
            if code != 0:
                terminal.say(f"the editor {shlex.join(command)!r} exited with status {code}: the edit is discarded", "red")
                return None
            new_text = path.read_text(encoding="utf-8")
            try:
                edited = check_plan(Plan.from_json(new_text), context.registry)
            except PlanValidationError as exc:
                terminal.say(f"the edited plan is not valid:\n{exc.render()}", "red")
                if _again(terminal):
                    continue
                terminal.say("the edit is discarded; the plan is as it was")
                return None
            if edited.content_hash == plan.content_hash:
                terminal.say("the edit changes nothing the plan does")
                return None
            if edited.version <= plan.version:  # an edit is a new version of the plan
                edited = edited.model_copy(update={"version": plan.version + 1, "revises": plan.version})
            terminal.say(f"the edited plan is valid (v{edited.version}); the policies review it again")
            return edited


def _again(terminal: ReviewTerminal) -> bool:
    """True to edit again, False to discard the edit (also at the end of input)."""
    while True:
        try:
            key = terminal.answer("edit again or discard the edit? [e/d] ").lower()
        except EOFError:
            return False
        if key in ("e", "edit"):
            return True
        if key in ("d", "discard"):
            return False
        terminal.say("answer e (edit again) or d (discard the edit)")
