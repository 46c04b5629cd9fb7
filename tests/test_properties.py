"""Property tests of the engine: random DAGs of misbehaving steps, invariants checked on the event history.

Each example draws a plan of up to 25 steps (each depends on a random subset
of earlier ones, declared, referenced in its parameters, or both), a script of
behaviour per (step, attempt) — succeed, raise, hang past the timeout, return
garbage, return an empty output, refuse its input — a random failure action,
tolerance of failed inputs and approval per step, engine limits, and sometimes
a cancel from outside after a short delay. The run's history and result are
then checked against invariants that hold whatever the timing, and each step
that ended on its own is checked against a model of what it should have done.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st

from planexec import Engine, Plan, Registry, RunStatus, StepCall, StepState, Usage
from planexec.errors import ToolInputError
from planexec.events import (
    RunFinished,
    RunStarted,
    StepCancelled,
    StepFailed,
    StepReady,
    StepRerouted,
    StepRetried,
    StepSkipped,
    StepStarted,
    StepSucceeded,
    parse_event,
)
from planexec.workers.io import WorkResult

TIMEOUT = 0.25  # the timeout of a step that hangs in some attempt: only the timeout ends a hang
CALM_TIMEOUT = 30.0  # every other step's: a loaded 2-core machine can stall the loop for 0.4 s, never for this
HANG = 10.0  # a hanging attempt sleeps this long; only the timeout ends it
BOUND = 10.0  # a run that has not finished by then is a failure
IMMEDIATELY = -1.0  # cancel_after: call run.cancel() right after engine.start()
WORKERS = ("tool", "alt", "metered")
FAILURES = ("empty", "raise", "garbage", "refuse", "hang")
NOT_RETRYABLE = {"tool_input", "reference"}
# The README's test command draws the same 150 examples on every machine (derandomized: a failure there is
# reproducible anywhere). CI then runs a second pass with PLANEXEC_PROPERTY_SEED set to the date (.ci/run): other
# examples every day at a fixed cost, each day's draw reproducible from its seed (--hypothesis-seed), so a case that
# the fixed draw misses is found within days without making every run slower. Found cases are pinned as @example.
ROTATED = bool(os.environ.get("PLANEXEC_PROPERTY_SEED"))
PROPERTIES = settings(
    max_examples=int(os.environ.get("PLANEXEC_PROPERTY_EXAMPLES", "150")),
    deadline=None,
    derandomize=not ROTATED,
    database=None,
    # Shrinking replays hundreds of timed runs (minutes, and timing makes it noisy); the failing
    # example is reported as found and comes back on every run. PLANEXEC_SHRINK=1 turns shrinking on.
    phases=tuple(Phase) if os.environ.get("PLANEXEC_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the scenario ------------------------------------------------------------


@dataclass(frozen=True)
class StepSpec:
    step_id: str
    index: int
    action: str  # "work" returns a dict, "work_int" an int
    worker: str
    deps: dict[str, str]  # dependency -> "declared", "reference", "both" or "path" (a ${dep.step} reference)
    script: tuple[str, ...]  # behaviour of attempts 1..n; later attempts succeed, or repeat the last if not then_ok
    then_ok: bool
    failure: dict[str, Any]
    tolerant: bool
    approval: str | None  # None: no approval needed; "yes", "no", or "error" (the approver raises)
    delay: float  # a succeeding attempt sleeps this long first

    def behaviour(self, attempt: int) -> str:
        if attempt <= len(self.script):
            return self.script[attempt - 1]
        return "ok" if self.then_ok or not self.script else self.script[-1]

    def as_data(self) -> dict[str, Any]:
        inputs = {d: ("${%s.step}" if how == "path" else "${%s}") % d for d, how in self.deps.items() if how != "declared"}
        return {
            "id": self.step_id,
            "action": self.action,
            "worker": self.worker,
            "depends_on": [d for d, how in self.deps.items() if how in ("declared", "both")],
            "parameters": {"inputs": inputs} if inputs else {},
            "success_criteria": ["not_empty"] if self.action == "work" else [{"kind": "regex", "pattern": "^[0-9]+$"}],
            "failure_action": self.failure,
            "accepts_failed_inputs": self.tolerant,
            "requires_approval": self.approval is not None,
            "timeout": TIMEOUT if "hang" in self.script else CALM_TIMEOUT,
        }


@dataclass(frozen=True)
class Scenario:
    steps: tuple[StepSpec, ...]
    seed: int
    max_concurrency: int
    worker_limits: dict[str, int]
    async_approver: bool
    cancel_after: float | None

    @property
    def by_id(self) -> dict[str, StepSpec]:
        return {s.step_id: s for s in self.steps}

    def plan(self) -> Plan:
        return Plan.model_validate({"plan_id": "prop", "goal": "survive", "steps": [s.as_data() for s in self.steps]})


def draw_failure(draw: st.DrawFn, worker: str, gentle: bool) -> dict[str, Any]:
    """A failure action valid for a step on `worker`; when `gentle`, only those that let the run go on."""
    ends = [] if gentle else ["abort", "replan"]
    kind = draw(st.sampled_from(["retry", "retry", "skip", "fallback", *ends]))
    fallback_to = draw(st.sampled_from([w for w in WORKERS if w != worker]))
    if kind == "fallback":
        return {"kind": "fallback", "worker": fallback_to, "then": draw(st.sampled_from(["skip", *ends, *(["fallback"] if ends else [])]))}
    if kind != "retry":
        return {"kind": kind}
    then = draw(st.sampled_from(["skip", *(["fallback"] if ends else []), *ends]))
    return {
        "kind": "retry",
        "max_attempts": draw(st.sampled_from([3, 2, 4, 1])),
        "backoff": draw(st.sampled_from([0.0, 0.001, 0.002])),
        "backoff_multiplier": draw(st.sampled_from([1.0, 2.0])),
        "jitter": draw(st.sampled_from([0.0, 0.5, 1.0])),
        "then": then,
        **({"worker": fallback_to} if then == "fallback" else {}),
    }


def one_in(draw: st.DrawFn, n: int) -> bool:
    """True with probability about 1/n (0: never); shrinks towards False."""
    return n > 0 and draw(st.integers(0, n - 1)) == n - 1


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n = draw(st.integers(1, 25))
    gentle = draw(st.booleans())  # no failure action can end the run early: every step must end on its own
    fail_one_in = draw(st.sampled_from([3, 2, 8, 0]))  # how many steps have a script that fails
    approve_one_in = draw(st.sampled_from([0, 8]))  # how many steps need approval
    steps: list[StepSpec] = []
    for i in range(n):
        earlier = [s.step_id for s in steps]
        chosen = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=4)) if earlier else []
        worker = draw(st.sampled_from(WORKERS))
        failure = draw_failure(draw, worker, gentle)
        script = draw(st.lists(st.sampled_from(FAILURES), min_size=1, max_size=3)) if one_in(draw, fail_one_in) else []
        approval = None
        if one_in(draw, approve_one_in):  # a refusal aborts unless the failure action is skip or replan
            approval = draw(st.sampled_from(["yes", "no", "error"] if not gentle or failure["kind"] == "skip" else ["yes"]))
        steps.append(
            StepSpec(
                step_id=f"s{i}",
                index=i,
                action=draw(st.sampled_from(["work", "work_int"])),
                worker=worker,
                # a ${dep.step} path into an int output does not resolve: keep those rare
                deps={d: draw(st.sampled_from(["declared", "reference", "both"] * 2 + ["path"])) for d in chosen},
                script=tuple(script),
                then_ok=draw(st.booleans()),
                failure=failure,
                tolerant=draw(st.booleans()),
                approval=approval,
                delay=draw(st.sampled_from([0.0, 0.001, 0.004])),
            )
        )
    return Scenario(
        steps=tuple(steps),
        seed=draw(st.integers(0, 2**16)),
        max_concurrency=draw(st.sampled_from([64, 3, 1])),
        worker_limits=draw(st.sampled_from([{}, {"alt": 1}, {"metered": 2, "tool": 2}])),
        async_approver=draw(st.booleans()),
        cancel_after=draw(st.sampled_from([None, None, None, None, 0.0, 0.002, 0.01, 0.03, IMMEDIATELY])),
    )


# --- tools and workers driven by the scenario --------------------------------


def metered_usage(attempt: int) -> Usage:
    return Usage(input_tokens=10 * attempt, output_tokens=attempt, model_calls=1, cost=0.25 * attempt)


def expected_output(spec: StepSpec, attempt: int, worker: str) -> Any:
    if spec.action == "work":
        return {"step": spec.step_id, "attempt": attempt, "worker": worker}
    return spec.index * 100 + attempt


@dataclass(frozen=True)
class Invocation:
    step_id: str
    attempt: int
    worker: str
    inputs: dict[str, Any]
    failed_inputs: frozenset[str]


class MeteredWorker:
    """A worker of its own (not a tool worker) that calls the same tools and bills every call it completes."""

    name = "metered"
    description = "calls the scenario's tools and reports usage"
    max_concurrency = None

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    @property
    def actions(self) -> set[str]:
        return {"work", "work_int"}

    def input_model(self, action: str) -> Any:
        return self.registry.tools[action].input_model

    async def perform(self, call: StepCall) -> WorkResult:
        output = await self.registry.tools[call.action].invoke(call.parameters, call)
        return WorkResult(output=output, usage=metered_usage(call.attempt), tools=[call.action])


def build_registry(scn: Scenario, log: list[Invocation]) -> Registry:
    reg = Registry()
    specs = scn.by_id

    async def act(call: StepCall, inputs: dict[str, Any] | None) -> Any:
        spec = specs[call.step_id]
        log.append(Invocation(call.step_id, call.attempt, call.worker, dict(inputs or {}), frozenset(call.failed_inputs)))
        what = spec.behaviour(call.attempt)
        if what == "raise":
            raise RuntimeError(f"boom in {call.step_id} attempt {call.attempt}")
        if what == "hang":
            await asyncio.sleep(HANG)
        if what == "refuse":
            raise ToolInputError("refused", tool=call.action)
        if what == "garbage":  # not JSON for "work" (-> Any); not an int for "work_int" (-> int)
            return object() if spec.action == "work" else "not a number"
        if what == "empty":  # an output the step's success criterion rejects
            return {} if spec.action == "work" else -1
        await asyncio.sleep(spec.delay)
        return expected_output(spec, call.attempt, call.worker)

    @reg.tool(name="work", worker="alt")
    async def work(call: StepCall, inputs: dict[str, Any] | None = None) -> Any:
        return await act(call, inputs)

    @reg.tool(name="work_int", worker="alt")
    async def work_int(call: StepCall, inputs: dict[str, Any] | None = None) -> int:
        return await act(call, inputs)

    reg.add_worker(MeteredWorker(reg))
    return reg


def build_approver(scn: Scenario) -> Any:
    def decide(step: Any) -> bool:
        verdict = scn.by_id[step.step_id].approval
        if verdict == "error":
            raise RuntimeError("the approver broke")
        return verdict == "yes"

    async def decide_async(step: Any) -> bool:
        await asyncio.sleep(0)
        return decide(step)

    return decide_async if scn.async_approver else decide


# --- running -------------------------------------------------------------------


@dataclass
class Cancel:
    called: bool = False
    effective: bool = False  # the run was still RUNNING when cancel() was called
    all_ended: bool = False  # every step had already ended then
    at: int = 0  # len(history) when cancel() was called


@dataclass
class Outcome:
    run: Any
    result: Any
    cancel: Cancel
    log: list[Invocation] = field(default_factory=list)


async def execute(scn: Scenario) -> Outcome:
    log: list[Invocation] = []
    engine = Engine(
        build_registry(scn, log),
        seed=scn.seed,
        default_timeout=TIMEOUT,
        max_concurrency=scn.max_concurrency,
        worker_limits=scn.worker_limits,
        approver=build_approver(scn),
    )
    run = engine.start(scn.plan())
    cancel = Cancel()

    def cancel_now() -> None:
        cancel.called, cancel.effective, cancel.at = True, run.status is RunStatus.RUNNING, len(run.history)
        cancel.all_ended = all(rec.state.terminal for rec in run.records.values())
        run.cancel()

    async def cancel_later(delay: float) -> None:
        await asyncio.sleep(delay)
        cancel_now()

    canceller = None
    if scn.cancel_after == IMMEDIATELY:  # before the run's task has even started
        cancel_now()
    elif scn.cancel_after is not None:
        canceller = asyncio.create_task(cancel_later(scn.cancel_after))
    try:
        result = await asyncio.wait_for(run.result(), BOUND)
    except TimeoutError:
        tail = "\n".join(f"  {ev.seq} {ev.type} {getattr(ev, 'step_id', '')}" for ev in run.history[-30:])
        pytest.fail(f"the run did not finish within {BOUND}s; last events:\n{tail}")
    finally:
        if canceller is not None:
            canceller.cancel()
    return Outcome(run, result, cancel, log)


# --- what each step should do, from its own script ------------------------------


@dataclass(frozen=True)
class Fate:
    state: StepState
    attempts: int = 0
    then: str | None = None  # the failure action that ended a failed step


def policy(fa: dict[str, Any], attempt: int, rule: str, rerouted: bool) -> str:
    """What a failed attempt leads to. As `FailureAction` documents: retry up to max_attempts
    (errors other than refused input and unresolved references), then `then`; fallback re-runs the
    step on another worker. What it leaves open, as the engine decides it: when the fallback fails
    too, kind=fallback applies `then` (abort if that is fallback again) and a retry that fell back aborts."""
    kind, then = fa["kind"], fa.get("then", "abort")
    if rerouted:
        after = then if kind == "fallback" else "abort"
        return "abort" if after == "fallback" else after
    if kind == "retry":
        return "retry" if rule not in NOT_RETRYABLE and attempt < fa["max_attempts"] else then
    return kind


def attempt_rule(spec: StepSpec, attempt: int, fates: dict[str, Fate], specs: dict[str, StepSpec]) -> str | None:
    """The error rule an attempt fails with, or None when it succeeds."""
    for dep, how in spec.deps.items():  # ${dep.step} into an int output does not resolve; the tool never runs
        if how == "path" and specs[dep].action == "work_int" and fates[dep].state is StepState.SUCCEEDED:
            return "reference"
    what = spec.behaviour(attempt)
    if what == "ok":
        return None
    return {"raise": "exception", "hang": "timeout", "garbage": "tool_output", "empty": "check_failed", "refuse": "tool_input"}[what]


def predict(scn: Scenario) -> dict[str, Fate]:
    """Each step's fate if the run is not ended early (abort, replan, cancel)."""
    fates: dict[str, Fate] = {}
    specs = scn.by_id
    for spec in scn.steps:
        if not spec.tolerant and any(fates[d].state is not StepState.SUCCEEDED for d in spec.deps):
            fates[spec.step_id] = Fate(StepState.SKIPPED)
            continue
        if spec.approval in ("no", "error"):
            # a refusal is not the worker's fault: retry and fallback do not apply, what follows them does
            kind = spec.failure["kind"]
            then = spec.failure.get("then", "abort") if kind in ("retry", "fallback") else kind
            fates[spec.step_id] = Fate(StepState.FAILED, 0, then if then in ("skip", "replan") else "abort")
            continue
        attempt, rerouted = 0, False
        while True:
            attempt += 1
            rule = attempt_rule(spec, attempt, fates, specs)
            if rule is None:
                fates[spec.step_id] = Fate(StepState.SUCCEEDED, attempt)
                break
            then = policy(spec.failure, attempt, rule, rerouted)
            if then == "fallback":
                rerouted = True
            elif then != "retry":
                fates[spec.step_id] = Fate(StepState.FAILED, attempt, then)
                break
    return fates


# --- invariants -------------------------------------------------------------------

TERMINAL_STATE = {
    StepSucceeded: StepState.SUCCEEDED,
    StepFailed: StepState.FAILED,
    StepSkipped: StepState.SKIPPED,
    StepCancelled: StepState.CANCELLED,
}
ENDING = {"abort": RunStatus.ABORTED, "replan": RunStatus.REPLAN_REQUESTED}


def is_terminal(ev: Any) -> bool:
    return isinstance(ev, (StepSucceeded, StepSkipped, StepCancelled)) or (
        isinstance(ev, StepFailed) and ev.then not in ("retry", "fallback")
    )


def check_stream(out: Outcome) -> None:
    """Sequence numbers, framing by RunStarted/RunFinished, and the JSON round trip of every event."""
    history, result = out.run.history, out.result
    assert [ev.seq for ev in history] == list(range(len(history)))
    assert isinstance(history[0], RunStarted) and history[0].step_ids == result.plan.step_ids
    finished = [ev for ev in history if isinstance(ev, RunFinished)]
    assert len(finished) == 1 and history[-1] is finished[0], "exactly one RunFinished, last"
    fin = finished[0]
    assert (fin.status, fin.usage, fin.replan, fin.answer) == (result.status, result.usage, result.replan, result.answer)
    for ev in history:
        assert ev.run_id == result.run_id
        assert parse_event(ev.to_json()) == ev, f"event {ev.seq} ({ev.type}) does not round-trip"
    assert type(result).model_validate_json(result.model_dump_json()) == result


def check_step_story(scn: Scenario, out: Outcome, sid: str) -> Any:
    """One step's events follow the lifecycle; returns its single terminal event."""
    spec, rec = scn.by_id[sid], out.result.steps[sid]
    events = [ev for ev in out.run.history if getattr(ev, "step_id", None) == sid]
    phase, attempt, worker, terminal = "waiting", 0, spec.worker, None
    started_on = spec.worker  # the worker of the last attempt that started
    completed_usage, completed_time = Usage(), 0.0
    for ev in events:
        where = f"step {sid}: {ev.type} (seq {ev.seq}) in phase {phase}"
        assert phase != "ended", f"{where}: an event after the step's terminal event"
        if isinstance(ev, StepSkipped):
            assert phase == "waiting", where
        elif isinstance(ev, StepReady):  # only when it cannot start at once: a slot or a person to wait for
            assert phase in ("waiting", "between"), where
            phase = "ready"
        elif isinstance(ev, StepStarted):
            # a step starts at once or once ready; again only after a StepRetried/StepRerouted, with the next attempt number
            assert phase in ("waiting", "ready", "between") and (phase != "waiting" or attempt == 0), where
            assert ev.attempt == attempt + 1, where
            assert (ev.worker, ev.action) == (worker, spec.action), where
            phase, attempt, started_on = "running", ev.attempt, ev.worker
        elif isinstance(ev, StepSucceeded):
            assert phase == "running" and ev.attempt == attempt, where
            completed_time += ev.wall_time
        elif isinstance(ev, StepFailed):
            if ev.attempt == 0:  # refused before any attempt: approval
                assert phase == "ready" and spec.approval in ("no", "error"), where
                assert ev.error.rule == {"no": "approval_denied", "error": "approval_required"}[spec.approval]
            else:
                assert phase == "running" and ev.attempt == attempt and ev.worker == worker, where
                completed_usage = completed_usage + ev.usage
                completed_time += ev.wall_time
            phase = {"retry": "retrying", "fallback": "rerouting"}.get(ev.then, phase)
        elif isinstance(ev, StepRetried):
            assert phase == "retrying" and ev.next_attempt == attempt + 1, where
            phase = "between"
        elif isinstance(ev, StepRerouted):
            assert phase == "rerouting" and ev.from_worker == worker and ev.to_worker == spec.failure["worker"], where
            worker, phase = ev.to_worker, "between"
        elif isinstance(ev, StepCancelled):
            assert phase in ("waiting", "ready", "running", "between"), where
            if phase in ("waiting", "ready"):
                assert not ev.was_running, where
            # "running" and not running: a step started as it was launched whose task never ran (its tool was not called)
        if is_terminal(ev):
            terminal, phase = ev, "ended"
    assert terminal is not None, f"step {sid} has no terminal event: {[e.type for e in events]}"
    assert rec.state is TERMINAL_STATE[type(terminal)], f"step {sid}: record says {rec.state}, events say {terminal.type}"
    assert rec.attempts == attempt, f"step {sid}: record counts {rec.attempts} attempts, {attempt} started"
    assert rec.worker == started_on
    assert (rec.started_at is None) == (attempt == 0)
    if isinstance(terminal, StepCancelled) and cut_off(events):  # the cancelled attempt's time counts too
        assert rec.wall_time > completed_time, f"step {sid}: the time of the attempt cut off is lost"
    else:
        assert rec.wall_time == completed_time, f"step {sid}: wall time {rec.wall_time} is not the sum of its attempts'"
    if isinstance(terminal, StepSucceeded):
        assert rec.output == terminal.output and rec.error is None
        success_usage = metered_usage(attempt) if started_on == "metered" else Usage()
        assert rec.usage == completed_usage + success_usage
        assert terminal.usage == success_usage  # events carry each attempt's usage: they sum to the record
    else:
        assert rec.output is None and rec.usage == completed_usage
    if isinstance(terminal, StepFailed):
        assert rec.error == terminal.error
    return terminal


def cut_off(events: list[Any]) -> bool:
    """True when the step was cancelled in the middle of an attempt (its last event before that is a StepStarted)."""
    before = [ev for ev in events if not isinstance(ev, StepCancelled)]
    return bool(before) and isinstance(before[-1], StepStarted)


def check_behaviour(scn: Scenario, out: Outcome, terminals: dict[str, Any]) -> None:
    """Dependencies before starts, skips only behind a failed input, and every attempt did what its script said."""
    history, specs = out.run.history, scn.by_id
    ended_at = {sid: ev.seq for sid, ev in terminals.items()}
    succeeded = {sid for sid, ev in terminals.items() if isinstance(ev, StepSucceeded)}
    fates = {sid: Fate(TERMINAL_STATE[type(ev)]) for sid, ev in terminals.items()}
    for ev in history:
        spec = specs.get(getattr(ev, "step_id", None))
        if spec is None:
            continue
        if isinstance(ev, (StepReady, StepStarted, StepSkipped)):
            for d in spec.deps:
                assert ended_at[d] < ev.seq, f"{spec.step_id} {ev.type} at {ev.seq} before its input {d} ended"
            if isinstance(ev, StepSkipped):
                assert not spec.tolerant and ev.because in spec.deps and ev.because not in succeeded
            elif not spec.tolerant:
                assert set(spec.deps) <= succeeded, f"{spec.step_id} started although an input did not succeed"
        if isinstance(ev, StepFailed) and ev.attempt > 0:
            assert ev.error.rule == attempt_rule(spec, ev.attempt, fates, specs), f"{spec.step_id} attempt {ev.attempt}: {ev.error}"
            rerouted = any(isinstance(e, StepRerouted) and e.step_id == spec.step_id and e.seq < ev.seq for e in history)
            assert ev.then == policy(spec.failure, ev.attempt, ev.error.rule, rerouted), f"{spec.step_id}: then={ev.then}"
        if isinstance(ev, StepSucceeded):
            assert attempt_rule(spec, ev.attempt, fates, specs) is None
            prov = ev.output.provenance
            assert ev.output.value == expected_output(spec, ev.attempt, prov.worker)
            assert (prov.step_id, prov.attempt, prov.action, prov.run_id) == (spec.step_id, ev.attempt, spec.action, out.result.run_id)
    values = {sid: ev.output.value for sid, ev in terminals.items() if isinstance(ev, StepSucceeded)}
    for call in out.log:  # what the tools received: upstream outputs, None for inputs that failed
        spec = specs[call.step_id]
        assert call.failed_inputs == {d for d in spec.deps if d not in succeeded}
        for d, how in spec.deps.items():
            if how == "declared":
                continue
            want = None if d not in values else (values[d]["step"] if how == "path" else values[d])
            assert call.inputs[d] == want, f"{call.step_id} got {call.inputs[d]!r} for {d}"


def check_status(scn: Scenario, out: Outcome, terminals: dict[str, Any]) -> None:
    """How the run ended follows from what happened first: a cancel, an abort, a replan, or nothing."""
    history, result, cancel = out.run.history, out.result, out.cancel
    enders = [ev for ev in history if isinstance(ev, StepFailed) and ev.then in ENDING]
    states = {sid: rec.state for sid, rec in result.steps.items()}
    end_at = None
    natural = RunStatus.SUCCEEDED if all(s is StepState.SUCCEEDED for s in states.values()) else RunStatus.PARTIAL
    if cancel.effective and cancel.all_ended:
        # every step had ended and RunFinished was not out yet: the engine reports CANCELLED today,
        # arguably it should report how the run ended (see the report); both are accepted here
        assert result.status in (RunStatus.CANCELLED, natural)
        end_at = cancel.at
    elif cancel.effective:
        assert result.status is RunStatus.CANCELLED
        assert not any(ev.seq < cancel.at for ev in enders), "cancel() took effect after the run had ended"
        end_at = cancel.at
    elif enders:
        assert result.status is ENDING[enders[0].then], f"{enders[0].step_id} fired {enders[0].then}, status {result.status}"
        end_at = enders[0].seq + 1
    else:
        assert result.status is natural
        assert StepState.CANCELLED not in states.values(), "a step was cancelled though the run ended on its own"
    if end_at is not None:  # once the run ended, nothing new happens: steps are only cancelled
        late = [ev for ev in history[end_at:] if not isinstance(ev, (StepCancelled, RunFinished, RunStarted))]
        assert late == [], f"events after the run ended: {[(e.seq, e.type, getattr(e, 'step_id', '')) for e in late]}"
    if result.status is RunStatus.SUCCEEDED:
        assert all(s is StepState.SUCCEEDED for s in states.values())
    if result.status is RunStatus.REPLAN_REQUESTED:
        assert result.replan is not None and result.replan.step_id == enders[0].step_id
    else:
        assert result.replan is None
    total = Usage()
    for rec in result.steps.values():
        total = total + rec.usage
    assert result.usage == total


def check_fates(scn: Scenario, out: Outcome) -> None:
    """A step that ended on its own (not cancelled) ended as its script says, after as many attempts."""
    fates = predict(scn)
    for sid, rec in out.result.steps.items():
        if rec.state is StepState.CANCELLED:
            continue
        want = fates[sid]
        assert (rec.state, rec.attempts) == (want.state, want.attempts), f"step {sid}: {rec.state}/{rec.attempts}, expected {want}"
        if want.then is not None:
            assert rec.reason == f"failure action: {want.then}"
    if not out.cancel.effective and not any(f.then in ENDING for f in fates.values()):
        assert all(rec.state is not StepState.CANCELLED for rec in out.result.steps.values())


def note_coverage(scn: Scenario, out: Outcome, terminals: dict[str, Any]) -> None:
    """What the example exercised (see ``pytest --hypothesis-show-statistics``)."""
    history = out.run.history
    event(f"status: {out.result.status.value}")
    event(f"cancel: {'none' if not out.cancel.called else 'effective' if out.cancel.effective else 'too late'}")
    for label, kind in (("retry", StepRetried), ("fallback", StepRerouted)):
        event(f"{label}: {any(isinstance(ev, kind) for ev in history)}")
    rules = {ev.error.rule for ev in history if isinstance(ev, StepFailed)}
    for rule in ("timeout", "exception", "tool_output", "check_failed", "tool_input", "reference"):
        event(f"error {rule}: {rule in rules}")
    succeeded = {sid for sid, ev in terminals.items() if isinstance(ev, StepSucceeded)}
    event(
        "tolerant step ran behind a failure: "
        + str(any(isinstance(ev, StepStarted) and not set(scn.by_id[ev.step_id].deps) <= succeeded for ev in history))
    )


def spec(i: int, **fields: Any) -> StepSpec:
    """A step for a hand-written example: defaults to one that works the first time."""
    base = {
        "action": "work",
        "worker": "tool",
        "deps": {},
        "script": (),
        "then_ok": True,
        "failure": {"kind": "skip"},
        "tolerant": False,
        "approval": None,
        "delay": 0.0,
    }
    return StepSpec(step_id=f"s{i}", index=i, **{**base, **fields})


def example_scenario(*steps: StepSpec, **fields: Any) -> Scenario:
    base = {"seed": 0, "max_concurrency": 64, "worker_limits": {}, "async_approver": False, "cancel_after": None}
    return Scenario(steps=steps, **{**base, **fields})


RETRY = {"kind": "retry", "max_attempts": 3, "backoff": 0.001, "jitter": 0.5}
# Rare paths pinned down: billed attempts whose output the check rejects, before a success and a fallback.
USAGE_CARRIED = example_scenario(
    spec(0, worker="metered", script=("empty", "empty"), failure=RETRY),
    spec(
        1, worker="metered", action="work_int", script=("empty",), failure={"kind": "fallback", "worker": "tool"}, deps={"s0": "reference"}
    ),
    spec(
        2,
        worker="alt",
        script=("empty",),
        failure={"kind": "fallback", "worker": "metered", "then": "skip"},
        then_ok=False,
        deps={"s1": "both"},
    ),
    spec(3, worker="metered", tolerant=True, deps={"s2": "reference", "s0": "path"}),
)
# Timeouts, retries and fallbacks under one slot, cancelled from outside while attempts hang.
HANGING_UNDER_ONE_SLOT = example_scenario(
    spec(0, script=("hang",), failure=RETRY),
    spec(1, worker="alt", script=("hang", "hang", "raise"), failure={**RETRY, "then": "fallback", "worker": "metered"}),
    spec(2, deps={"s0": "reference", "s1": "declared"}, tolerant=True, script=("hang",), failure={"kind": "fallback", "worker": "alt"}),
    spec(3, deps={"s2": "path"}),
    max_concurrency=1,
    cancel_after=0.12,
)


# found on the draw of seed 20261128 (the rotated pass): a failing approver on a step whose fallback is followed by a
# replan ends it with the replan, as the engine's final_action says (the model here had it aborting)
REFUSED_THEN_REPLAN = example_scenario(
    spec(0, worker="alt", approval="error", failure={"kind": "fallback", "worker": "tool", "then": "replan"}),
    spec(1, approval="no", failure={**RETRY, "then": "skip"}),
    spec(2, deps={"s1": "reference"}, tolerant=True),
    async_approver=True,
)

# found by hypothesis on a fresh clone (issue 24): a step cut off while it waited for its retry's slot (max_concurrency 1)
# was recorded as running (StepCancelled was_running=True in phase ready); ../shared/repro/history-property-failure.txt
CUT_OFF_WAITING_FOR_A_SLOT = Scenario(
    steps=(
        StepSpec(
            step_id="s0",
            index=0,
            action="work",
            worker="alt",
            deps={},
            script=("hang",),
            then_ok=True,
            failure={
                "kind": "retry",
                "max_attempts": 1,
                "backoff": 0.002,
                "backoff_multiplier": 2.0,
                "jitter": 0.5,
                "then": "fallback",
                "worker": "tool",
            },
            tolerant=True,
            approval=None,
            delay=0.004,
        ),
        StepSpec(
            step_id="s1",
            index=1,
            action="work_int",
            worker="alt",
            deps={},
            script=(),
            then_ok=False,
            failure={"kind": "abort"},
            tolerant=True,
            approval=None,
            delay=0.001,
        ),
        StepSpec(
            step_id="s2",
            index=2,
            action="work",
            worker="tool",
            deps={},
            script=(),
            then_ok=True,
            failure={"kind": "fallback", "worker": "alt", "then": "skip"},
            tolerant=False,
            approval=None,
            delay=0.001,
        ),
        StepSpec(
            step_id="s3",
            index=3,
            action="work_int",
            worker="metered",
            deps={"s0": "declared", "s1": "reference", "s2": "both"},
            script=(),
            then_ok=True,
            failure={
                "kind": "retry",
                "max_attempts": 2,
                "backoff": 0.0,
                "backoff_multiplier": 2.0,
                "jitter": 0.5,
                "then": "fallback",
                "worker": "tool",
            },
            tolerant=False,
            approval=None,
            delay=0.0,
        ),
        StepSpec(
            step_id="s4",
            index=4,
            action="work_int",
            worker="tool",
            deps={"s2": "declared", "s3": "reference", "s1": "declared", "s0": "both"},
            script=(),
            then_ok=True,
            failure={"kind": "skip"},
            tolerant=False,
            approval=None,
            delay=0.004,
        ),
        StepSpec(
            step_id="s5",
            index=5,
            action="work",
            worker="alt",
            deps={"s0": "reference", "s1": "both", "s4": "path"},
            script=("raise", "raise"),
            then_ok=True,
            failure={
                "kind": "retry",
                "max_attempts": 2,
                "backoff": 0.002,
                "backoff_multiplier": 2.0,
                "jitter": 1.0,
                "then": "fallback",
                "worker": "tool",
            },
            tolerant=True,
            approval=None,
            delay=0.004,
        ),
        StepSpec(
            step_id="s6",
            index=6,
            action="work_int",
            worker="metered",
            deps={"s0": "reference", "s2": "path"},
            script=(),
            then_ok=False,
            failure={"kind": "retry", "max_attempts": 2, "backoff": 0.001, "backoff_multiplier": 1.0, "jitter": 0.5, "then": "skip"},
            tolerant=True,
            approval=None,
            delay=0.004,
        ),
        StepSpec(
            step_id="s7",
            index=7,
            action="work",
            worker="metered",
            deps={"s3": "declared"},
            script=("hang",),
            then_ok=False,
            failure={"kind": "abort"},
            tolerant=False,
            approval=None,
            delay=0.0,
        ),
        StepSpec(
            step_id="s8",
            index=8,
            action="work",
            worker="metered",
            deps={"s3": "both", "s4": "both", "s7": "path", "s1": "declared"},
            script=(),
            then_ok=True,
            failure={"kind": "abort"},
            tolerant=True,
            approval=None,
            delay=0.0,
        ),
        StepSpec(
            step_id="s9",
            index=9,
            action="work",
            worker="metered",
            deps={"s4": "declared", "s2": "reference", "s6": "reference", "s7": "path"},
            script=(),
            then_ok=True,
            failure={"kind": "abort"},
            tolerant=True,
            approval=None,
            delay=0.0,
        ),
        StepSpec(
            step_id="s10",
            index=10,
            action="work_int",
            worker="alt",
            deps={"s0": "both"},
            script=(),
            then_ok=True,
            failure={"kind": "fallback", "worker": "metered", "then": "skip"},
            tolerant=True,
            approval=None,
            delay=0.001,
        ),
        StepSpec(
            step_id="s11",
            index=11,
            action="work",
            worker="metered",
            deps={},
            script=("empty", "garbage"),
            then_ok=True,
            failure={"kind": "replan"},
            tolerant=False,
            approval=None,
            delay=0.004,
        ),
        StepSpec(
            step_id="s12",
            index=12,
            action="work_int",
            worker="metered",
            deps={"s9": "path", "s5": "both"},
            script=(),
            then_ok=True,
            failure={"kind": "replan"},
            tolerant=False,
            approval=None,
            delay=0.001,
        ),
        StepSpec(
            step_id="s13",
            index=13,
            action="work",
            worker="metered",
            deps={"s8": "both", "s6": "both", "s5": "both", "s0": "both"},
            script=(),
            then_ok=False,
            failure={"kind": "replan"},
            tolerant=True,
            approval=None,
            delay=0.0,
        ),
        StepSpec(
            step_id="s14",
            index=14,
            action="work",
            worker="tool",
            deps={"s8": "reference", "s2": "path", "s11": "declared"},
            script=(),
            then_ok=False,
            failure={"kind": "fallback", "worker": "metered", "then": "abort"},
            tolerant=True,
            approval=None,
            delay=0.001,
        ),
        StepSpec(
            step_id="s15",
            index=15,
            action="work_int",
            worker="metered",
            deps={"s4": "both"},
            script=(),
            then_ok=False,
            failure={"kind": "replan"},
            tolerant=True,
            approval=None,
            delay=0.0,
        ),
        StepSpec(
            step_id="s16",
            index=16,
            action="work",
            worker="alt",
            deps={},
            script=(),
            then_ok=False,
            failure={"kind": "replan"},
            tolerant=True,
            approval=None,
            delay=0.001,
        ),
        StepSpec(
            step_id="s17",
            index=17,
            action="work",
            worker="tool",
            deps={},
            script=(),
            then_ok=False,
            failure={
                "kind": "retry",
                "max_attempts": 1,
                "backoff": 0.001,
                "backoff_multiplier": 2.0,
                "jitter": 1.0,
                "then": "fallback",
                "worker": "alt",
            },
            tolerant=False,
            approval=None,
            delay=0.004,
        ),
        StepSpec(
            step_id="s18",
            index=18,
            action="work",
            worker="tool",
            deps={"s10": "declared", "s12": "declared"},
            script=(),
            then_ok=True,
            failure={"kind": "abort"},
            tolerant=False,
            approval=None,
            delay=0.0,
        ),
        StepSpec(
            step_id="s19",
            index=19,
            action="work_int",
            worker="tool",
            deps={"s4": "reference", "s10": "reference", "s11": "both", "s16": "declared"},
            script=(),
            then_ok=True,
            failure={"kind": "skip"},
            tolerant=True,
            approval=None,
            delay=0.001,
        ),
    ),
    seed=687,
    max_concurrency=1,
    worker_limits={},
    async_approver=True,
    cancel_after=None,
)


def test_a_step_cut_off_while_it_waits_for_its_retrys_slot_is_not_recorded_as_running() -> None:
    """The example hypothesis found on a fresh clone, replayed on every run whatever the draw."""
    out = asyncio.run(execute(CUT_OFF_WAITING_FOR_A_SLOT))
    check_stream(out)
    terminals = {sid: check_step_story(CUT_OFF_WAITING_FOR_A_SLOT, out, sid) for sid in out.result.plan.step_ids}
    check_behaviour(CUT_OFF_WAITING_FOR_A_SLOT, out, terminals)
    check_status(CUT_OFF_WAITING_FOR_A_SLOT, out, terminals)  # check_step_story: no step_cancelled(was_running) while ready


@PROPERTIES
@given(scenarios())
@example(USAGE_CARRIED)
@example(CUT_OFF_WAITING_FOR_A_SLOT)
@example(REFUSED_THEN_REPLAN)
@example(HANGING_UNDER_ONE_SLOT)
@example(dataclasses.replace(HANGING_UNDER_ONE_SLOT, cancel_after=None))
def test_every_run_terminates_with_every_step_recorded_and_a_consistent_history(scn: Scenario) -> None:
    out = asyncio.run(execute(scn))
    check_stream(out)
    terminals = {sid: check_step_story(scn, out, sid) for sid in out.result.plan.step_ids}
    check_behaviour(scn, out, terminals)
    check_status(scn, out, terminals)
    check_fates(scn, out)
    note_coverage(scn, out, terminals)
