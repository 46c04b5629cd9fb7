"""What a person changes from the console: decide an approval, and answer a waiting plan version with an edit.

Owns `decide` (approve or deny one pending request, recorded under the
signed-in name, through `RunStore.decide_approval` exactly as ``planexec
approve`` does) and the edit of a waiting plan version: `check_edit`
parses the edited text, JSON or the compact one-line-per-step language
(`plan.compact`), and lists every problem by step, and for compact text
by line too (the plan's shape and graph here, then, when the run loaded
tools modules, ``planexec validate --tools ...`` in a child process for
what only the registry knows: unknown tools, actions and parameters),
`convert` turns the text from one form into the other without saving,
and `submit_edit` answers
the waiting version with a valid edit through `store.approvals.edit_plan`,
exactly as ``planexec approve RUN --edit`` does: the edit is stored as the
plan's next version (with its diff, who edited it and why) and the waiting
version is denied in the same transaction. The process that waits on the
run picks the edit up, checks it against its own registry, records it as a
revision and has its policies review it (a policy that needs a person makes
it wait in the inbox for the new content hash), then runs it in the same
run. An edit of a version that no longer waits (decided, or replaced by
another edit first) is an `ApprovalError` naming what happened, and stores
nothing. Imports the store and `plan`; starts the CLI only as a separate
process (the check).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from planexec import Plan, validate_plan
from planexec.errors import PlanParseError, Problem, RunNotFoundError
from planexec.plan import print_compact, read_compact, with_lines
from planexec.runs import edit_plan, find_edit
from planexec.store import Approval, RunStore

__all__ = ["FORMS", "EditCheck", "check_edit", "convert", "decide", "find_pending", "show", "stale_reason", "submit_edit"]

_VALIDATE_TIMEOUT = 60.0
FORMS = ("json", "compact")  # the editor's two ways of writing a plan
_LINE = re.compile(r"^line (\d+)")


def find_pending(store: RunStore, approval_id: int) -> Approval | None:
    """The pending approval with this id, or None (decided meanwhile, or unknown)."""
    for a in store.approvals(pending_only=True):
        if a.approval_id == approval_id:
            return a
    return None


def decide(store: RunStore, approval: Approval, *, approved: bool, by: str, reason: str | None) -> Approval:
    """Approve or deny exactly this request (its content hash); `ApprovalError` when it is no longer pending."""
    return store.decide_approval(
        approval.run_id, step_id=approval.step_id, approved=approved, by=by, reason=reason or None, content_hash=approval.content_hash
    )


@dataclass
class EditCheck:
    """An edit checked: the `plan` when it is valid, else every problem, by step (`by_step`) and for the plan as a whole (`general`)."""

    text: str
    form: str = "json"
    plan: Plan | None = None
    general: list[Problem] = field(default_factory=list)
    by_step: dict[str, list[Problem]] = field(default_factory=dict)
    step_ids: list[str] = field(default_factory=list)
    summaries: dict[str, str] = field(default_factory=dict)  # each step in a few words, shown beside its problems
    lines: dict[str, int] = field(default_factory=dict)  # compact text: the line of each step

    @property
    def problems(self) -> list[Problem]:
        """Every problem, the plan's first."""
        return [*self.general, *(p for ps in self.by_step.values() for p in ps)]

    def line_of(self, problem: Problem) -> int | None:
        """Compact text: the line a problem is about (its own, or its step's); None for the plan as a whole."""
        m = _LINE.match(problem.field or "")
        return int(m.group(1)) if m else self.lines.get(problem.step_id or "")

    def by_line(self) -> list[tuple[int, str, list[Problem]]]:
        """Compact text: each line (number, text) with the problems about it (a step's, or the line's own) beside it."""
        found: dict[int, list[Problem]] = {}
        for p in self.problems:
            n = self.line_of(p)
            if n is not None:
                found.setdefault(n, []).append(p)
        return [(n, line, found.get(n, [])) for n, line in enumerate(self.text.splitlines(), start=1)]

    def shown_apart(self) -> list[Problem]:
        """The problems listed above the steps or lines: the plan's own (and, for compact text, none that a line shows)."""
        return [p for p in self.general if self.form != "compact" or self.line_of(p) is None]


def show(plan: Plan, form: str) -> str:
    """`plan` as the editor shows it, in `form` (``json`` or ``compact``); ValueError when compact text cannot say it."""
    return print_compact(plan) if form == "compact" else plan.to_json(indent=2)


def check_edit(text: str, *, old: Plan, tools: list[str], cwd: Path, form: str = "json") -> EditCheck:
    """Every problem with the edited plan `text` (see the module docstring); its `plan` (the next version of `old`) when there is none."""
    check = EditCheck(text=text, form=form)
    plan = _parse(check, old)
    if plan is None:
        return check
    # with tools, `planexec validate` checks everything at once (graph and registry); without, the graph is all there is to check
    problems = _registry_problems(plan, tools, cwd) if tools else validate_plan(plan)
    _sort(check, with_lines(problems, check.lines) if form == "compact" else problems)
    if plan.content_hash == old.content_hash:
        check.general.append(Problem("unchanged", f"the edit changes nothing v{old.version} does: approve it instead"))
    if not check.problems:
        check.plan = plan
    return check


def convert(text: str, *, old: Plan, source: str, target: str) -> tuple[str | None, EditCheck]:
    """The edited `text` (in `source` form) written in `target` form, nothing saved; (None, its problems) when it does not parse."""
    check = EditCheck(text=text, form=source)
    plan = _parse(check, old)
    if plan is None:
        return None, check
    try:
        return show(plan, target), check
    except ValueError as exc:
        check.general.append(Problem("not_compact", f"this plan cannot be written in the compact form: {exc}"))
        return None, check


def _parse(check: EditCheck, old: Plan) -> Plan | None:
    """The edited text as the next version of `old`; None after recording why it is not a plan (its shape, by step and line)."""
    if check.form == "compact":
        try:
            draft = read_compact(check.text)
        except PlanParseError as exc:
            _sort(check, exc.problems)
            return None
        data: object = draft.plan_data(old.goal, old.plan_id)
        check.lines = dict(draft.lines)
    else:
        try:
            data = json.loads(check.text)
        except json.JSONDecodeError as exc:
            check.general.append(Problem("malformed_json", f"{exc.msg} at line {exc.lineno} column {exc.colno}"))
            return None
    if isinstance(data, dict):
        data.pop("content_hash", None)  # the editor shows it; it is computed, not edited
        data["version"], data["revises"] = old.version + 1, old.version
        steps = [s for s in data.get("steps", []) if isinstance(s, dict) and "id" in s] if isinstance(data.get("steps"), list) else []
        check.step_ids = [str(s["id"]) for s in steps]
        check.summaries = {str(s["id"]): _summary(s) for s in steps}
    try:
        return Plan.from_data(data)
    except PlanParseError as exc:
        _sort(check, with_lines(exc.problems, check.lines) if check.lines else exc.problems)
        return None


def _summary(step: dict[str, object]) -> str:
    """``ship(name="app") after compile``: a step of the edited JSON in a few words."""
    action = f"{step['worker']}.{step.get('action')}" if step.get("worker") not in (None, "tool") else str(step.get("action"))
    params = step.get("parameters")
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)[:40]}" for k, v in params.items()) if isinstance(params, dict) else ""
    after = step.get("depends_on")
    deps = f" after {', '.join(map(str, after))}" if isinstance(after, list) and after else ""
    return f"{action}({args}){deps}"


def _sort(check: EditCheck, problems: list[Problem]) -> None:
    for p in problems:
        if p.step_id is not None and p.step_id in check.step_ids:
            check.by_step.setdefault(p.step_id, []).append(p)
        else:
            check.general.append(p)


def _registry_problems(plan: Plan, tools: list[str], cwd: Path) -> list[Problem]:
    """Every problem ``planexec validate --json --tools ...`` finds: the graph's, and what the run's tools know (tools, actions, parameters)."""
    folder = cwd / ".planexec" / "web"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"check-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"  # two edits checked at once never share a file
    path.write_text(plan.to_json(indent=2))
    command = [sys.executable, "-m", "planexec", "validate", str(path), "--json", *(a for t in tools for a in ("--tools", t))]
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=_VALIDATE_TIMEOUT, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired:
        return [Problem("not_checked", f"checking the plan against the tools took longer than {_VALIDATE_TIMEOUT:g}s")]
    finally:
        path.unlink(missing_ok=True)
    if done.returncode == 0:
        return []
    try:
        found = json.loads(done.stdout)
        return [Problem(p["rule"], p["message"], step_id=p.get("step_id"), field=p.get("field")) for p in found]
    except (ValueError, KeyError, TypeError):
        why = (done.stderr or done.stdout).strip().splitlines()
        return [Problem("not_checked", f"the tools could not be loaded to check the plan: {why[-1] if why else done.returncode}")]


def submit_edit(store: RunStore, approval: Approval, plan: Plan, *, by: str, reason: str | None) -> Approval:
    """Answer the waiting version `approval` is about with the valid edit `plan`; the denied request (see the module docstring)."""
    return edit_plan(store, approval.run_id, content_hash=approval.content_hash, plan=plan, by=by, reason=reason or None)


def stale_reason(store: RunStore, run_id: str, base: str) -> str:
    """Why the version with content hash `base` can no longer be edited, in words (decided, or edited by someone else first)."""
    try:
        asked = [a for a in store.approvals(run_id) if a.step_id is None and a.content_hash == base]
        edited = next((v.plan for v in store.plan_versions(run_id) if v.plan.content_hash == base), None)
    except RunNotFoundError:
        return "this store has no such run"
    if not asked or edited is None:
        return "the version you edited is not one that waits for approval"
    edit = find_edit(store, run_id, edited)
    if edit is not None:
        return f"another edit won: v{edited.version} was replaced by v{edit.plan.version}, edited by {edit.by or 'someone'}"
    last = asked[-1]
    return (
        f"v{edited.version} was {last.state.value} meanwhile"
        + (f" by {last.by}" if last.by else "")
        + (f": {last.reason}" if last.reason else "")
    )
