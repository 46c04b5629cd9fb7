"""The engine: dependency-driven scheduling, limits, timeouts, failure actions, cancellation, events."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time

import pytest

from planexec import Engine, Plan, Registry, RoleWorker, RunStatus, StepCall, StepState
from planexec.engine.synthesis import FunctionSynthesizer
from planexec.errors import PlanValidationError, ReplanRequested, RunAbortedError
from planexec.events import parse_event
from planexec.policies import approve_calls
from planexec.testing import ScriptedModel, scripted_tool, tool_call


def mkplan(*steps, **extra):
    return Plan.model_validate({"plan_id": "p", "goal": "g", "steps": list(steps), **extra})


def run(engine, plan):
    async def go():
        r = engine.start(plan)
        result = await r.result()
        return r, result

    return asyncio.run(go())


def types(history, step_id=None):
    return [e.type for e in history if step_id is None or getattr(e, "step_id", None) == step_id]


@pytest.fixture
def reg():
    reg = Registry.default()
    reg.clock = []  # (event, step, time) trace written by the tools below

    @reg.tool
    async def work(name: str, seconds: float = 0.0, value: object = None) -> object:
        reg.clock.append(("start", name, time.perf_counter()))
        await asyncio.sleep(seconds)
        reg.clock.append(("end", name, time.perf_counter()))
        return value if value is not None else name

    @reg.tool
    async def add(a: int, b: int) -> int:
        return a + b

    return reg


def test_outputs_flow_as_resolved_parameters_context_and_provenance(reg):
    seen = {}

    @reg.tool(worker="reporter")
    def report(total: int, label: str, call: StepCall) -> dict:
        seen["context"] = {k: v.value for k, v in call.context.items()}
        seen["prov"] = call.context["sum"].provenance
        return {"line": f"{label}: {total}"}

    plan = mkplan(
        {"id": "x", "action": "work", "parameters": {"name": "x", "value": {"items": [{"n": 4}, {"n": 5}]}}},
        {"id": "sum", "action": "add", "parameters": {"a": "${x.items.0.n}", "b": "${x.items.1.n}"}},
        {
            "id": "out",
            "action": "report",
            "worker": "reporter",
            "parameters": {"total": "${sum}", "label": "total of ${x.items.0.n}+${x.items.1.n}"},
        },
    )
    _, result = run(Engine(reg), plan)
    assert result.status is RunStatus.SUCCEEDED
    assert result.answer == {"line": "total of 4+5: 9"}
    assert seen["context"] == {"sum": 9, "x": {"items": [{"n": 4}, {"n": 5}]}}  # references are dependencies
    assert (seen["prov"].step_id, seen["prov"].worker, seen["prov"].action, seen["prov"].tools) == ("sum", "tool", "add", ["add"])
    out = result.steps["out"].output
    assert (out.provenance.worker, out.provenance.action, out.provenance.run_id) == ("reporter", "report", result.run_id)


def test_a_step_starts_when_its_own_dependencies_finish_not_a_whole_layer(reg):
    plan = mkplan(
        {"id": "fast", "action": "work", "parameters": {"name": "fast", "seconds": 0.01}},
        {"id": "slow", "action": "work", "parameters": {"name": "slow", "seconds": 0.4}},
        {"id": "after_fast", "action": "work", "parameters": {"name": "after_fast", "seconds": 0.01}, "depends_on": ["fast"]},
        {"id": "join", "action": "work", "parameters": {"name": "join"}, "depends_on": ["after_fast", "slow"]},
    )
    _, result = run(Engine(reg), plan)
    assert result.ok
    t = {(kind, name): at for kind, name, at in reg.clock}
    assert t[("end", "after_fast")] < t[("end", "slow")]  # no barrier behind the slow branch
    assert t[("start", "join")] >= t[("end", "slow")]


def test_global_and_per_worker_concurrency_limits(reg):
    active = {"all": 0, "db": 0}
    peak = {"all": 0, "db": 0}

    def tracked(kind):
        async def f(i: int) -> int:
            for k in ("all", kind) if kind == "db" else ("all",):
                active[k] += 1
                peak[k] = max(peak[k], active[k])
            await asyncio.sleep(0.02)
            for k in ("all", kind) if kind == "db" else ("all",):
                active[k] -= 1
            return i

        f.__name__ = f"t_{kind}"
        return f

    reg.tool(tracked("db"), worker="db")
    reg.tool(tracked("cpu"), worker="cpu")
    steps = [{"id": f"d{i}", "action": "t_db", "worker": "db", "parameters": {"i": i}} for i in range(8)]
    steps += [{"id": f"c{i}", "action": "t_cpu", "worker": "cpu", "parameters": {"i": i}} for i in range(8)]
    _, result = run(Engine(reg, max_concurrency=4, worker_limits={"db": 2}), mkplan(*steps))
    assert result.ok
    assert peak["all"] == 4 and peak["db"] == 2


def test_a_hanging_tool_times_out_and_the_run_goes_on(reg):
    stop = threading.Event()

    @reg.tool
    def hang() -> str:
        stop.wait(30)  # a sync tool stuck in a thread
        return "late"

    plan = mkplan(
        {"id": "h", "action": "hang", "timeout": 0.2, "failure_action": "skip"},
        {"id": "other", "action": "work", "parameters": {"name": "other"}},
        {"id": "dep", "action": "work", "parameters": {"name": "dep"}, "depends_on": ["h"]},
    )
    started = time.perf_counter()
    _, result = run(Engine(reg), plan)
    stop.set()
    assert time.perf_counter() - started < 5
    h = result.steps["h"]
    assert h.state is StepState.FAILED and h.error.rule == "timeout"
    assert "timed out after 0.2s" in h.error.message
    assert result.steps["other"].state is StepState.SUCCEEDED
    assert result.steps["dep"].state is StepState.SKIPPED
    assert result.status is RunStatus.PARTIAL


def test_step_ready_is_said_only_by_a_step_that_has_to_wait(reg):
    """A step that starts at once has no StepReady; one held by the concurrency limit (or a person) has one, before it starts."""
    plan = mkplan(
        {"id": "a", "action": "work", "parameters": {"name": "a", "seconds": 0.05}},
        {"id": "b", "action": "work", "parameters": {"name": "b", "seconds": 0.05}},
        {"id": "c", "action": "work", "parameters": {"name": "c"}, "depends_on": ["a", "b"]},
    )
    r, result = run(Engine(reg, max_concurrency=1), plan)
    assert result.ok
    first, second = sorted(["a", "b"], key=lambda sid: result.steps[sid].started_at)
    assert types(r.history, first) == ["step_started", "step_succeeded"]
    assert types(r.history, second) == ["step_ready", "step_started", "step_succeeded"]  # it waited for the one slot
    ready = next(e for e in r.history if e.type == "step_ready")
    started = next(e for e in r.history if e.type == "step_started" and e.step_id == second)
    assert ready.at < started.at and result.steps[second].started_at == started.at
    assert types(r.history, "c") == ["step_started", "step_succeeded"]  # its inputs ended, the slot was free
    assert r.state.waiting == set()  # every step that waited started

    async def cancelled_while_waiting():
        run = Engine(reg, max_concurrency=1).start(plan)
        while not any(e.type == "step_ready" for e in run.history):
            await asyncio.sleep(0.005)
        run.cancel("stop")
        await run.result()
        return run

    stopped = asyncio.run(cancelled_while_waiting())
    assert stopped.state.waiting == set()  # the one cancelled while it waited for the slot is not left waiting
    r, result = run(Engine(reg), plan)  # no limit in the way: no step waits
    assert result.ok and "step_ready" not in types(r.history)


def test_retries_back_off_exponentially_then_succeed(reg):
    flaky = scripted_tool("flaky", [RuntimeError("1"), RuntimeError("2"), "ok"])
    reg.add_tool(flaky)
    plan = mkplan({"id": "f", "action": "flaky", "failure_action": {"kind": "retry", "max_attempts": 3, "backoff": 0.01, "jitter": 0.5}})
    r, result = run(Engine(reg, seed=7), plan)
    assert result.ok and result.steps["f"].attempts == 3 and result.answer == "ok"
    delays = [e.delay for e in r.history if e.type == "step_retried"]
    assert len(delays) == 2 and 0.005 <= delays[0] <= 0.01 and 0.01 <= delays[1] <= 0.02
    assert types(r.history, "f") == [
        "step_started", "step_failed", "step_retried",
        "step_started", "step_failed", "step_retried", "step_started", "step_succeeded",
    ]  # fmt: skip  # no slot to wait for: no StepReady
    _, again = run(Engine(reg, seed=7), plan)  # the same seed draws the same jitter
    assert again.ok


def test_retries_exhausted_then_skip_and_tolerant_dependents_run(reg):
    reg.add_tool(scripted_tool("broken", [ValueError("no"), ValueError("still no")]))
    seen = {}

    @reg.tool
    def tolerant(v: object = None, call: StepCall = None) -> str:
        seen["v"], seen["failed"] = v, call.failed_inputs
        return "handled"

    plan = mkplan(
        {"id": "b", "action": "broken", "failure_action": {"kind": "retry", "max_attempts": 2, "backoff": 0, "then": "skip"}},
        {"id": "strict", "action": "work", "parameters": {"name": "s", "value": "${b}"}},
        {"id": "soft", "action": "tolerant", "parameters": {"v": "${b.x}"}, "accepts_failed_inputs": True},
        {"id": "after_strict", "action": "work", "parameters": {"name": "a"}, "depends_on": ["strict"]},
    )
    r, result = run(Engine(reg), plan)
    assert result.status is RunStatus.PARTIAL
    assert result.steps["b"].state is StepState.FAILED and result.steps["b"].attempts == 2
    assert result.steps["strict"].state is StepState.SKIPPED
    assert result.steps["after_strict"].state is StepState.SKIPPED  # transitively
    assert result.steps["soft"].state is StepState.SUCCEEDED
    assert seen["v"] is None and "still no" in seen["failed"]["b"]
    assert next(e for e in r.history if e.type == "step_skipped" and e.step_id == "strict").because == "b"


def test_fallback_reroutes_to_another_worker(reg):
    reg.add_tool(scripted_tool("fetch", [RuntimeError("primary down")], worker="primary"))

    @reg.tool(worker="backup", name="fetch_b")
    def fetch_backup(url: str = "") -> str:
        return "from backup"

    reg.worker("backup").tools["fetch"] = reg.worker("backup").tools.pop("fetch_b")
    plan = mkplan({"id": "f", "action": "fetch", "worker": "primary", "failure_action": {"kind": "fallback", "worker": "backup"}})
    r, result = run(Engine(reg), plan)
    assert result.ok and result.answer == "from backup"
    assert result.steps["f"].output.provenance.worker == "backup"
    rerouted = next(e for e in r.history if e.type == "step_rerouted")
    assert (rerouted.from_worker, rerouted.to_worker) == ("primary", "backup")
    assert types(r.history, "f") == ["step_started", "step_failed", "step_rerouted", "step_started", "step_succeeded"]


def test_abort_cancels_running_steps_and_records_everything(reg):
    reg.add_tool(scripted_tool("bad", [RuntimeError("boom")]))
    plan = mkplan(
        {"id": "slow", "action": "work", "parameters": {"name": "slow", "seconds": 5}},
        {"id": "bad", "action": "bad"},
        {"id": "never", "action": "work", "parameters": {"name": "never"}, "depends_on": ["bad"]},
    )
    started = time.perf_counter()
    r, result = run(Engine(reg), plan)
    assert time.perf_counter() - started < 3
    assert result.status is RunStatus.ABORTED
    assert "step 'bad' failed (exception: boom)" in result.reason
    states = {k: v.state for k, v in result.steps.items()}
    assert states == {"slow": StepState.CANCELLED, "bad": StepState.FAILED, "never": StepState.CANCELLED}
    cancelled = {e.step_id: e.was_running for e in r.history if e.type == "step_cancelled"}
    assert cancelled == {"slow": True, "never": False}
    assert result.steps["slow"].attempts == 1 and result.steps["slow"].wall_time > 0  # its time so far counts
    assert result.steps["never"].attempts == 0 and result.steps["never"].wall_time == 0
    with pytest.raises(RunAbortedError):
        result.raise_for_status()


def test_replan_ends_the_run_cleanly_with_a_typed_signal(reg):
    reg.add_tool(scripted_tool("bad", [RuntimeError("world changed")]))
    plan = mkplan(
        {"id": "bad", "action": "bad", "failure_action": "replan"},
        {"id": "x", "action": "work", "parameters": {"name": "x"}, "depends_on": ["bad"]},
    )
    r, result = run(Engine(reg), plan)
    assert result.status is RunStatus.REPLAN_REQUESTED
    assert result.replan.step_id == "bad" and "world changed" in result.replan.reason
    assert r.history[-1].replan == result.replan
    with pytest.raises(ReplanRequested) as info:
        result.raise_for_status()
    assert info.value.step_id == "bad"


def test_cancel_from_outside_leaves_every_step_recorded(reg):
    plan = mkplan(
        {"id": "a", "action": "work", "parameters": {"name": "a", "seconds": 5}},
        {"id": "b", "action": "work", "parameters": {"name": "b"}, "depends_on": ["a"]},
        {"id": "c", "action": "work", "parameters": {"name": "c", "seconds": 0}},
    )

    async def go():
        r = Engine(reg).start(plan)
        async for ev in r.events():
            if ev.type == "step_succeeded" and ev.step_id == "c":
                r.cancel("user pressed Ctrl-C")
        return r, await r.result()

    r, result = asyncio.run(go())
    assert result.status is RunStatus.CANCELLED and result.reason == "user pressed Ctrl-C"
    assert {k: v.state for k, v in result.steps.items()} == {"a": StepState.CANCELLED, "b": StepState.CANCELLED, "c": StepState.SUCCEEDED}
    assert r.history[-1].type == "run_finished"


def test_cancelling_the_task_that_awaits_the_run_still_records_it(reg):
    plan = mkplan({"id": "a", "action": "work", "parameters": {"name": "a", "seconds": 5}})
    holder = {}

    async def go():
        r = holder["run"] = Engine(reg).start(plan)
        await r._task  # what asyncio.run cancels on Ctrl-C

    async def main():
        t = asyncio.ensure_future(go())
        await asyncio.sleep(0.05)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())
    r = holder["run"]
    assert r.records["a"].state is StepState.CANCELLED
    assert r.history[-1].type == "run_finished" and r.history[-1].status is RunStatus.CANCELLED


def test_tool_failures_of_every_kind_are_recorded_not_raised(reg):
    @reg.tool
    def raises() -> int:
        raise KeyError("missing thing")

    @reg.tool
    def wrong_type() -> int:
        return "seven"  # type: ignore[return-value]

    @reg.tool
    async def garbage():
        return {"handle": object()}

    @reg.tool
    def exits() -> int:
        raise SystemExit(3)

    plan = mkplan(
        *[{"id": n, "action": n, "failure_action": "skip"} for n in ("raises", "wrong_type", "garbage", "exits")],
        {"id": "badref", "action": "work", "parameters": {"name": "${ok.nope}"}, "failure_action": "skip"},
        {"id": "ok", "action": "work", "parameters": {"name": "ok", "value": {"a": 1}}},
        {
            "id": "badarg",
            "action": "add",
            "parameters": {"a": "${ok}", "b": 1},
            "failure_action": {"kind": "retry", "max_attempts": 3, "then": "skip"},
        },
    )
    _, result = run(Engine(reg), plan)
    errors = {k: (v.error.rule, v.error.type) for k, v in result.steps.items() if v.error}
    assert errors == {
        "raises": ("exception", "KeyError"),
        "wrong_type": ("tool_output", "ToolOutputError"),
        "garbage": ("tool_output", "ToolOutputError"),
        "exits": ("exception", "SystemExit"),
        "badref": ("reference", "_ReferenceError"),
        "badarg": ("tool_input", "ToolInputError"),
    }
    assert result.steps["badarg"].attempts == 1  # bad input is not retried: it would fail the same way
    assert "no key 'nope'" in result.steps["badref"].error.message
    assert result.status is RunStatus.PARTIAL


def test_success_criteria_fail_the_step(reg):
    reg.add_tool(scripted_tool("gen", ["", "abc", {"n": "x"}, {"n": 2}, 5], default=None))

    @reg.predicate
    def is_even(output, strict: bool = True) -> tuple[bool, str]:
        return output % 2 == 0, f"{output} is odd"

    crit = [
        ["not_empty"],
        [{"kind": "regex", "pattern": "^\\d+$"}],
        [{"kind": "json_schema", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}],
        [{"kind": "regex", "path": "n", "pattern": "^2$"}],
        [{"kind": "predicate", "name": "is_even", "args": {"strict": True}}],
    ]
    steps = [{"id": f"s{i}", "action": "gen", "success_criteria": c, "failure_action": "skip"} for i, c in enumerate(crit)]
    for _prev, s in itertools.pairwise(steps):
        s["depends_on"] = []
    # run them one after another so the script order is deterministic
    results = []
    for s in steps:
        _, r = run(Engine(reg), mkplan(s))
        results.append(r.steps[s["id"]])
    assert [r.state for r in results] == [StepState.FAILED, StepState.FAILED, StepState.FAILED, StepState.SUCCEEDED, StepState.FAILED]
    assert all(r.error.rule == "check_failed" for r in results if r.error)
    assert "the output is empty" in results[0].error.message
    assert "does not match" in results[1].error.message
    assert "'x' is not of type 'integer' at n" in results[2].error.message
    assert "5 is odd" in results[4].error.message


def test_validation_happens_before_anything_runs(reg):
    with pytest.raises(PlanValidationError):
        run(Engine(reg), mkplan({"id": "a", "action": "work", "parameters": {"name": "a"}}, {"id": "b", "action": "nope"}))
    assert reg.clock == []


def test_synthesis_default_answer_step_and_synthesizer(reg):
    steps = [
        {"id": "a", "action": "work", "parameters": {"name": "a"}},
        {"id": "b", "action": "work", "parameters": {"name": "b"}},
    ]
    assert run(Engine(reg), mkplan(*steps))[1].answer == {"a": "a", "b": "b"}
    assert run(Engine(reg), mkplan(*steps, answer_step="b"))[1].answer == "b"
    synth = FunctionSynthesizer(lambda plan, outputs: " & ".join(sorted(o.value for o in outputs.values())))
    assert run(Engine(reg, synthesizer=synth), mkplan(*steps))[1].answer == "a & b"

    def broken(plan, outputs):
        raise RuntimeError("no answer")

    _, result = run(Engine(reg, synthesizer=FunctionSynthesizer(broken)), mkplan(*steps))
    assert result.answer is None and "synthesizer failed" in result.reason and result.status is RunStatus.PARTIAL


def test_usage_is_recorded_per_step_and_summed(reg):
    model = ScriptedModel([tool_call("add", a=1, b=2), "three", "fine"])
    add = reg.tools["add"]
    reg.add_worker(RoleWorker("coder", model=model, description="d", system_prompt="be exact", tools=[add]))
    plan = mkplan(
        {"id": "a", "action": "respond", "worker": "coder", "instruction": "add one and two"},
        {"id": "b", "action": "respond", "worker": "coder", "instruction": "check ${a}"},
        {"id": "c", "action": "add", "parameters": {"a": 1, "b": 1}},
    )
    _, result = run(Engine(reg, call_approver=approve_calls), plan)  # `add` is not declared read-only: its calls are approved
    a, b, c = (result.steps[s].usage for s in "abc")
    assert (a.model_calls, b.model_calls, c.model_calls) == (2, 1, 0)
    assert a.output_tokens == len(["add({'a':", "1,", "'b':", "2})"]) + 1
    assert result.usage.input_tokens == a.input_tokens + b.input_tokens
    assert result.usage.model_calls == 3
    assert "check three" in model.requests[2].messages[1].content


def test_events_are_delivered_to_subscribers_and_iterators_and_round_trip(reg):
    got = []

    def broken_subscriber(ev):
        raise RuntimeError("subscriber bug")

    plan = mkplan(
        {"id": "a", "action": "work", "parameters": {"name": "a"}},
        {"id": "b", "action": "add", "parameters": {"a": 1, "b": 2}, "depends_on": ["a"]},
    )

    async def go():
        r = Engine(reg, on_event=broken_subscriber).start(plan)
        r.subscribe(got.append)
        streamed = [ev async for ev in r.events()]
        late = [ev async for ev in r.events()]  # a late iterator replays the run
        return r, streamed, late, await r.result()

    r, streamed, late, result = asyncio.run(go())
    assert result.ok
    assert streamed == late == r.history == got
    assert [e.seq for e in streamed] == list(range(len(streamed)))
    assert streamed[0].type == "run_started" and streamed[-1].type == "run_finished"
    for ev in streamed:
        assert parse_event(ev.to_json()) == ev
        assert parse_event(json.loads(ev.to_json())) == ev
    assert result.model_validate_json(result.model_dump_json()) == result


def test_steps_needing_approval_wait_for_the_approver(reg):
    plan = mkplan({"id": "a", "action": "work", "parameters": {"name": "a"}, "requires_approval": True})
    _, refused = run(Engine(reg), plan)
    assert refused.status is RunStatus.ABORTED and refused.steps["a"].error.rule == "approval_required"
    _, denied = run(Engine(reg, approver=lambda step: False), plan)
    assert denied.steps["a"].error.rule == "approval_denied" and reg.clock == []

    async def approve(step):
        return step.step_id == "a"

    _, ok = run(Engine(reg, approver=approve), plan)
    assert ok.ok


def test_a_cancel_after_every_step_ended_does_not_undo_the_outcome(reg):
    plan = mkplan({"id": "only", "action": "work", "parameters": {"name": "only"}})
    holder = {}

    def cancel_late(ev):
        if ev.type == "step_succeeded":
            holder["run"].cancel("too late")

    async def go():
        engine = Engine(reg, on_event=cancel_late)
        r = holder["run"] = engine.start(plan)
        return await r.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.SUCCEEDED and result.answer == "only"


def test_hot_path_records_are_validated_when_read_back():
    from planexec.events import StepSucceeded
    from planexec.workers.io import Output, Provenance

    prov = Provenance(run_id="r", plan_id="p", plan_version=1, step_id="s", worker="w", action="a", tools=["a"])
    out = Output(value={"x": [1, 2]}, provenance=prov)
    assert Output.from_json(out.to_json()) == out
    assert out.to_dict() == {"value": {"x": [1, 2]}, "provenance": {**prov.to_dict()}}
    with pytest.raises(Exception, match="plan_version"):
        Provenance.from_dict({**prov.to_dict(), "plan_version": "not a number"})
    with pytest.raises(Exception, match="colour"):
        Provenance.from_dict({**prov.to_dict(), "colour": "red"})
    data = json.loads(
        StepSucceeded(
            run_id="r",
            seq=3,
            at=__import__("datetime").datetime(2026, 1, 1),
            step_id="s",
            attempt=1,
            wall_time=0.5,
            usage=__import__("planexec").Usage(),
            output=out,
        ).to_json()
    )
    assert data["type"] == "step_succeeded" and data["output"]["provenance"]["step_id"] == "s"
    assert parse_event(data).output == out


def test_timeouts_and_outside_cancellation_are_told_apart(reg):
    @reg.tool
    async def stubborn() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "swallowed"  # a tool that ignores its cancellation still ends the attempt
        return "slept"

    _, swallowed = run(Engine(reg), mkplan({"id": "s", "action": "stubborn", "timeout": 0.05}))
    assert swallowed.ok and swallowed.answer == "swallowed"
    plan = mkplan({"id": "w", "action": "work", "parameters": {"name": "w", "seconds": 5}, "timeout": 0.3})

    async def go():
        r = Engine(reg).start(plan)
        await asyncio.sleep(0.05)
        r.cancel("outside")
        return await r.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.CANCELLED and result.steps["w"].state is StepState.CANCELLED
    _, timed = run(
        Engine(reg, default_timeout=0.05),
        mkplan({"id": "w", "action": "work", "parameters": {"name": "w", "seconds": 5}, "failure_action": "skip"}),
    )
    assert timed.steps["w"].error.rule == "timeout" and "0.05s" in timed.steps["w"].error.message


def test_escapes_are_literal_everywhere_and_outputs_are_never_unescaped(reg):
    plan = mkplan(
        {"id": "a", "action": "work", "parameters": {"name": "a", "value": "echo $${HOME}"}},
        {"id": "b", "action": "work", "parameters": {"name": "b", "value": "$${HOME}"}},
        {"id": "c", "action": "work", "parameters": {"name": "c", "value": "${a} and $${x}"}},
    )
    _, result = run(Engine(reg), plan)
    assert result.steps["a"].output.value == "echo ${HOME}"
    assert result.steps["b"].output.value == "${HOME}"
    assert result.steps["c"].output.value == "echo ${HOME} and ${x}"  # a's output passes through as it is


def test_engine_edge_cases_found_in_review(reg):
    # a tool that raises CancelledError itself (an inner task was cancelled) is a step failure, not a hang
    @reg.tool
    async def inner_cancelled() -> str:
        t = asyncio.ensure_future(asyncio.sleep(10))
        t.cancel()
        return await t

    _, r1 = run(
        Engine(reg),
        mkplan(
            {"id": "a", "action": "inner_cancelled", "failure_action": "skip"},
            {"id": "b", "action": "work", "parameters": {"name": "b"}, "depends_on": ["a"]},
        ),
    )
    assert (r1.steps["a"].error.rule, r1.steps["a"].error.type) == ("exception", "CancelledError")
    assert r1.steps["b"].state is StepState.SKIPPED

    # cancel() from a subscriber stops the step whose event triggered it
    reg.add_tool(scripted_tool("flaky2", [RuntimeError("x")] * 5))
    holder = {}

    def on(ev):
        if ev.type == "step_failed":
            holder["run"].cancel("stop now")

    async def go():
        r = holder["run"] = Engine(reg, on_event=on).start(
            mkplan({"id": "f", "action": "flaky2", "failure_action": {"kind": "retry", "max_attempts": 5, "backoff": 0.01}})
        )
        return await r.result()

    r2 = asyncio.run(go())
    assert r2.status is RunStatus.CANCELLED and r2.steps["f"].state is StepState.CANCELLED and r2.steps["f"].attempts == 1

    # a custom worker whose output is not JSON fails the step instead of breaking the result
    from planexec.workers.io import WorkResult

    class Odd:
        name, description, max_concurrency = "odd", "returns an object", None
        actions = {"odd"}

        def input_model(self, action):
            return None

        async def perform(self, call):
            return WorkResult(output={"handle": object()})

    reg.add_worker(Odd())
    _, r3 = run(Engine(reg), mkplan({"id": "o", "action": "odd", "worker": "odd", "failure_action": "skip"}))
    assert r3.steps["o"].error.rule == "tool_output"
    json.loads(r3.model_dump_json())

    with pytest.raises(ValueError, match="worker_limits"):
        Engine(reg, worker_limits={"tool": 0})


def test_a_hanging_synthesizer_is_bounded_and_cancellable(reg):
    async def never(plan, outputs):
        await asyncio.sleep(30)

    plan = mkplan({"id": "a", "action": "work", "parameters": {"name": "a"}})
    _, timed = run(Engine(reg, synthesizer=FunctionSynthesizer(never), default_timeout=0.1), plan)
    assert timed.status is RunStatus.PARTIAL and "synthesizer timed out" in timed.reason

    async def go():
        r = Engine(reg, synthesizer=FunctionSynthesizer(never)).start(plan)
        async for ev in r.events():
            if ev.type == "step_succeeded":
                await asyncio.sleep(0.05)
                assert r.status is RunStatus.RUNNING  # still assembling the answer
                r.cancel("enough")
        return await r.result()

    cancelled = asyncio.run(go())
    assert cancelled.status is RunStatus.CANCELLED and cancelled.reason == "enough"
    assert cancelled.steps["a"].state is StepState.SUCCEEDED


def test_a_tool_that_ignores_its_timeout_is_abandoned_and_the_run_goes_on(reg):
    stop = {"flag": False}

    @reg.tool
    async def stubborn_forever() -> str:
        while not stop["flag"]:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue  # swallows every cancellation
        return "finally"

    plan = mkplan(
        {"id": "s", "action": "stubborn_forever", "timeout": 0.05, "failure_action": "skip"},
        {"id": "after", "action": "work", "parameters": {"name": "after"}, "depends_on": ["s"]},
        {"id": "other", "action": "work", "parameters": {"name": "other"}},
    )

    async def go():
        r = Engine(reg, max_concurrency=1, cancel_grace=0.1).start(plan)
        result = await asyncio.wait_for(r.result(), 5)
        stop["flag"] = True
        return r, result

    r, result = asyncio.run(go())
    s = result.steps["s"]
    assert s.state is StepState.FAILED and s.error.rule == "timeout" and "abandoned" in s.error.message
    assert result.steps["after"].state is StepState.SKIPPED
    assert result.steps["other"].state is StepState.SUCCEEDED  # its slot was given back (max_concurrency=1)
    assert [e.type for e in r.history if getattr(e, "step_id", None) == "s"][-1] == "step_failed"


def test_a_failed_model_attempt_keeps_its_usage(reg):
    from planexec.errors import ModelServerError

    model = ScriptedModel([tool_call("add", a=1, b=2), ModelServerError("upstream 500")])
    reg.add_worker(RoleWorker("coder", model=model, description="d", system_prompt="s", tools=[reg.tools["add"]]))
    plan = mkplan({"id": "a", "action": "respond", "worker": "coder", "failure_action": "skip"})
    _, result = run(Engine(reg, call_approver=approve_calls), plan)
    rec = result.steps["a"]
    assert rec.error.rule == "worker" and "ModelServerError: upstream 500" in rec.error.message
    assert rec.usage.model_calls == 1 and rec.usage.input_tokens > 0  # the turn that succeeded is counted
    assert result.usage == rec.usage


def test_a_tool_declared_requires_approval_waits_for_the_approver(registry):
    from planexec import Engine, Plan
    from planexec.workers.tools import Tool

    ran = []

    def write_note(text: str) -> str:
        ran.append(text)
        return text

    registry.add_tool(Tool(write_note, requires_approval=True))
    plan = Plan.from_data(
        {"plan_id": "p", "goal": "g", "steps": [{"id": "w", "worker": "tool", "action": "write_note", "parameters": {"text": "hi"}}]}
    )
    refused = Engine(registry).run_sync(plan)
    assert refused.steps["w"].state == "failed" and ran == []
    asked = []
    approved = Engine(registry, approver=lambda step: asked.append(step.step_id) or True).run_sync(plan)
    assert approved.steps["w"].state == "succeeded" and ran == ["hi"] and asked == ["w"]
