"""Durable approvals on the command line: ``planexec approvals``, ``planexec approve``, and the approvers of run and resume.

Owns listing the approvals kept in the run store (pending ones by
default: the run, the step or plan version, what it is, when it was
asked for), deciding one from any process (``approve RUN_ID [--step ID]
[--deny]``), answering a waiting plan version with an edit (``approve
RUN_ID --edit PLAN.json``: checked against the run's tools and stored as
the next version, see `store.approvals.edit_plan`; the waiting run reviews
and runs it in the same run), and the approvers ``planexec run`` and ``planexec resume``
give the engine when the run is recorded (`run_approvers`,
`resume_approvers`): every step decision goes into the store, by
``--yes`` or the person at the terminal, and with neither a step waits,
with the rest of the DAG going on, for ``planexec approve`` from another
process (also after a restart). The reviewed plan version is approved by
whoever reviewed it, frozen by its content hash; a revision is reviewed
by the policies (against the last approved version), then approved by
``--yes``, asked at the terminal with its diff, or waited for
(`ReviewingPlanApprover`; an edit is reviewed the same way, against the
last version a person approved, not the one it replaced). Without a store the step approvers are those
of `_common` (``--yes``, a prompt, else a denial). An unknown run, nothing
pending, and a store that cannot be opened are `common.UsageError`s (exit 2)
that change nothing. Thin: the store, `approval` and `policies` do the work.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from planexec import Plan, Step, validate_plan
from planexec.cli import _common as common
from planexec.cli.progress import EventLog, LiveProgress
from planexec.cli.review_terminal import ReviewTerminal, verdicts_table
from planexec.errors import PlanParseError, PolicyError, StoreError
from planexec.models import PriceTable
from planexec.plan import PlanDiff, plan_table, when_text
from planexec.policies import (
    Approver,
    CallRequest,
    PlanApprover,
    Policy,
    PolicyContext,
    PolicySet,
    Review,
    ReviewOutcome,
    StoreApprover,
    load_policies,
    review_plan,
)
from planexec.runs import PlanEdit, edit_plan, in_thread, pending_version, run_setup, step_hash
from planexec.store import Approval, ApprovalState, RunStore

__all__ = [
    "ReviewingPlanApprover",
    "add_approval_commands",
    "call_approver",
    "cmd_approvals",
    "cmd_approve",
    "resume_approvers",
    "run_approvers",
    "step_approver",
]

Display = LiveProgress | EventLog | None


def add_approval_commands(sub: Any) -> None:
    """Register ``approvals`` and ``approve`` on the CLI's subcommands."""
    p = sub.add_parser("approvals", help="approvals kept in the run store: pending ones (steps and plan versions) by default")
    p.add_argument("--run", metavar="RUN_ID", help="only this run's")
    p.add_argument("--all", action="store_true", help="decided ones too")
    p.add_argument("--json", action="store_true", help="print them as a JSON list")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.set_defaults(command=cmd_approvals)

    p = sub.add_parser("approve", help="approve (or --deny, or --edit) a pending step or plan version of a run, from any process")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--step", metavar="ID", help="the step (default: the plan's pending version)")
    p.add_argument("--deny", action="store_true", help="deny it instead")
    p.add_argument(
        "--edit", metavar="PLAN.json",
        help="answer the waiting plan version with this edit: checked against the run's tools, it becomes the next version, "
        "which the waiting run reviews with its policies and runs in the same run",
    )  # fmt: skip
    p.add_argument(
        "--at", metavar="TIME",
        help="with --step: set or move that step's time (ISO 8601 with its zone, e.g. 2026-12-05T02:00-05:00) in the plan version "
        "that waits, and approve the moved plan: the step waits as scheduled until then (and for its tools' windows)",
    )  # fmt: skip
    p.add_argument("--reason", metavar="TEXT", help="why (recorded)")
    p.add_argument("--by", metavar="NAME", help="who decides (default: your user name)")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.set_defaults(command=cmd_approve)


# --- the commands -------------------------------------------------------------------


def cmd_approvals(args: argparse.Namespace) -> int:
    """``planexec approvals``: what waits for approval (with ``--all``, what was decided too)."""
    store = common.open_run_store(args.store, common.config(), create=False)
    try:
        found = store.approvals(args.run, pending_only=not args.all)
        rows = [(a, _describe(store, a)) for a in found]
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    finally:
        store.close()
    if args.json:
        common.emit(json.dumps([{**a.to_dict(), **what} for a, what in rows], indent=2, ensure_ascii=False))
        return common.EXIT_OK
    out = common.console()
    if not rows:
        whose = f" for run {args.run}" if args.run else ""
        out.print(f"no {'' if args.all else 'pending '}approvals{whose} in {store.location}", markup=False, highlight=False)
        return common.EXIT_OK
    table = Table(title=f"{'approvals' if args.all else 'pending approvals'} in {store.location}", title_justify="left")
    for name in ("run", "what", "details", "requested (UTC)", *(("state", "by", "reason") if args.all else ())):
        table.add_column(name, overflow="fold")
    for a, what in rows:
        decided = (a.state.value, a.by or "", a.reason or "") if args.all else ()
        table.add_row(a.run_id, what["what"], what["details"], f"{a.requested_at:%Y-%m-%d %H:%M:%S}", *decided)
    out.print(table)
    pending = [a for a, _ in rows if a.state is ApprovalState.PENDING]
    if pending:
        a = pending[0]
        out.print(
            f"decide with: planexec approve {a.run_id}{f' --step {a.step_id}' if a.step_id else ''} [--deny --reason TEXT]",
            markup=False,
            highlight=False,
        )
    return common.EXIT_OK


def cmd_approve(args: argparse.Namespace) -> int:
    """``planexec approve RUN_ID [--step ID] [--deny]``: decide the pending request; a waiting run goes on."""
    if args.edit is not None:
        return _cmd_edit(args)
    if args.at is not None:
        return _cmd_at(args)
    store = common.open_run_store(args.store, common.config(), create=False)
    by = args.by or common.user()
    try:
        store.run(args.run_id)
        if args.step is not None:
            known = {s.step_id for v in store.plan_versions(args.run_id) for s in v.plan.steps}
            if args.step not in known:
                raise common.UsageError(f"run {args.run_id!r} has no step {args.step!r} (its steps: {', '.join(sorted(known)) or 'none'})")
        decided = store.decide_approval(args.run_id, step_id=args.step, approved=not args.deny, by=by, reason=args.reason)
        what = _describe(store, decided)["what"]
    except StoreError as exc:  # an unknown run, nothing pending (ApprovalError): named in the message
        raise common.store_error(exc) from None
    finally:
        store.close()
    verb = "denied" if args.deny else "approved"
    why = f": {args.reason}" if args.reason else ""
    common.say(
        f"{verb} {what} of run {args.run_id} (by {by}){why}; a run waiting for it goes on, a stopped one with: planexec resume {args.run_id}"
    )
    return common.EXIT_OK


def _cmd_edit(args: argparse.Namespace) -> int:
    """``planexec approve RUN_ID --edit PLAN.json``: the edit, checked, becomes the plan's next version (exit 1 on its problems)."""
    if args.step is not None or args.deny:
        raise common.UsageError("--edit answers the waiting plan version: give no --step and no --deny")
    config = common.config()
    store = common.open_run_store(args.store, config, create=False)
    by = args.by or common.user()
    try:
        found = pending_version(store, args.run_id)
        if found is None:
            raise common.UsageError(f"no stored plan version of run {args.run_id!r} waits for approval: there is nothing to edit")
        approval, old = found
        tools = [str(t) for t in run_setup(store, args.run_id).get("tools", [])]
        plan = _edited_plan(Path(args.edit), old, tools, config)
        if plan is None:
            return common.EXIT_FAILED
        edit_plan(store, args.run_id, content_hash=approval.content_hash, plan=plan, by=by, reason=args.reason)
    except StoreError as exc:  # an unknown run, a version decided or edited meanwhile (ApprovalError): named in the message
        raise common.store_error(exc) from None
    finally:
        store.close()
    common.say(
        f"plan v{old.version} of run {args.run_id} is replaced by your edit v{plan.version} (by {by}; nothing of v{old.version} ran); "
        "the waiting run checks it, its policies review it, and it runs in the same run once approved"
    )
    return common.EXIT_OK


def _cmd_at(args: argparse.Namespace) -> int:
    """``planexec approve RUN_ID --step ID --at TIME``: the waiting plan version with the step moved to TIME, stored as
    the person's edit and approved by them in one transaction (exit 1 when the moved plan has problems)."""
    if args.step is None or args.deny:
        raise common.UsageError("--at moves one step's time: name it with --step ID (and give no --deny)")
    at = _time(args.at)
    config = common.config()
    store = common.open_run_store(args.store, config, create=False)
    by = args.by or common.user()
    try:
        found = pending_version(store, args.run_id)
        if found is None:
            raise common.UsageError(
                f"no plan version of run {args.run_id!r} waits for approval: --at moves a step's time in a plan a person still "
                "approves (a queued run, or a run waiting for its plan's approval)"
            )
        approval, old = found
        if args.step not in old.step_ids:
            raise common.UsageError(
                f"plan v{old.version} of run {args.run_id!r} has no step {args.step!r} (its steps: {', '.join(old.step_ids)})"
            )
        data = json.loads(old.to_json())
        data.pop("content_hash", None)
        for step in data["steps"]:
            if step["id"] == args.step:
                step["not_before"] = at.isoformat()
        data["version"], data["revises"] = old.version + 1, old.version
        try:
            plan = Plan.from_data(data)
        except PlanParseError as exc:  # a time the plan cannot hold (out of range): named, nothing stored
            common.print_problems(exc.problems, exc.plan_id, as_json=False)
            return common.EXIT_FAILED
        tools = [str(t) for t in run_setup(store, args.run_id).get("tools", [])]
        problems = validate_plan(plan, common.plan_registry(plan, tools, config))
        if problems:
            common.print_problems(problems, plan.plan_id, as_json=False)
            return common.EXIT_FAILED
        reason = f"step {args.step} not before {at.isoformat()}" + (f": {args.reason}" if args.reason else "")
        edit_plan(store, args.run_id, content_hash=approval.content_hash, plan=plan, by=by, reason=reason, approve=True)
    except StoreError as exc:  # an unknown run, a version decided or edited meanwhile (ApprovalError): named in the message
        raise common.store_error(exc) from None
    finally:
        store.close()
    window = when_text(plan, plan.step(args.step))
    common.say(
        f"approved plan v{plan.version} of run {args.run_id} (by {by}) with step {args.step} moved to {at.isoformat()}"
        f" ({window}); it waits as scheduled until then, and a waiting run goes on"
    )
    return common.EXIT_OK


def _time(text: str) -> datetime:
    """An ISO 8601 time with its zone; a `UsageError` saying how to write one otherwise."""
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise common.UsageError(f"--at {text!r} is not a time: write ISO 8601 with its zone, as 2026-12-05T02:00-05:00") from None
    if at.utcoffset() is None:
        raise common.UsageError(f"--at {text!r} has no zone: add one, as 2026-12-05T02:00-05:00 or 2026-12-05T07:00Z")
    if at <= datetime.now(UTC):  # a typo in the year would start the step at once: a time to wait for lies ahead
        raise common.UsageError(f"--at {text!r} has passed: the step would start at once; give a time ahead (or approve without --at)")
    return at


def _edited_plan(path: Path, old: Plan, tools: list[str], config: Any) -> Plan | None:
    """The plan in `path` as the next version of `old`, checked against the run's tools; None after printing its problems."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise common.UsageError(f"plan file {str(path)!r} does not exist") from None
    except (OSError, ValueError) as exc:
        raise common.UsageError(f"cannot read plan file {str(path)!r}: {exc}") from None
    if isinstance(data, dict):
        if isinstance(data.get("version"), int) and data["version"] != old.version:  # written against another version
            raise common.UsageError(
                f"{path} edits plan v{data['version']}, but v{old.version} waits now (see planexec approvals): "
                f'make your change to v{old.version}, or leave out "version" to edit whichever waits'
            )
        data.pop("content_hash", None)  # computed, not edited
        data["version"], data["revises"] = old.version + 1, old.version
    try:
        plan = Plan.from_data(data)
    except PlanParseError as exc:
        common.print_problems(exc.problems, exc.plan_id, as_json=False)
        return None
    problems = validate_plan(plan, common.plan_registry(plan, tools, config))
    if problems:
        common.print_problems(problems, plan.plan_id, as_json=False)
        return None
    return plan


def _describe(store: RunStore, approval: Approval) -> dict[str, Any]:
    """What an approval is about, for people (``what``, ``details``) and for JSON (the other keys)."""
    versions = store.plan_versions(approval.run_id)
    if approval.step_id is not None:
        call = _call_request(store, approval)
        if call is not None:
            args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)[:80]}" for k, v in sorted(call.arguments.items()))
            why = f" ({call.rule}: {call.reason})" if call.rule else ""
            chain = f"; data from: {' <- '.join(call.chain)}" if call.chain else ""
            return {
                "kind": "call",
                "what": f"a call in step {call.step_id}",
                "details": f"{call.worker} calls {call.tool}({args}){why}{chain}",
                "call": call.to_dict(),
            }
        step = _find_step(versions, approval.step_id, approval.content_hash)
        if step is None:
            return {"kind": "step", "what": f"step {approval.step_id}", "details": "(not in the stored plan)"}
        text = f"{step.worker}.{step.action}" + (f": {step.instruction}" if step.instruction else "")
        return {
            "kind": "step",
            "what": f"step {step.step_id}",
            "details": text,
            "worker": step.worker,
            "action": step.action,
            "instruction": step.instruction,
        }
    for v in versions:
        if v.plan.content_hash == approval.content_hash:
            details = f"{len(v.plan.steps)} steps: {', '.join(v.plan.step_ids)}"
            if v.diff is not None:
                details += "\n" + v.diff.render()
            diff = v.diff.to_dict() if v.diff is not None else None
            return {
                "kind": "plan",
                "what": f"plan v{v.version}",
                "details": details,
                "plan_version": v.version,
                "steps": len(v.plan.steps),
                "diff": diff,
            }
    # a revision is stored once approved: until then the events say which version it is and why it was written
    events = store.events(approval.run_id)
    asked = [e for e in events if e.type == "approval_requested" and e.step_id is None and e.content_hash == approval.content_hash]
    version = asked[-1].plan_version if asked else None
    reasons = [e.reason for e in events if e.type == "replan_started"]
    details = "a revision, stored once approved (its diff is printed by the waiting run)"
    if reasons:
        details += f"; replanned because: {reasons[-1]}"
    return {
        "kind": "plan",
        "what": f"plan v{version}" if version else "the plan",
        "details": details,
        "plan_version": version,
        "steps": None,
        "diff": None,
    }


def _call_request(store: RunStore, approval: Approval) -> CallRequest | None:
    """The tool call an approval is about, when it is one (its request is in the run's events)."""
    for e in store.events(approval.run_id):
        if e.type == "approval_requested" and e.content_hash == approval.content_hash and e.call is not None:
            found: CallRequest = e.call
            return found
    return None


def _find_step(versions: Iterable[Any], step_id: str, content_hash: str) -> Step | None:
    """The step as approved (its hash matches), else its latest definition."""
    latest = None
    for v in versions:
        for s in v.plan.steps:
            if s.step_id == step_id:
                if step_hash(s) == content_hash:
                    found: Step = s
                    return found
                latest = s
    return latest


# --- the approvers of run and resume ---------------------------------------------------


def _say(display: Display, line: str) -> None:
    """A line through the live display (above its table), else on stderr; at once, a person waits on it."""
    if display is not None:
        display.note(line)
        sys.stdout.flush()
    else:
        print(line, file=sys.stderr, flush=True)


def _store_flag(store_option: str | None) -> str:
    return f" --store {store_option}" if store_option else ""


def step_approver(
    store: RunStore | None, *, yes: bool, interactive: bool, display: Display, store_option: str | None = None
) -> Approver | StoreApprover:
    """What decides a step with ``requires_approval``; with a store every decision is kept there.

    ``--yes`` (by ``--yes``) or the terminal's prompt (by the user name)
    decide here; with neither the step waits for ``planexec approve`` from
    another process. Without a store: `_common`'s approver (with neither, a denial).
    """
    here = common.approver(yes=yes, interactive=interactive, display=display)
    if store is None:
        return here
    if yes:
        return StoreApprover(store, ask=here, by="--yes")
    if interactive:
        return StoreApprover(store, ask=here, by=common.user())
    flag = _store_flag(store_option)

    def waiting(run_id: str, step_id: str | None) -> None:
        _say(display, f"step {step_id} of run {run_id} waits for approval: planexec approve {run_id} --step {step_id}{flag}")

    return StoreApprover(store, on_wait=waiting)


def call_approver(store: RunStore | None, *, yes: bool, interactive: bool, display: Display, store_option: str | None = None) -> Any:
    """What decides a tool call a role worker asks to make; with a store every decision is kept there, keyed by the call.

    ``--yes`` approves plain calls and refuses escalations (untrusted data
    steering a call needs a person); the terminal's prompt shows a person
    the call, its arguments, the rule and where the data came from; with
    neither, a plain call is refused and an escalation waits for
    ``planexec approve`` from another process.
    """
    here = common.call_asker(yes=yes, interactive=interactive, display=display)
    if store is None:
        return here
    if yes:
        return StoreApprover(store, ask=here, by="--yes", person=False)
    if interactive:
        return StoreApprover(store, ask=here, by=common.user(), person=True)
    flag = _store_flag(store_option)

    def waiting(run_id: str, step_id: str | None) -> None:
        _say(display, f"a tool call in step {step_id} of run {run_id} waits for a person: planexec approve {run_id} --step {step_id}{flag}")

    return StoreApprover(store, on_wait=waiting, person=True)


class ReviewingPlanApprover(PlanApprover):
    """A `PlanApprover` for the CLI: decides a plan version here when it can, else waits for ``planexec approve``.

    The version a person, a policy or ``--yes`` reviewed before the run
    (`reviewed`, a content hash) is approved by `reviewed_by`. Any other
    version (a revision; on resume, one never reviewed) is reviewed by the
    `policies` with the last approved version as context (so only new or
    changed steps escalate, unless a policy asks for the whole plan): a
    reject denies it (by ``policy``); else ``--yes`` approves it; else the
    person at `terminal` sees the diff and the verdicts and answers approve
    or reject (a revision cannot be edited: the engine runs it as written);
    else it waits for another process, printing the command and the diff.
    A decision stored before (another process, before a restart) stands.
    """

    def __init__(
        self,
        store: RunStore,
        *,
        reviewed: str | None = None,
        reviewed_by: str = "person",
        policies: Iterable[Policy] = (),
        context: PolicyContext | None = None,
        yes: bool = False,
        terminal: ReviewTerminal | None = None,
        display: Display = None,
        store_option: str | None = None,
        poll: float = 0.5,
    ) -> None:
        # a revision that widens what steps may call needs a person: --yes is not one
        super().__init__(store, ask=None, by=reviewed_by, poll=poll, person=not yes)
        self.reviewed = reviewed
        self.policies = list(policies)
        self.context = context if context is not None else PolicyContext()
        self.yes = yes
        self.terminal = terminal
        self.display = display
        self.store_option = store_option

    async def approve_plan(self, run_id: str, plan: Plan, diff: PlanDiff | None) -> bool | PlanEdit:
        """True once this version is approved (here, or by another process), a `PlanEdit` once a person edited it; see the class docstring."""
        stored = await in_thread(_request, self.store, run_id, plan.content_hash)
        if stored is None or stored.state is ApprovalState.PENDING:
            verdict = await self._verdict(run_id, plan, diff)
            if verdict is None:
                await in_thread(self.store.request_approval, run_id, plan.content_hash)
                self._waiting(run_id, plan, diff)
            else:
                # asked and decided in one transaction (a decision another process stored meanwhile stands): never
                # pending, so a `planexec approve RUN_ID` meant for the version that waits next cannot decide this one
                approved, by, reason = verdict
                await in_thread(self.store.request_approval, run_id, plan.content_hash, approved=approved, by=by, reason=reason)
        return await super().approve_plan(run_id, plan, diff)  # the stored decision, or wait for one

    async def _verdict(self, run_id: str, plan: Plan, diff: PlanDiff | None) -> tuple[bool, str, str | None] | None:
        """(approved, by, reason) decided here, or None: wait for another process."""
        if diff is None and plan.content_hash == self.reviewed:
            return True, self.by, None
        previous = await in_thread(_previous, self.store, run_id, plan)
        review = review_plan(plan, self.policies, dataclasses.replace(self.context, previous=previous))
        if review.decision == "reject":
            reason = "rejected by policy: " + "; ".join(review.reasons("reject"))
            _say(self.display, f"plan v{plan.version} of run {run_id} was not approved: {reason}")
            return False, "policy", reason
        escalated = "; ".join(review.reasons("escalate"))
        if self.yes:
            return True, "--yes", f"escalation approved by --yes: {escalated}" if escalated else None
        if self.terminal is not None:
            return await self._ask_person(run_id, plan, diff, review)
        return None

    async def _ask_person(self, run_id: str, plan: Plan, diff: PlanDiff | None, review: Review) -> tuple[bool, str, str | None]:
        terminal, by = self.terminal, common.user()
        assert terminal is not None
        await in_thread(self.store.request_approval, run_id, plan.content_hash)  # pending while asked: another process may decide it

        def ask() -> tuple[bool, str, str | None]:
            if diff is not None:
                terminal.say(f"run {run_id}: plan v{plan.version} revises v{diff.old_version}; changes:\n{diff.render()}")
            else:
                terminal.console.print(plan_table(plan))
            if review.verdicts:
                terminal.console.print(verdicts_table(review))
            if review.decision == "escalate":
                scope = f"the new or changed steps: {', '.join(review.steps)}" if review.scope == "changes" else "the whole plan"
                terminal.say(f"policies ask a person to approve {scope}", "yellow")
            while True:
                try:
                    key = terminal.answer(f"approve or reject plan v{plan.version}? [a/r] ").lower()
                except EOFError:
                    return False, by, "no answer (end of input)"
                if key in ("a", "approve"):
                    return True, by, None
                if key in ("r", "reject"):
                    try:
                        why = terminal.answer("reason for rejecting: ")
                    except EOFError:
                        why = ""
                    return False, by, why or "rejected by a person (no reason given)"
                terminal.say("answer a (approve) or r (reject)")

        decided: tuple[bool, str, str | None]
        if self.display is None:
            decided = await in_thread(ask)
        else:
            with self.display.paused():
                decided = await in_thread(ask)
        return decided

    def _waiting(self, run_id: str, plan: Plan, diff: PlanDiff | None) -> None:
        line = f"plan v{plan.version} of run {run_id} waits for approval: planexec approve {run_id}{_store_flag(self.store_option)}"
        _say(self.display, line + (f"\n{diff.render()}" if diff is not None else f" ({len(plan.steps)} steps)"))


def _request(store: RunStore, run_id: str, content_hash: str) -> Approval | None:
    """The stored request for the plan version `content_hash` (decided or pending), or None when it was never asked for."""
    found = [a for a in store.approvals(run_id) if a.step_id is None and a.content_hash == content_hash]
    return found[-1] if found else None


def _previous(store: RunStore, run_id: str, plan: Plan) -> Plan | None:
    """The last approved version before `plan` (the one it revises, when approved), or None.

    A replan's revision is stored only once approved; an edit is stored
    before, and the version it replaced was never approved: a policy then
    reviews an edit against what a person last approved, not against it.
    """
    approved = {a.content_hash for a in store.approvals(run_id) if a.step_id is None and a.state is ApprovalState.APPROVED}
    versions = [v for v in store.plan_versions(run_id) if v.version < plan.version and v.plan.content_hash in approved]
    wanted = [v for v in versions if v.version == plan.revises] or versions
    return wanted[-1].plan if wanted else None


def _context(registry: Any, config: Any) -> PolicyContext:
    return PolicyContext(registry=registry, prices=PriceTable.default(config.prices))


def _terminal(interactive: bool) -> ReviewTerminal | None:
    return ReviewTerminal(common.console(stderr=True), interactive=True) if interactive else None


def run_approvers(
    store: RunStore | None,
    outcome: ReviewOutcome,
    *,
    registry: Any,
    config: Any,
    policies: Iterable[Policy],
    yes: bool,
    display: Display,
    store_option: str | None = None,
) -> dict[str, Any]:
    """The engine options ``approver`` and (with a store) ``plan_approver`` for ``planexec run``, after the review `outcome`."""
    interactive = sys.stdin.isatty()
    options: dict[str, Any] = {
        "approver": step_approver(store, yes=yes, interactive=interactive, display=display, store_option=store_option),
        "call_approver": call_approver(store, yes=yes, interactive=interactive, display=display, store_option=store_option),
    }
    if store is not None:
        options["plan_approver"] = ReviewingPlanApprover(
            store, reviewed=outcome.plan.content_hash if outcome.approved else None,
            reviewed_by=common.user() if outcome.by == "person" else outcome.by,
            policies=policies, context=_context(registry, config), yes=yes, terminal=_terminal(interactive),
            display=display, store_option=store_option,
        )  # fmt: skip
    return options


def resume_approvers(
    store: RunStore, run_id: str, *, registry: Any, config: Any, yes: bool, display: Display, store_option: str | None = None
) -> dict[str, Any]:
    """The approvers for ``planexec resume``: the same as a run's, finding pending requests again.

    A run started under plan approval stays under it (a version with no
    decision is reviewed as a revision is: planexec.toml's policies, then
    ``--yes``, the terminal, or another process); a run that was not
    (streamed, or started from Python without one) resumes without.
    """
    interactive = sys.stdin.isatty()
    options: dict[str, Any] = {
        "approver": step_approver(store, yes=yes, interactive=interactive, display=display, store_option=store_option),
        "call_approver": call_approver(store, yes=yes, interactive=interactive, display=display, store_option=store_option),
    }
    try:
        gated = any(a.step_id is None for a in store.approvals(run_id))
        policies: PolicySet | list[Policy] = load_policies(config.policies) if gated else []
    except (StoreError, PolicyError) as exc:
        raise common.UsageError(str(exc)) from None
    if gated:
        options["plan_approver"] = ReviewingPlanApprover(
            store, policies=policies, context=_context(registry, config), yes=yes, terminal=_terminal(interactive),
            display=display, store_option=store_option,
        )  # fmt: skip
    return options
