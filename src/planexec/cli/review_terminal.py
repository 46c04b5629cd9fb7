"""The review of a plan at a terminal: the plan, its changes and the policies' verdicts shown, and a person asked.

Owns `run_review`, `ReviewTerminal` (the console, input function and editor
command it talks to: injectable, so tests drive it without a TTY) and
`verdicts_table`. On a terminal the person sees the plan as a table and a
DAG, the diff against the last approved version (or against the plan
before an edit), and every policy's verdict, then answers ``a`` approve,
``e`` edit (the plan opens as JSON in ``$EDITOR``, default ``vi``; on save
it is validated with `check_plan`; problems are shown with the choice to
edit again or discard the edit; a valid edit is reviewed by the policies
again), ``r`` reject (a reason is asked and recorded), ``q`` or end of
input: reject without running. A policy's reject always wins: such a plan
can be edited or rejected, not approved. Without a terminal, or with
``--yes``, the decision is `governance.review.decide_review`'s. Imports
`governance`, `plan` and `errors`; the CLI's, never the library's.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from planexec import Plan, check_plan
from planexec.errors import PlanValidationError
from planexec.plan import diff_plans, plan_graph, plan_table
from planexec.policies import Policy, PolicyContext, Review, ReviewOutcome, decide_review, narrow_plan, review_plan

__all__ = [
    "ReviewTerminal",
    "decide_here",
    "run_review",
    "verdicts_table",
]

_STYLE = {"approve": "green", "reject": "red", "escalate": "yellow"}


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
    return decide_here(
        plan, result, policies, context, terminal=terminal, yes=yes, person_required=person_required, plan_shown=plan_shown,
        graph_shown=graph_shown,
    )  # fmt: skip


def decide_here(
    plan: Plan,
    result: Review,
    policies: Iterable[Policy],
    context: PolicyContext,
    *,
    terminal: ReviewTerminal,
    yes: bool = False,
    person_required: bool = True,
    plan_shown: bool = False,
    graph_shown: bool = False,
) -> ReviewOutcome:
    """The decision on `plan` once the policies' review `result` is in: ``--yes``, the person at this terminal, or nobody
    (no terminal: see `decide_review`); the reviewer a `Team` asks (`ReviewOptions.reviewer`) at ``planexec run GOAL``."""
    policies = list(policies)
    if yes or not terminal.interactive or (result.decision == "approve" and not person_required):
        return _without_person(plan, policies, result, terminal, yes=yes, person_required=person_required)
    return _with_person(plan, policies, context, result, terminal, plan_shown=plan_shown, graph_shown=graph_shown)


def _without_person(
    plan: Plan, policies: list[Policy], result: Review, terminal: ReviewTerminal, *, yes: bool, person_required: bool
) -> ReviewOutcome:
    if policies:
        terminal.console.print(verdicts_table(result))
    return decide_review(plan, result, policies_configured=bool(policies), yes="--yes" if yes else None, person_required=person_required)


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
