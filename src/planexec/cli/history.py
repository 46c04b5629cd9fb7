"""The history commands of the CLI: ``planexec runs``, ``planexec show RUN_ID`` and ``planexec logs RUN_ID``.

Owns reading runs back from the run store for a person: the list of runs
(status, goal, duration, cost), one run rebuilt from its stored events (its
plan and versions with their diffs, each step's state, inputs, outputs,
errors, usage, verdicts, approvals and timings), and its events as lines,
followed from another process while the run goes on (``--follow`` polls the
store and ends with `RunFinished`). The store is chosen by ``--store``,
``PLANEXEC_STORE``, ``store`` in planexec.toml, else ``.planexec/runs.db``;
these commands only read, and never create a store. A store that cannot be
opened or read, or an unknown run id, is a `common.UsageError` (exit 2).
What was changed in the store after it was written is shown as changed:
``runs`` marks a row that disagrees with its run's events (CHANGED), and
``show`` starts with a warning and each problem `verify_run` finds.
Everything is printed through `_common` (`console`, `say`, `emit`), which
hides secrets; the JSON of ``show --json`` and ``logs --json`` (a run's
export) too. Reuses the plumbing of `_common` and the lines of `progress`;
imports the store and records only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from planexec import RunStatus, Step, StepRecord, StepState
from planexec.cli import _common as common
from planexec.cli.progress import countdown, describe_call, describe_event, show_time
from planexec.errors import StoreError
from planexec.events import RunResumed, StepResolved
from planexec.plan import grants_text
from planexec.runs import PlanVersion, describe_refused
from planexec.store import Approval, RunStore, RunSummary, RunView, replay, sqlite_path, store_target, verify_run

__all__ = ["add_history_commands", "cmd_logs", "cmd_runs", "cmd_show"]


def add_history_commands(sub: Any) -> None:
    """Register ``runs``, ``show`` and ``logs`` on the CLI's subcommands."""
    p = sub.add_parser("runs", help="list recorded runs: status, goal, duration, cost")
    p.add_argument(
        "--status",
        choices=[s.value for s in RunStatus] + ["interrupted"],
        help="only runs with this status (interrupted: running when its process died)",
    )
    p.add_argument("--limit", type=int, default=20, metavar="N", help="at most N runs, newest first (default 20)")
    p.add_argument("--json", action="store_true", help="print the runs as a JSON list")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.set_defaults(command=cmd_runs)

    p = sub.add_parser("show", help="one recorded run: plan, versions, each step's state, inputs, outputs, errors, usage, timings")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--json", action="store_true", help="print the run as one JSON object")
    p.add_argument(
        "--step",
        metavar="STEP_ID",
        help="only this step, with every untrusted origin its output (or, without one, its inputs) derives from, upstream included",
    )
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.set_defaults(command=cmd_show)

    p = sub.add_parser("logs", help="a recorded run's events, one per line; --follow prints them as they happen")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events until the run finishes")
    p.add_argument("--json", action="store_true", help="one JSON event per line")
    p.add_argument("--poll", type=float, default=0.25, metavar="SECONDS", help="how often --follow reads the store (default 0.25)")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.set_defaults(command=cmd_logs)


def _open(args: argparse.Namespace, *, missing_ok: bool = False) -> RunStore | None:
    """The store, opened to read; None when `missing_ok` and no SQLite store file exists yet."""
    config = common.config()
    if missing_ok:
        try:
            path = sqlite_path(store_target(args.store, config.store))
        except StoreError as exc:
            raise common.UsageError(str(exc)) from None
        if path is not None and not path.exists():
            return None
    return common.open_run_store(args.store, config, create=False)


def cmd_runs(args: argparse.Namespace) -> int:
    """``planexec runs``: the newest runs as a table (or JSON)."""
    if args.limit < 1:
        raise common.UsageError("--limit must be at least 1")
    store = _open(args, missing_ok=True)
    if store is None:
        common.emit("[]" if args.json else "no runs recorded here yet (no run store file)")
        return common.EXIT_OK
    try:
        if args.status == "interrupted":  # stored as running: told apart by their leases
            runs = [r for r in store.runs(limit=None, status=RunStatus.RUNNING) if r.interrupted][: args.limit]
        else:
            runs = store.runs(limit=args.limit, status=args.status)
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    finally:
        store.close()
    if args.json:
        common.emit(json.dumps([{**r.to_dict(), "state": r.state} for r in runs], indent=2, ensure_ascii=False))
        return common.EXIT_OK
    out = common.console()
    if not runs:
        out.print(f"no runs{' with status ' + args.status if args.status else ''} in {store.location}", markup=False, highlight=False)
        return common.EXIT_OK
    table = Table(title=f"runs in {store.location}", title_justify="left")
    for name, kw in (("run", {"no_wrap": True}), ("status", {"no_wrap": True}), ("goal", {"overflow": "fold"}),
                     ("started (UTC)", {"no_wrap": True}), ("duration", {"justify": "right"}), ("steps", {"justify": "right"}),
                     ("cost", {"justify": "right"})):  # fmt: skip
        table.add_column(name, **kw)
    for r in runs:
        table.add_row(
            r.run_id + (f"\n  (sub-run of {r.parent_run_id})" if r.parent_run_id else ""),
            Text(r.state + (" (CHANGED)" if r.mismatch else ""), style="red" if r.interrupted or r.mismatch else _STYLE.get(r.status, "")),
            r.goal[:120],
            f"{r.started_at:%Y-%m-%d %H:%M:%S}",
            _duration(r),
            str(r.step_count),
            r.usage.describe_cost(),
        )
    out.print(table)
    changed = [r for r in runs if r.mismatch]
    for r in changed:
        out.print(Text(f"{r.run_id}: CHANGED: {'; '.join(r.mismatch)}", style="red"), soft_wrap=True)
    if changed:
        out.print(
            Text(f"{len(changed)} run(s) marked CHANGED: their runs row was edited in the store (see: planexec store check)", style="red")
        )
    return common.EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    """``planexec show RUN_ID``: the run rebuilt from its stored events."""
    store = _open(args)
    assert store is not None
    try:
        summary = store.run(args.run_id)
        events = store.events(args.run_id)
        versions = store.plan_versions(args.run_id)
        approvals = store.approvals(args.run_id)
        audit = verify_run(store, args.run_id)  # what was changed is shown as changed, not as what the run did
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    finally:
        store.close()
    plan = versions[-1].plan if versions else None
    view = replay(events, plan)
    undecided: list[str] | None = None
    if summary.status is RunStatus.NEEDS_DECISION:
        view, undecided = _held(view, events)
    steps = {s.step_id: s for v in versions for s in v.plan.steps}  # the latest definition of each step
    if args.json and args.step is not None:
        rec = view.steps.get(args.step) or view.superseded.get(args.step)
        if rec is None:
            raise common.UsageError(f"run {args.run_id} has no step {args.step!r}")
        of = [args.step] if rec.output is not None else sorted(steps[args.step].references) if args.step in steps else []
        one = {
            "run_id": summary.run_id,
            "step": rec.model_dump(mode="json"),
            "origins": [o.label() for o in view.origins(of)],
            "untrusted_origins": [o.label() for o in view.origins(of, untrusted_only=True)],
            "changed": [p.render() for p in audit.problems],
        }
        common.emit(json.dumps(one, indent=2, ensure_ascii=False))
        return common.EXIT_OK
    if args.json:
        shown = {**_show_json(summary, versions, view, approvals, len(events)), "changed": [p.render() for p in audit.problems]}
        common.emit(json.dumps(shown, indent=2, ensure_ascii=False))
        return common.EXIT_OK
    out = common.console()
    said: list[str] = []

    def say(text: str) -> None:  # plain lines, printed a few hundred at a time: rich's cost is a call's, not a line's
        said.append(text)
        if len(said) >= _LINES_A_PRINT:
            flush()

    def flush() -> None:
        if said:
            out.print("\n".join(said), markup=False, highlight=False, soft_wrap=True)
            said.clear()

    if not audit.ok:
        where = f" --store {store.location}" if args.store else ""
        out.print(Text(f"WARNING: run {summary.run_id} was changed in the store after it was recorded; what follows is not what it did "
                       f"(see: planexec audit verify {summary.run_id}{where})", style="bold red"), soft_wrap=True)  # fmt: skip
        for problem in audit.problems:
            out.print(Text(f"  {problem.render()}", style="red"), soft_wrap=True)

    if args.step is not None:  # one step, with its whole chain
        if summary.interrupted:  # as the whole run shows it: a step it had running is cut off, not running
            view = _cut_off(view)
        rec = view.steps.get(args.step) or view.superseded.get(args.step)
        if rec is None:
            known = ", ".join(list(view.steps)[:20]) + (", ..." if len(view.steps) > 20 else "")
            raise common.UsageError(f"run {args.run_id} has no step {args.step!r} (its steps: {known or 'none yet'})")
        say(f"run {summary.run_id}: {summary.goal}")
        for line in _step_lines(args.step, rec, steps.get(args.step), view, whole=True):
            say(line)
        flush()
        return common.EXIT_OK

    say(f"run {summary.run_id}: {summary.goal}")
    status = f"status {summary.state}" + (f" ({summary.reason})" if summary.reason else "")
    if summary.interrupted:
        status += f" (its process died with {len(view.in_flight)} step(s) in flight; continue with: planexec resume {summary.run_id})"
    elif summary.lease is not None:
        status += f" by {summary.lease.describe()}"
    say(f"  {status} · started {summary.started_at:%Y-%m-%d %H:%M:%S} UTC · {_duration(summary, view)} · {len(events)} events")
    u = summary.usage
    say(f"  usage: {u.input_tokens} tokens in{u.describe_cache()}, {u.output_tokens} out, {u.model_calls} model calls, {u.describe_cost()}")
    if summary.parent_run_id:
        say(f"  sub-run of {summary.parent_run_id} (step {summary.parent_step_id})")
    refused = describe_refused(view.refused_calls())
    if refused:
        say(f"  {refused}")
    if view.due is not None and summary.status is RunStatus.SCHEDULED:
        say(f"  due {show_time(view.due)} ({countdown(view.due, datetime.now(UTC))}): a worker resumes it then (planexec worker)")
    say(f"plan {summary.plan_id!r} · version {summary.plan_version} · {summary.content_hash}")
    windows = versions[-1].plan.windows if versions else None
    for tool, spec in (windows or {}).items():
        say(f"  window: {tool} runs only in {' or '.join(spec)}")
    for v in versions:
        diff = f": {v.diff.render().replace(chr(10), '; ')}" if v.diff is not None else ""
        say(f"  v{v.version} ({len(v.plan.steps)} steps) · {v.reason}{diff}")
    if summary.interrupted:
        view = _cut_off(view)
    table = _steps_table(view, summary)
    if isinstance(table, str):
        say(table)
    else:
        flush()
        out.print(table)
    for sid, rec in view.steps.items():
        for line in _step_lines(sid, rec, steps.get(sid), view, run_id=summary.run_id):
            say(line)
    if view.in_flight:
        what = "cut off when its process died" if summary.interrupted else "in flight when the log ends (started, never ended)"
        say(f"{what}: {', '.join(view.in_flight)}")
    for a in approvals:
        what = f"step {a.step_id}" if a.step_id else "the plan"
        by = f" by {a.by}" if a.by else ""
        say(f"approval #{a.approval_id} of {what}: {a.state.value}{by}" + (f" ({a.reason})" if a.reason else ""))
    if summary.finished:
        say("answer: " + (_short(view.answer, 2000) if view.answer is not None else "none"))
        if view.answer is not None and view.answer_untrusted:
            say(view.answer_warning())
    if undecided is not None:
        say(common.decision_hint(summary.run_id, undecided))
    flush()
    return common.EXIT_OK


_LINES_A_PRINT = 500  # `show`'s lines printed in one call: 12,000 lines took 1.9 s one a call, 0.2 s so


def _held(view: RunView, events: list[Any]) -> tuple[RunView, list[str]]:
    """The view with the steps the last resume held waiting for a decision (the replay sees them running); the undecided ones.

    A step a person has resolved since (``planexec resolve``) says what was
    decided; it takes effect at the next ``planexec resume``.
    """
    resumed = [e for e in events if isinstance(e, RunResumed)]
    if not resumed:
        return view, []
    decided = {e.step_id: e for e in events if isinstance(e, StepResolved) and e.seq > resumed[-1].seq}
    held = [sid for sid in resumed[-1].held if sid in view.steps]
    steps = dict(view.steps)
    for sid in held:
        d = decided.get(sid)
        why = f"decided by {d.by}: {d.decision} (at the next planexec resume)" if d else _HELD
        steps[sid] = steps[sid].model_copy(update={"state": StepState.NEEDS_DECISION, "reason": why})
    in_flight = [sid for sid in view.in_flight if sid not in held]
    return dataclasses.replace(view, steps=steps, in_flight=in_flight), [sid for sid in held if sid not in decided]


_HELD = "it was running when the run stopped and is not idempotent: retry, skip or mark it done"
_CUT_OFF = "it was running when the run's process died: planexec resume runs it again if it is idempotent, else holds it"


def _cut_off(view: RunView) -> RunView:
    """The view of an interrupted run: the steps it had running are cut off, not running (no process runs them)."""
    steps = {
        sid: rec.model_copy(update={"reason": _CUT_OFF}) if sid in view.in_flight and rec.state is StepState.RUNNING else rec
        for sid, rec in view.steps.items()
    }
    return dataclasses.replace(view, steps=steps)


def _state(rec: StepRecord) -> str:
    """A step's state as ``show`` prints it: a held step is ``held``, a step cut off by a dead process ``interrupted``."""
    if rec.state is StepState.NEEDS_DECISION:
        return "held"
    if rec.state is StepState.RUNNING and rec.reason == _CUT_OFF:
        return "interrupted"
    return str(rec.state.value)


def _show_json(summary: RunSummary, versions: list[PlanVersion], view: RunView, approvals: list[Approval], events: int) -> dict[str, Any]:
    """What ``planexec show --json`` prints: the run, its plan versions, each step, its approvals, its answer."""
    return {
        "run": {**summary.to_dict(), "state": summary.state},
        "versions": [v.model_dump(mode="json") for v in versions],
        "steps": {sid: rec.model_dump(mode="json") for sid, rec in view.steps.items()},
        "superseded": {sid: rec.model_dump(mode="json") for sid, rec in view.superseded.items()},
        "in_flight": view.in_flight,
        "approvals": [a.to_dict() for a in approvals],
        "answer": view.to_dict()["answer"],
        "answer_untrusted": view.answer_untrusted,
        "events": events,
    }


def _step_lines(sid: str, rec: StepRecord, step: Step | None, view: RunView, *, whole: bool = False, run_id: str = "") -> list[str]:
    """One step of ``planexec show``: what it is, its inputs, timings, output or error, verdicts, sub-run events."""
    t0 = view.started_at
    lines: list[str] = []
    lines.append(f"{sid} · {_state(rec)} · {rec.worker or (step.worker if step else '?')}.{rec.action or (step.action if step else '?')}")
    if step is not None:
        if step.dependencies:
            lines.append(f"  after: {', '.join(step.dependencies)}")
        if step.instruction:
            lines.append(f"  instruction: {step.instruction}")
        if step.parameters:
            lines.append(f"  inputs: {_short(step.parameters)}")
        if step.not_before is not None:
            lines.append(f"  not before: {step.not_before.isoformat()} ({show_time(step.not_before)})")
    if rec.state is StepState.SCHEDULED and rec.due is not None:
        lines.append(f"  scheduled: waits until {show_time(rec.due)} ({countdown(rec.due, datetime.now(UTC))})")
    if rec.started_at is not None and t0 is not None:
        ended = f", ended +{(rec.finished_at - t0).total_seconds():.3f}s" if rec.finished_at else ""
        lines.append(
            f"  started +{(rec.started_at - t0).total_seconds():.3f}s{ended}, {rec.wall_time:.3f}s working, {rec.attempts} attempt(s)"
        )
    if step is not None and step.capabilities is not None:
        lines.append(f"  may call: {grants_text(step)}")
    if rec.output is not None:
        lines.append(f"  output: {_short(rec.output.value)}")
        prov = rec.output.provenance
        if whole:  # every one, upstream included: work in proportion to the step's ancestry
            untrusted = [s.label() for s in view.origins([sid], untrusted_only=True)]
            more = ""
        else:  # the nearest ones, as the run summed them up: a run's whole show stays linear in its steps
            untrusted = prov.untrusted_labels()
            more = f", and more upstream (planexec show {run_id} --step {sid} lists every one)" if prov.more_untrusted else ""
        if untrusted:
            lines.append(f"  output derives from untrusted data: {', '.join(untrusted)}{more}")
    elif step is not None and step.references:  # no output: what its inputs brought in (a refused call's whole chain)
        untrusted = [s.label() for s in view.origins(sorted(step.references), untrusted_only=True)]
        if untrusted:
            lines.append(f"  inputs derive from untrusted data: {', '.join(untrusted)}")
    if step is not None and step.models is not None:
        lines.append(f"  models: {' → '.join(step.models)}" + (f" · difficulty {step.difficulty}" if step.difficulty else ""))
    for tried in rec.model_attempts:  # each attempt on a model chosen for it: which, what it cost, how it ended
        u = tried.usage
        end = "succeeded" if tried.error is None else f"{tried.error.rule} → {tried.then}"
        lines.append(
            f"  attempt {tried.attempt} on {tried.model}: {u.model_calls} model calls, {u.total_tokens} tokens, {u.describe_cost()}: {end}"
        )
    if rec.error is not None:
        lines.append(f"  error: {rec.error.render()}")
    if rec.reason and rec.state.value != "succeeded":
        lines.append(f"  reason: {rec.reason}")
    for verdict in rec.verdicts:
        lines.append(
            f"  verdict (attempt {verdict['attempt']}) by {verdict['critic']}: "
            f"{'approved' if verdict['approved'] else 'rejected'}: {'; '.join(verdict['reasons'])}"
        )
    lines += [f"  {describe_call(call)}" for call in rec.calls]
    for inner in view.sub_events.get(sid, []):
        lines.append(f"  ⤷ {inner.get('type')}" + (f" {inner['step_id']}" if "step_id" in inner else ""))
    return lines


def cmd_logs(args: argparse.Namespace) -> int:
    """``planexec logs RUN_ID [--follow]``: the run's events as lines, and new ones as they are stored."""
    if args.poll <= 0:
        raise common.UsageError("--poll must be greater than 0")
    store = _open(args)
    assert store is not None
    try:
        store.run(args.run_id)
        after, t0 = -1, None
        while True:
            batch = store.events(args.run_id, after_seq=after)
            for ev in batch:
                if args.json:
                    line = ev.to_json()
                else:
                    t0 = t0 or ev.at
                    line = f"[+{(ev.at - t0).total_seconds():7.2f}s] {describe_event(ev)}"
                common.emit(line)
            sys.stdout.flush()
            if batch:
                after = batch[-1].seq
            if not args.follow or any(ev.type == "run_finished" for ev in batch):
                return common.EXIT_OK
            time.sleep(args.poll)
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    finally:
        store.close()


_STYLE = {
    RunStatus.SUCCEEDED: "green",
    RunStatus.PARTIAL: "yellow",
    RunStatus.INCOMPLETE: "red",
    RunStatus.ABORTED: "red",
    RunStatus.FAILED: "red",
    RunStatus.CANCELLED: "yellow",
    RunStatus.REPLAN_REQUESTED: "magenta",
    RunStatus.RUNNING: "blue",
    RunStatus.WAITING: "cyan",
    RunStatus.SCHEDULED: "cyan",
}


_COLUMNS: tuple[tuple[str, dict[str, Any]], ...] = (("step", {"no_wrap": True}), ("state", {"no_wrap": True}), ("attempts", {"justify": "right"}),
            ("worker", {}), ("wall", {"justify": "right"}), ("tokens in/out", {"justify": "right"}),
            ("cost", {"justify": "right"}), ("error / reason", {"overflow": "fold"}))  # fmt: skip
_TABLE_ROWS = 200  # more steps than this are listed in plain aligned columns: rich's table costs ~1.6 ms a row here


def _steps_table(view: Any, summary: RunSummary) -> Table | str:
    """The steps as a table: rich's, or for a run of more than `_TABLE_ROWS` steps the same columns as plain text."""
    now = datetime.now(UTC)
    rows = [_step_row(sid, rec, now) for sid, rec in view.steps.items()]
    title = f"steps of {summary.run_id}"
    if len(rows) > _TABLE_ROWS:
        return _plain_table(title, rows)
    table = Table(title=title, title_justify="left")
    for name, kw in _COLUMNS:
        table.add_column(name, **kw)
    for row in rows:
        table.add_row(*row)
    return table


def _step_row(sid: str, rec: StepRecord, now: datetime) -> tuple[str, ...]:
    why = rec.error.render() if rec.error else (rec.reason or "")
    if rec.state is StepState.SCHEDULED and rec.due is not None:
        why = f"until {show_time(rec.due)} ({countdown(rec.due, now)})"
    return (
        sid,
        _state(rec),
        str(rec.attempts),
        rec.worker + (f" on {rec.model}" if rec.model else ""),
        f"{rec.wall_time:.3f}s",
        f"{rec.usage.input_tokens}/{rec.usage.output_tokens}",
        rec.usage.describe_cost() if rec.usage.model_calls else "",
        why,
    )


def _plain_table(title: str, rows: list[tuple[str, ...]]) -> str:
    """`rows` under the columns' names, each column as wide as its widest cell (the last one as long as it is)."""
    names = [name for name, _ in _COLUMNS]
    widths = [max(len(name), *(len(row[i]) for row in rows)) for i, name in enumerate(names[:-1])]
    right = [kw.get("justify") == "right" for _, kw in _COLUMNS]

    def line(cells: tuple[str, ...] | list[str]) -> str:
        shown = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=False)]
        return "  ".join([*shown, cells[-1]]).rstrip()

    return "\n".join([title, line(names), "  ".join("-" * w for w in widths) + "  " + "-" * len(names[-1]), *map(line, rows)])


def _duration(r: RunSummary, view: RunView | None = None) -> str:
    """How long the run worked: summed over every process that worked on it (a resumed run's last one alone understates it)."""
    if view is not None and view.processes > 1:
        last = f", the last {r.wall_time:.2f}s" if r.wall_time is not None else ""
        return f"{view.worked:.2f}s worked over {view.processes} processes{last}"
    if r.wall_time is not None:
        return f"{r.wall_time:.2f}s"
    if r.interrupted:
        return f"{view.worked:.2f}s worked before its process died" if view is not None else "stopped short"
    return f"running for {(datetime.now(UTC) - r.started_at).total_seconds():.1f}s"


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
