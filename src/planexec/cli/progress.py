"""How a run looks in a terminal: a live table, a line per event, and the closing summary.

Owns the CLI's rendering of runs with rich: `StepBoard` (each step's state as
the events tell it), `LiveProgress` (a `rich.live.Live` table, one row per
step), `EventLog` (one plain line per event, for logs and CI where stdout is
not a terminal) and `print_summary` (a `RunResult` as a table, totals, status
and answer). Both displays are event subscribers (``run.subscribe(display)``)
and context managers, with `paused()` for prompts and `note()` for messages.
Reads only public records (events, results, plans); must not import the
engine's internals or the CLI.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from planexec import Plan, RunResult, RunStatus, Usage
from planexec.events import (
    ApprovalDecided,
    ApprovalRequested,
    JoinerDecided,
    PlanCompleted,
    PlanDrafted,
    PlanRevised,
    PlanStepParsed,
    ReplanStarted,
    RollbackFinished,
    RollbackStarted,
    RunFinished,
    RunResumed,
    RunStarted,
    StepCancelled,
    StepEscalated,
    StepFailed,
    StepJudged,
    StepReady,
    StepRerouted,
    StepResolved,
    StepRetried,
    StepRouted,
    StepScheduled,
    StepSkipped,
    StepStarted,
    StepSucceeded,
    SubRunEvent,
    ToolCallDecided,
    parse_event,
)
from planexec.runs import CallRecord, describe_refused

__all__ = [
    "EventLog",
    "LiveProgress",
    "StepBoard",
    "countdown",
    "describe_call",
    "describe_event",
    "print_summary",
    "show_time",
    "usage_table",
]

# display state -> (icon, rich style); "retrying" is a display state between attempts
_LOOK = {
    "pending": ("·", "dim"),
    "ready": ("○", "cyan"),
    "scheduled": ("⏲", "cyan"),  # waits for its time (not_before, a tool's window)
    "running": ("▶", "bold blue"),
    "retrying": ("↻", "yellow"),
    "succeeded": ("✓", "green"),
    "failed": ("✗", "bold red"),
    "skipped": ("↷", "magenta"),
    "cancelled": ("⊘", "yellow"),
    "needs_decision": ("⏸", "bold yellow"),  # cut off by a crash, waiting for planexec resolve
}
_STATUS_STYLE = {
    RunStatus.SUCCEEDED: "bold green",
    RunStatus.PARTIAL: "bold yellow",
    RunStatus.INCOMPLETE: "bold red",
    RunStatus.ABORTED: "bold red",
    RunStatus.CANCELLED: "bold yellow",
    RunStatus.REPLAN_REQUESTED: "bold magenta",
    RunStatus.FAILED: "bold red",
    RunStatus.RUNNING: "bold blue",
    RunStatus.WAITING: "cyan",
    RunStatus.SCHEDULED: "cyan",
}


@dataclass
class StepLine:
    """One step as the display shows it."""

    step_id: str
    worker: str
    action: str
    state: str = "pending"
    attempt: int = 0
    started: float | None = None  # time.monotonic() of the first attempt
    ended: float | None = None
    detail: str = ""
    due: datetime | None = None  # a scheduled step's time

    def elapsed(self, now: float) -> float | None:
        """Seconds since the first attempt began (until the step ended)."""
        if self.started is None:
            return None
        return (self.ended if self.ended is not None else now) - self.started


class StepBoard:
    """Each step's display state, updated from the run's events."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.lines = {s.step_id: StepLine(s.step_id, s.worker, s.action) for s in plan.steps}
        self.status: RunStatus = RunStatus.RUNNING
        self.t0 = time.monotonic()

    def update(self, event: Any) -> None:
        """Apply one event."""
        now = time.monotonic()
        if isinstance(event, RunStarted):
            self.t0 = now
            return
        if isinstance(event, RunFinished):
            self.status = event.status
            return
        if isinstance(event, PlanStepParsed):  # a streamed plan grows while it runs
            self.lines[event.step_id] = StepLine(event.step_id, event.worker, event.action)
            return
        if isinstance(event, PlanRevised):  # a new version: kept steps stay, the rest make way for new ones
            kept = set(event.diff.kept)
            self.lines = {sid: line for sid, line in self.lines.items() if sid in kept}
            self.plan = event.plan
            self.lines.update({s.step_id: StepLine(s.step_id, s.worker, s.action) for s in event.plan.steps if s.step_id not in kept})
            return
        if isinstance(event, ToolCallDecided):
            line = self.lines.get(event.step_id)
            if line is not None and not event.call.allowed:
                line.detail = f"refused {event.call.tool}: {event.call.rule}"
            return
        if isinstance(event, StepJudged):
            line = self.lines.get(event.step_id)
            if line is not None:
                line.detail = f"{'approved' if event.approved else 'rejected'} by {event.critic}: {'; '.join(event.reasons)[:80]}"
            return
        line = self.lines.get(getattr(event, "step_id", ""))
        if line is None:
            return
        if isinstance(event, StepReady):
            line.state = "ready"
        elif isinstance(event, StepScheduled):
            line.state, line.due, line.detail = "scheduled", event.due, event.why
        elif isinstance(event, StepStarted):
            line.state, line.attempt, line.worker, line.detail = "running", event.attempt, event.worker, ""
            if event.model is not None:
                line.detail = f"on {event.model}"
            if line.started is None:
                line.started = now
        elif isinstance(event, StepSucceeded):
            line.state, line.ended, line.detail = "succeeded", now, ""
        elif isinstance(event, StepFailed):
            if event.then in ("retry", "fallback", "escalate"):
                line.state, line.detail = "retrying", f"{event.error.render()} → {event.then}"
            else:
                line.state, line.ended, line.detail = "failed", now, f"{event.error.render()} → {event.then}"
        elif isinstance(event, StepRetried):
            line.detail += f" in {event.delay:.1f}s"
        elif isinstance(event, StepRerouted):
            line.worker, line.detail = event.to_worker, f"rerouted from {event.from_worker}"
        elif isinstance(event, StepEscalated):
            line.detail = f"{event.from_model} failed ({event.reason}) → {event.to_model}"
        elif isinstance(event, (StepSkipped, StepCancelled)):
            line.state, line.detail = ("skipped" if isinstance(event, StepSkipped) else "cancelled"), event.reason
            if line.started is not None:
                line.ended = now

    def table(self) -> RenderableType:
        """The board as a rich table with a one-line footer of counts."""
        now = time.monotonic()
        table = Table(title=f"{self.plan.plan_id}: {self.plan.goal}", title_justify="left", expand=False)
        for name, kw in (
            ("", {}),
            ("step", {"no_wrap": True}),
            ("status", {"no_wrap": True}),
            ("attempt", {"justify": "right"}),
            ("worker", {}),
            ("elapsed", {"justify": "right"}),
            ("detail", {"overflow": "fold"}),
        ):
            table.add_column(name, **kw)
        wall = datetime.now(UTC)
        for line in self.lines.values():
            icon, style = _LOOK.get(line.state, ("?", ""))
            elapsed = line.elapsed(now)
            detail = line.detail
            if line.state == "scheduled" and line.due is not None:  # a countdown, redrawn with the table
                detail = f"until {show_time(line.due)} · {countdown(line.due, wall)}" + (f" · {detail}" if detail else "")
            table.add_row(
                Text(icon, style=style),
                line.step_id,
                Text(line.state, style=style),
                str(line.attempt) if line.attempt else "",
                line.worker,
                f"{elapsed:.1f}s" if elapsed is not None else "",
                Text(detail, style="dim"),
            )
        counts: dict[str, int] = {}
        for line in self.lines.values():
            counts[line.state] = counts.get(line.state, 0) + 1
        summary = " · ".join(f"{n} {state}" for state, n in counts.items())
        footer = Text(f"{summary} · {now - self.t0:.1f}s", style="dim")
        return Group(table, footer)


class LiveProgress:
    """A live table of the run on a terminal; feed it events by subscribing it to the run."""

    def __init__(self, plan: Plan, console: Console) -> None:
        self.board = StepBoard(plan)
        self.console = console
        self._live: Live | None = None

    def __call__(self, event: Any) -> None:
        """Take one event (the table refreshes on its own)."""
        self.board.update(event)

    def __enter__(self) -> LiveProgress:
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _start(self) -> None:
        # a fresh Live each time: a restarted one would redraw over what was printed while it paused;
        # transient, so a prompt gets a clear screen and the summary that follows is not a second table
        self._live = Live(console=self.console, get_renderable=self.board.table, refresh_per_second=8, transient=True)
        self._live.start(refresh=True)

    def _stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop drawing (for a prompt), then draw again."""
        self._stop()
        try:
            yield
        finally:
            self._start()

    def note(self, message: str) -> None:
        """Print a message above the table."""
        self.console.print(message, markup=False, highlight=False)


class EventLog:
    """One plain line per event, for output that is not a terminal (logs, CI)."""

    def __init__(self, plan: Plan, console: Console) -> None:
        self.console = console
        self.t0: datetime | None = None

    def __call__(self, event: Any) -> None:
        """Print the event's line."""
        if self.t0 is None:
            self.t0 = event.at
        offset = (event.at - self.t0).total_seconds()
        self.note(f"[+{offset:7.2f}s] {describe_event(event)}")

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Nothing to pause: lines are printed as they come."""
        yield

    def note(self, message: str) -> None:
        """Print a message as its own line."""
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)


def describe_call(call: CallRecord) -> str:
    """A tool call inside a step in one line: what ran, or what was refused, by which rule, with where its data came from."""
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)[:60]}" for k, v in sorted(call.arguments.items()))
    head = f"call {call.tool}({args})"
    if call.allowed:
        how = f"ran{f' (approved by {call.decided_by})' if call.decided_by != 'plan' else ''}"
        cut = f", result cut for the model: {call.result_kept:,} of {call.result_chars:,} characters" if call.result_chars else ""
        return f"{head} {how}{cut}" + (f", failed: {call.error}" if call.error else "")
    chain = f"; data from: {' <- '.join(call.chain)}" if call.chain else ""
    return f"{head} refused, rule {call.rule}: {call.reason}{chain}"


def describe_event(event: Any) -> str:
    """One line of plain text saying what happened."""
    if isinstance(event, ToolCallDecided):
        return f"{event.step_id}: {describe_call(event.call)}"
    if isinstance(event, ReplanStarted):
        return f"replanning v{event.version} ({event.source}): {event.reason}"
    if isinstance(event, PlanRevised):
        return f"plan v{event.version} replaces v{event.revises}: " + event.diff.render().replace("\n", "; ")
    if isinstance(event, JoinerDecided):
        return f"joiner: {event.action}" + (f" ({event.reason})" if event.reason else "")
    if isinstance(event, StepJudged):
        verdict = "approved" if event.approved else ("not judged" if not event.judged else "rejected")
        tools = f" after {', '.join(event.tools_used)}" if event.tools_used else ""
        return f"{event.step_id}: {verdict} by {event.critic}{tools}: {'; '.join(event.reasons)}"
    if isinstance(event, RollbackStarted):
        return f"rolling back after {', '.join(event.after)}: {', '.join(event.step_ids) or 'no steps'}"
    if isinstance(event, RollbackFinished):
        return f"rollback {event.status.value}" + (f" ({event.reason})" if event.reason else "")
    if isinstance(event, (ApprovalRequested, ApprovalDecided)):
        what = f"step {event.step_id}" if event.step_id else "the plan"
        if isinstance(event, ApprovalRequested):
            return f"{what} waits for approval ({event.content_hash[:19]})"
        return f"{what} {'approved' if event.approved else 'not approved'}"
    if isinstance(event, RunResumed):
        held = f"; waiting for a decision: {', '.join(event.held)}" if event.held else ""
        rerun = f"; running again: {', '.join(event.rerun)}" if event.rerun else ""
        return f"run {event.run_id} resumed at plan v{event.plan_version}: {len(event.kept)} step(s) kept{rerun}{held}"
    if isinstance(event, StepResolved):
        value = f" with output {event.value!r}" if event.decision == "mark_done" else ""
        return f"{event.step_id}: {event.by} decided {event.decision.replace('_', ' ')}{value}"
    if isinstance(event, SubRunEvent):
        inner = parse_event(event.event)
        return f"{event.step_id} ⤷ [level {event.depth}] {describe_event(inner)}"
    if isinstance(event, RunStarted):
        return f"run {event.run_id} started: plan {event.plan_id!r} ({len(event.step_ids)} steps)"
    if isinstance(event, RunFinished):
        return f"run {event.run_id} finished: {event.status.value}" + (f" ({event.reason})" if event.reason else "")
    if isinstance(event, PlanDrafted):
        verdict = "accepted" if not event.problems else f"{len(event.problems)} problem(s), sent back: " + "; ".join(event.problems[:3])
        return f"plan draft {event.attempt} by {event.model} ({event.usage.output_tokens} tokens, {event.wall_time:.1f}s): {verdict}"
    if isinstance(event, PlanCompleted):
        return f"plan complete: {len(event.step_ids)} steps, {event.content_hash[:19]}"
    sid = getattr(event, "step_id", None)
    if sid is None:  # an event this display does not know yet
        return f"{getattr(event, 'type', type(event).__name__)}"
    if isinstance(event, PlanStepParsed):
        after = f" after {', '.join(event.depends_on)}" if event.depends_on else ""
        return f"{sid}: parsed from the planner's stream ({event.worker}.{event.action}{after})"
    if isinstance(event, StepReady):
        return f"{sid}: ready"
    if isinstance(event, StepScheduled):
        return f"{sid}: scheduled until {show_time(event.due)} ({event.why}; {countdown(event.due, event.at)})"
    if isinstance(event, StepStarted):
        on = f", model {event.model}" if event.model is not None else ""
        return f"{sid}: started (attempt {event.attempt}, worker {event.worker}, action {event.action}{on})"
    if isinstance(event, StepSucceeded):
        on = f" on {event.model}, {event.usage.describe_cost()}" if event.model is not None else ""
        return f"{sid}: succeeded (attempt {event.attempt}{on}, {event.wall_time:.2f}s)"
    if isinstance(event, StepFailed):
        on = f" on {event.model}, {event.usage.describe_cost()}" if event.model is not None else ""
        return f"{sid}: failed (attempt {event.attempt}{on}): {event.error.render()} → {event.then}"
    if isinstance(event, StepRouted):
        return f"{sid}: starts on {event.start} of {' → '.join(event.models)} (router {event.router}: {event.reason})"
    if isinstance(event, StepEscalated):
        return f"{sid}: attempt {event.attempt} on {event.from_model} failed ({event.reason}): the next runs on {event.to_model}"
    if isinstance(event, StepRetried):
        return f"{sid}: retrying (attempt {event.next_attempt} in {event.delay:.2f}s)"
    if isinstance(event, StepRerouted):
        return f"{sid}: rerouted from worker {event.from_worker} to {event.to_worker}"
    if isinstance(event, StepSkipped):
        return f"{sid}: skipped ({event.reason})"
    if isinstance(event, StepCancelled):
        return f"{sid}: cancelled{' while running' if event.was_running else ''} ({event.reason})"
    return f"{sid}: {getattr(event, 'type', type(event).__name__)}"


def show_time(when: datetime) -> str:
    """A time as people read it: this machine's zone, to the second (2026-12-05 02:00:00 EST)."""
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def countdown(when: datetime, now: datetime) -> str:
    """How long until `when`: ``in 2h 03m 05s`` (``due now`` once it has passed)."""
    left = int((when - now).total_seconds())
    if left <= 0:
        return "due now"
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"in {days}d {hours}h {minutes:02d}m"
    if hours:
        return f"in {hours}h {minutes:02d}m {seconds:02d}s"
    return f"in {minutes}m {seconds:02d}s" if minutes else f"in {seconds}s"


def _summary_table(result: RunResult) -> Table:
    """One row per step (state, attempts, wall time, tokens, cost, why), the totals in the footer."""
    table = Table(title=f"run {result.run_id} · plan {result.plan.plan_id}", title_justify="left", show_footer=True)
    usage = result.usage
    for name, kw in (
        ("step", {"footer": "total", "no_wrap": True}),
        ("state", {"no_wrap": True}),
        ("attempts", {"justify": "right", "footer": str(sum(r.attempts for r in result.steps.values()))}),
        ("wall", {"justify": "right", "footer": f"{result.wall_time:.2f}s"}),
        ("tokens in", {"justify": "right", "footer": str(usage.input_tokens)}),
        ("tokens out", {"justify": "right", "footer": str(usage.output_tokens)}),
        ("cost", {"justify": "right", "footer": usage.describe_cost()}),
        ("error / reason", {"overflow": "fold"}),
    ):
        table.add_column(name, **kw)
    for sid, rec in result.steps.items():
        icon, style = _LOOK.get(rec.state.value, ("?", ""))
        why = rec.error.render() if rec.error else ""
        if rec.reason:
            why = f"{why} ({rec.reason})" if why else rec.reason
        table.add_row(
            sid,
            Text(f"{icon} {rec.state.value}", style=style),
            str(rec.attempts),
            f"{rec.wall_time:.2f}s",
            str(rec.usage.input_tokens),
            str(rec.usage.output_tokens),
            rec.usage.describe_cost() if rec.usage.model_calls else "",
            Text(why),
        )
    return table


def print_summary(console: Console, result: RunResult) -> None:
    """Each step's state, attempts, wall time, usage and error; then totals, status and the answer."""
    usage = result.usage
    console.print(_summary_table(result))
    console.print(
        f"usage: {usage.input_tokens} tokens in{usage.describe_cache()}, {usage.output_tokens} out, {usage.model_calls} model calls, "
        f"{usage.describe_cost()} · wall time {result.wall_time:.2f}s",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    status = Text("status: ") + Text(result.status.value, style=_STATUS_STYLE.get(result.status, ""))
    if result.reason:
        status += Text(f" ({result.reason})")
    console.print(status, soft_wrap=True)
    if any(rec.subrun is not None for rec in result.steps.values()):
        for level, calls in result.calls_by_level().items():
            counts = ", ".join(f"{kind} {n}" for kind, n in calls.items())
            console.print(f"model calls at level {level}: {counts}", markup=False, highlight=False, soft_wrap=True)
    if len(result.versions) > 1:
        for v in result.versions[1:]:
            console.print(
                f"{v.diff.render() if v.diff else f'plan v{v.version}'} · because {v.reason}", markup=False, highlight=False, soft_wrap=True
            )
    if result.error is not None:
        console.print(f"error: {result.error.render()}", markup=False, highlight=False, soft_wrap=True)
    if result.refused_calls:
        console.print(describe_refused(result.refused_calls), style="yellow", markup=False, highlight=False, soft_wrap=True)
    for sid, rec in result.steps.items():
        for call in rec.refused:
            console.print(f"{sid}: {describe_call(call)}", markup=False, highlight=False, soft_wrap=True)
    if result.rollback is not None:
        rb = result.rollback
        steps = ", ".join(f"{sid} {rec.state.value}" for sid, rec in rb.steps.items())
        console.print(
            f"rollback ({rb.run_id}): {rb.status.value}: {steps}" + (f" ({rb.reason})" if rb.reason else ""),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if result.replan is not None:
        console.print(f"replan requested by step {result.replan.step_id!r}: {result.replan.reason}", markup=False, soft_wrap=True)
    answer = result.model_dump(mode="json")["answer"]
    if answer is None:
        console.print("answer: none", markup=False, highlight=False)
    else:
        console.print("answer:", markup=False, highlight=False)
        console.print_json(data=answer)
        if result.answer_untrusted:  # an instruction in a file can reach the answer without any tool call: say so
            console.print(result.answer_warning(), style="bold yellow", markup=False, highlight=False, soft_wrap=True)


def usage_table(result: RunResult) -> Table:
    """Tokens, model calls and cost per role (planner, each worker, synthesizer) and in total."""
    table = Table(title="usage by role", title_justify="left", show_footer=True)
    total = result.usage
    for name, footer in (
        ("role", "total"),
        ("model calls", str(total.model_calls)),
        ("tokens in", str(total.input_tokens)),
        ("cached", str(total.cached_input_tokens)),
        ("tokens out", str(total.output_tokens)),
        ("cost", total.describe_cost()),
    ):
        if name == "cached" and not total.cached_input_tokens:
            continue  # no provider cache was read: no column of zeros
        table.add_column(name, footer=footer, justify="left" if name == "role" else "right")
    roles: dict[str, Usage] = result.usage_by_role()
    for role, usage in roles.items():
        cached = [str(usage.cached_input_tokens)] if total.cached_input_tokens else []
        table.add_row(role, str(usage.model_calls), str(usage.input_tokens), *cached, str(usage.output_tokens), usage.describe_cost())
    return table
