"""What the engine's lean hot path must keep.

Deadlines on one shared timer still fire on time and only for their own
step; step records built without validation are the records pydantic
would build; a record's times are its events' times, so a run replayed
from its events has the records the live run had; the scheduler's own
counting hands steps out in graphlib's order.
"""

from __future__ import annotations

import asyncio
import copy
import graphlib
import pickle
import random
import time

import pytest

from planexec import Engine, Plan, Registry, StepState
from planexec.engine.deadline import Deadline, DeadlineClock
from planexec.engine.replay import replay
from planexec.engine.results import StepRecord
from planexec.engine.state import ZERO, _new_record, append_to_record
from planexec.events import parse_event
from planexec.plan.scheduler import Scheduler


def mkplan(*steps):
    return Plan.model_validate({"plan_id": "p", "goal": "g", "steps": list(steps)})


@pytest.fixture
def reg():
    reg = Registry()

    @reg.tool
    async def nap(seconds: float = 0.0) -> str:
        await asyncio.sleep(seconds)
        return "rested"

    @reg.tool
    async def quick() -> None:
        return None

    return reg


def test_a_short_deadline_armed_after_a_long_one_fires_at_its_own_time(reg):
    # the clock's timer is armed for the long deadline first; the short one must bring it forward
    plan = mkplan(
        {"id": "long", "action": "nap", "parameters": {"seconds": 0.6}, "timeout": 30},
        {"id": "short", "action": "nap", "parameters": {"seconds": 30}, "timeout": 0.1, "failure_action": "skip"},
    )

    async def go():
        t0 = time.perf_counter()
        r = Engine(reg).start(plan)
        ended = {}
        r.subscribe(lambda ev: ended.setdefault(ev.step_id, time.perf_counter() - t0) if ev.type == "step_failed" else None)
        return await r.result(), ended

    result, ended = asyncio.run(go())
    assert result.steps["long"].state is StepState.SUCCEEDED
    short = result.steps["short"]
    assert short.state is StepState.FAILED and short.error.rule == "timeout"
    assert 0.09 <= ended["short"] < 0.5  # its own 0.1 s, not the long step's 30 s


def test_a_timeout_fires_after_many_attempts_ended_on_the_same_clock(reg):
    # hundreds of disarmed deadlines are swept from the clock's heap; the live one still fires
    quick = [{"id": f"q{i}", "action": "nap", "parameters": {"seconds": 0.01}} for i in range(300)]
    late = {"id": "late", "action": "nap", "parameters": {"seconds": 30}, "timeout": 0.2, "depends_on": ["q299"], "failure_action": "skip"}
    result = Engine(reg).run_sync(mkplan(*quick, late))
    assert all(result.steps[f"q{i}"].state is StepState.SUCCEEDED for i in range(300))
    assert result.steps["late"].error.rule == "timeout"


def test_deadlines_fire_in_order_and_a_disarmed_one_never_fires():
    async def go():
        clock = DeadlineClock()
        fired = []

        async def attempt(name, delay, work, disarm_early=False):
            d = Deadline(delay, clock)
            try:
                if disarm_early:
                    d.disarm()
                await asyncio.sleep(work)
            except asyncio.CancelledError:
                if d.expired():
                    fired.append(name)
                    return
                raise
            finally:
                d.disarm()

        await asyncio.gather(
            attempt("c", 0.15, 5),
            attempt("a", 0.05, 5),
            attempt("off", 0.01, 0.3, disarm_early=True),
            attempt("b", 0.10, 5),
            attempt("none", None, 0.2),
        )
        return fired, clock

    fired, clock = asyncio.run(go())
    assert fired == ["a", "b", "c"]
    assert not any(entry[2]._task is not None for entry in clock._heap)  # it keeps no task alive


def test_a_cancel_from_outside_is_not_taken_for_the_deadline():
    async def go():
        clock = DeadlineClock()
        seen = {}

        async def attempt():
            d = Deadline(5.0, clock)
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                seen["expired"] = d.expired()
                raise
            finally:
                d.disarm()

        task = asyncio.get_running_loop().create_task(attempt())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    assert asyncio.run(go()) == {"expired": False}


def test_a_record_built_without_validation_is_the_validated_record():
    plan = mkplan({"id": "a", "action": "quick"}, {"id": "b", "action": "nap", "parameters": {"seconds": 0}, "depends_on": ["a"]})
    first, second = (_new_record(step) for step in plan.steps)
    validated = StepRecord(step_id="a", worker=plan.steps[0].worker, action="quick", usage=ZERO)
    assert first == validated and repr(first) == repr(validated)
    assert first.model_dump_json() == validated.model_dump_json()
    assert StepRecord.model_validate_json(first.model_dump_json()) == first
    # the empty lists are shared and refuse to change; adding to one gives that record a list of its own
    assert first.verdicts is second.verdicts and first.calls is second.calls and first.model_attempts is second.model_attempts
    with pytest.raises(TypeError, match="shared"):
        first.verdicts.append({"critic": "c"})
    append_to_record(first, "verdicts", {"critic": "c"})
    assert first.verdicts == [{"critic": "c"}] and second.verdicts == [] and type(first.verdicts) is list
    assert first.model_copy(update={"verdicts": []}) == validated
    for copied in (copy.deepcopy(second), pickle.loads(pickle.dumps(second)), second.model_copy(deep=True)):
        assert copied == second and copied.model_dump_json() == second.model_dump_json()
    for name, value in first.__dict__.items():  # any other mutable default is each record's own
        if isinstance(value, (list, dict, set)) and name not in ("verdicts", "calls", "model_attempts"):
            assert value is not second.__dict__[name], name


def test_records_carry_the_times_of_their_events_and_replay_to_the_same_records(reg):
    plan = mkplan(
        {"id": "a", "action": "quick"},
        {"id": "b", "action": "nap", "parameters": {"seconds": 0.01}, "depends_on": ["a"]},
        {"id": "c", "action": "quick", "depends_on": ["a"]},
    )

    async def go():
        r = Engine(reg).start(plan)
        return r, await r.result()

    r, result = asyncio.run(go())
    for sid, rec in result.steps.items():
        started = next(e for e in r.history if e.type == "step_started" and e.step_id == sid)
        succeeded = next(e for e in r.history if e.type == "step_succeeded" and e.step_id == sid)
        assert rec.started_at == started.at and rec.finished_at == succeeded.at
    # the stored form of every event loads back as the event, and the records replay exactly
    events = [parse_event(ev.to_json()) for ev in r.history]
    assert events == r.history
    assert replay(events, plan).steps == result.steps


def test_the_scheduler_hands_out_steps_in_graphlibs_order():
    # the counts moved from graphlib's objects into dicts; the order steps start in must not move with them
    rng = random.Random(7)
    for _ in range(200):
        nodes = [f"n{i}" for i in range(rng.randint(1, 30))]
        graph = {n: rng.sample(nodes[:i], rng.randint(0, min(i, 3))) for i, n in enumerate(nodes)}
        graph = dict(rng.sample(list(graph.items()), len(graph)))  # the plan's order need not be topological
        sorter = graphlib.TopologicalSorter(graph)
        sorter.prepare()
        sched = Scheduler(graph)
        while sorter.is_active():
            expected = list(sorter.get_ready())
            assert sched.ready().run == expected and sched.is_active()
            for node in expected:
                sorter.done(node)
                sched.succeeded(node)
        assert not sched.is_active() and sched.ready().run == []


def test_a_finished_run_leaves_no_timer_on_the_loop(reg):
    async def go():
        r = Engine(reg).start(mkplan({"id": "a", "action": "nap", "parameters": {"seconds": 0.01}}, {"id": "b", "action": "quick"}))
        await r.result()
        return r._attempts._clock

    clock = asyncio.run(go())
    assert clock._handle is None and clock._heap == []


# --- steps started as they are launched ---------------------------------------------------------


def test_a_cap_hands_a_freed_slot_to_the_longest_waiter_and_a_cancelled_waiter_gives_its_slot_on():
    from planexec.engine.limits import Cap

    async def go():
        cap = Cap(1)
        assert cap.take() and not cap.take() and cap.busy()
        order = []

        async def waiter(name):
            await cap.wait()
            order.append(name)

        first = asyncio.ensure_future(waiter("first"))
        second = asyncio.ensure_future(waiter("second"))
        third = asyncio.ensure_future(waiter("third"))
        await asyncio.sleep(0)
        assert not cap.take()  # others wait first: a late `take` never overtakes them
        cap.give()  # to "first"
        first_done = await first
        second.cancel()  # cancelled while waiting: it never holds a slot
        cap.give()  # "first" is done: to "third", past the cancelled "second"
        await third
        assert order == ["first", "third"] and first_done is None
        with pytest.raises(asyncio.CancelledError):
            await second
        cap.give()
        assert cap.free == 1 and cap.take()

        # handed a slot and cancelled before it ran: the slot goes on, it is not lost
        late = asyncio.ensure_future(cap.wait())
        await asyncio.sleep(0)
        cap.give()
        late.cancel()
        with pytest.raises(asyncio.CancelledError):
            await late
        assert cap.free == 1

    asyncio.run(go())
    with pytest.raises(ValueError, match="at least one slot"):
        Cap(0)


def test_every_tool_finds_its_own_start_stored_and_a_launch_shares_one_commit(tmp_path):
    """With a DurableRunner, no tool runs before its StepStarted is in the store; the steps a launch starts share a commit."""
    from planexec.engine.recording import DurableRunner, record_run
    from planexec.engine.runner import LocalRunner
    from planexec.store import SqliteRunStore

    store = SqliteRunStore(tmp_path / "runs.db")
    seen: dict[str, bool] = {}
    reg = Registry()

    @reg.tool
    def look(name: str) -> str:  # a thread: it reads the store as another process would
        reader = SqliteRunStore(tmp_path / "runs.db")
        try:
            seen[name] = any(e.type == "step_started" and e.step_id == name for e in reader.events(run_id))
        finally:
            reader.close()
        return name

    width = 6
    steps = [{"id": f"a{i}", "action": "look", "parameters": {"name": f"a{i}"}} for i in range(width)]
    steps += [{"id": f"b{i}", "action": "look", "parameters": {"name": f"b{i}"}, "depends_on": [f"a{i}"]} for i in range(width)]
    run_id = "launch"

    async def go():
        engine = Engine(reg, runner=DurableRunner(LocalRunner(reg)))
        run = engine.start(mkplan(*steps), run_id=run_id)
        recorder = record_run(run, store)
        return await run.result(), recorder

    result, recorder = asyncio.run(go())
    assert result.ok and seen == {s["id"]: True for s in steps}
    starts = [e.seq for e in store.events(run_id) if e.type == "step_started" and e.step_id.startswith("a")]
    assert starts == list(range(starts[0], starts[0] + width))  # the first launch's starts, side by side
    # the plan, RunStarted, one commit for the first launch, then at most one per step that ended (and its launch)
    assert recorder.flushes <= 2 + 2 * width + 2
    store.close()


def test_a_step_that_waited_for_a_slot_runs_only_once_its_start_is_stored(tmp_path):
    """One slot, four steps: each later step starts when a step ends, outside a launch; it waits for the next commit."""
    from planexec.engine.recording import DurableRunner, record_run
    from planexec.engine.runner import LocalRunner
    from planexec.store import SqliteRunStore

    store = SqliteRunStore(tmp_path / "runs.db")
    seen: dict[str, bool] = {}
    reg = Registry()

    @reg.tool
    def look(name: str) -> str:
        reader = SqliteRunStore(tmp_path / "runs.db")
        try:
            seen[name] = any(e.type == "step_started" and e.step_id == name for e in reader.events("slots"))
        finally:
            reader.close()
        return name

    async def go():
        engine = Engine(reg, runner=DurableRunner(LocalRunner(reg)), max_concurrency=1)
        run = engine.start(mkplan(*({"id": f"s{i}", "action": "look", "parameters": {"name": f"s{i}"}} for i in range(4))), run_id="slots")
        recorder = record_run(run, store)
        result = await run.result()
        return result, recorder, engine.runner

    result, recorder, runner = asyncio.run(go())
    assert result.ok and seen == {f"s{i}": True for i in range(4)}
    assert runner.recorders == {} and recorder.error is None  # the runner lets go of the run once it finished
    store.close()


def _chain_run(tmp_path, *, idempotent_every: int, n: int, run_id: str):
    """A chain of `n` steps recorded with a DurableRunner; every `idempotent_every`-th step's tool has side effects
    (0: none has), and it reads the store as another process would, noting which earlier events are stored."""
    from planexec.engine.recording import DurableRunner, record_run
    from planexec.engine.runner import LocalRunner
    from planexec.store import SqliteRunStore

    store = SqliteRunStore(tmp_path / "runs.db")
    reg = Registry()
    seen: dict[str, list[str]] = {}

    @reg.tool(idempotent=True, read_only=True)
    async def relay(value: int) -> int:
        """Pass the value on, plus one."""
        return value + 1

    @reg.tool
    def pay(value: int, name: str) -> int:  # a thread: it reads the store as another process would
        reader = SqliteRunStore(tmp_path / "runs.db")
        try:
            seen[name] = [f"{e.type}:{e.step_id}" for e in reader.events(run_id) if getattr(e, "step_id", None)]
        finally:
            reader.close()
        return value + 1

    steps = []
    for i in range(n):
        side = idempotent_every and i % idempotent_every == idempotent_every - 1
        params = {"value": f"${{s{i - 1}}}" if i else 0, **({"name": f"s{i}"} if side else {})}
        steps.append(
            {"id": f"s{i}", "action": "pay" if side else "relay", "parameters": params, **({"depends_on": [f"s{i - 1}"]} if i else {})}
        )

    async def go():
        engine = Engine(reg, runner=DurableRunner(LocalRunner(reg)))
        run = engine.start(mkplan(*steps), run_id=run_id)
        recorder = record_run(run, store)
        return await run.result(), recorder, run

    result, recorder, run = asyncio.run(go())
    try:
        return result, recorder, run, seen, store.events(run_id)
    finally:
        store.close()


def test_a_chain_of_idempotent_steps_shares_commits_and_is_stored_whole(tmp_path):
    """Steps that resume may run again need not wait for their start to be stored: a chain of them commits a few
    times a group window, not once a step, and every event is stored in order by the run's end."""
    n = 300
    result, recorder, run, _, stored = _chain_run(tmp_path, idempotent_every=0, n=n, run_id="idem")
    assert result.ok and result.outputs()["s299"] == n
    assert [e.to_dict() for e in stored] == [e.to_dict() for e in run.history]
    # once a step (with its start) it was; the plan, RunStarted and RunFinished commit on their own
    assert recorder.flushes < n / 4, recorder.flushes


def test_a_step_with_side_effects_finds_its_own_start_and_every_earlier_event_stored(tmp_path):
    """A group window never holds back what a step with side effects needs: its own start is stored before its tool
    runs, and so is every event before it (the idempotent steps' successes, in order: no gap)."""
    result, _, _, seen, stored = _chain_run(tmp_path, idempotent_every=5, n=40, run_id="mixed")
    assert result.ok and set(seen) == {f"s{i}" for i in range(4, 40, 5)}
    for name, events in seen.items():
        i = int(name[1:])
        assert events[-1] == f"step_started:{name}"
        assert [e for e in events if e.startswith("step_succeeded")] == [f"step_succeeded:s{k}" for k in range(i)]
    assert [e.seq for e in stored] == list(range(len(stored)))


@pytest.mark.parametrize("gated", [True, False])
def test_a_fallback_with_side_effects_of_an_idempotent_step_finds_its_start_stored(tmp_path, gated):
    """A step whose own worker is idempotent, handed to a fallback worker that is not: the fallback's start (and the
    reroute) is stored before its tool runs, as for any step with side effects (the group window held them back)."""
    from planexec.engine.recording import DurableRunner, record_run
    from planexec.engine.runner import LocalRunner
    from planexec.store import SqliteRunStore

    store = SqliteRunStore(tmp_path / "runs.db")
    reg = Registry()
    seen: list[str] = []

    @reg.tool(worker="primary", idempotent=True, read_only=True)
    def fetch(url: str = "") -> str:
        raise RuntimeError("primary down")

    @reg.tool(worker="backup", name="fetch_b")
    def fetch_backup(url: str = "") -> str:  # a thread: it reads the store as another process would
        reader = SqliteRunStore(tmp_path / "runs.db")
        try:
            seen.extend(f"{e.type}:{getattr(e, 'worker', '')}" for e in reader.events("rr") if getattr(e, "step_id", None))
        finally:
            reader.close()
        return "from backup"

    reg.worker("backup").tools["fetch"] = reg.worker("backup").tools.pop("fetch_b")
    plan = mkplan({"id": "f", "action": "fetch", "worker": "primary", "failure_action": {"kind": "fallback", "worker": "backup"}})

    async def go():
        engine = Engine(reg, runner=DurableRunner(LocalRunner(reg))) if gated else Engine(reg)
        run = engine.start(plan, run_id="rr")
        record_run(run, store)
        return await run.result()

    try:
        assert asyncio.run(go()).ok
    finally:
        store.close()
    assert seen == ["step_started:primary", "step_failed:primary", "step_rerouted:", "step_started:backup"]


def test_a_resumed_step_on_its_fallback_worker_is_judged_by_that_worker():
    """A resumed run starts a rerouted step on the worker it had reached (its StepStarted says which), with no
    StepRerouted to tell the recorder: that start's worker decides whether its events may wait, not the plan's."""
    from planexec.engine.events import StepStarted, utcnow
    from planexec.engine.recording import Recorder

    reg = Registry()

    @reg.tool(worker="primary", idempotent=True, read_only=True)
    def fetch(url: str = "") -> str:
        return "primary"

    @reg.tool(worker="backup", name="fetch_b")
    def fetch_backup(url: str = "") -> str:
        return "backup"

    reg.worker("backup").tools["fetch"] = reg.worker("backup").tools.pop("fetch_b")
    plan = mkplan({"id": "f", "action": "fetch", "worker": "primary", "failure_action": {"kind": "fallback", "worker": "backup"}})

    the_plan = plan

    class Run:  # what a recorder reads of a run
        run_id, engine, plan = "rr", Engine(reg), the_plan

    class Store:
        def append(self, events, **kw):
            return len(list(events))

    at = utcnow()

    async def go():
        recorder = Recorder(Run(), Store(), gated=True)  # type: ignore[arg-type]  # a store only appends here
        recorder(StepStarted(run_id="rr", seq=1, at=at, step_id="f", worker="primary", action="fetch", attempt=1))
        on_plan = recorder.start_stored("f")  # idempotent: its tool need not wait for the commit
        recorder.flush()
        recorder(StepStarted(run_id="rr", seq=2, at=at, step_id="f", worker="backup", action="fetch", attempt=2))
        return on_plan, recorder.start_stored("f")

    on_plan, on_backup = asyncio.run(go())
    assert on_plan and not on_backup  # the backup's tool waits until its start is stored


def test_a_run_stopped_between_steps_finishes_the_running_step_and_starts_no_other(reg):
    plan = mkplan(
        {"id": "a", "action": "nap", "parameters": {"seconds": 0.2}},
        {"id": "b", "action": "quick", "depends_on": ["a"]},
    )

    async def go():
        run = Engine(reg).start(plan)
        while run.records["a"].state is not StepState.RUNNING:
            await asyncio.sleep(0.01)
        run.cancel_between_steps("handed back")
        return await run.result()

    result = asyncio.run(go())
    assert result.status.value == "cancelled" and result.reason == "handed back"
    assert result.steps["a"].state is StepState.SUCCEEDED  # not cut off
    assert result.steps["b"].state is StepState.CANCELLED and result.steps["b"].started_at is None

    async def later(_step):
        await asyncio.sleep(5)
        return True

    async def idle():  # nothing running (the step waits for a person): cancelled at once
        run = Engine(reg, approver=later).start(mkplan({"id": "a", "action": "quick", "requires_approval": True}))
        await asyncio.sleep(0.05)
        run.cancel_between_steps("now")
        return await asyncio.wait_for(run.result(), 2)

    assert asyncio.run(idle()).status.value == "cancelled"


def test_a_record_with_the_quick_init_is_the_record_its_dataclass_would_build():
    import dataclasses

    from planexec.engine.events import StepStarted, StepSucceeded
    from planexec.records import Record, quick_init
    from planexec.workers.io import Output, Provenance, Source, WorkResult

    at = StepStarted(run_id="r", seq=0, at=__import__("datetime").datetime(2026, 1, 1), step_id="s", worker="w", action="a", attempt=1)
    assert at.type == "step_started" and at.attempt == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        at.seq = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        StepStarted(run_id="r", seq=0, at=at.at, step_id="s", worker="w", action="a")  # attempt is required
    with pytest.raises(TypeError):
        StepStarted("r", 0, at.at, step_id="s", worker="w", action="a", attempt=1)  # keywords only
    a, b = WorkResult(output=1), WorkResult(output=2)
    assert a.tools == [] and a.tools is not b.tools  # a factory's value per record, as the dataclass makes it
    prov = Provenance(
        run_id="r", plan_id="p", plan_version=1, step_id="s", worker="w", action="a", attempt=1, sources=[Source(kind="tool", step_id="s")]
    )
    ev = StepSucceeded(
        run_id="r", seq=1, at=at.at, step_id="s", attempt=1, wall_time=0.5, usage=ZERO, output=Output(value=[1], provenance=prov)
    )
    assert parse_event(ev.to_json()) == ev and pickle.loads(pickle.dumps(ev)) == ev

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Checked(Record):
        n: int
        twice: list[int] = dataclasses.field(default_factory=list)

        def __post_init__(self) -> None:
            object.__setattr__(self, "twice", [self.n * 2])

    quick = quick_init(Checked)
    assert quick(n=2).twice == [4]  # __post_init__ still runs

    @dataclasses.dataclass
    class Loose:
        n: int

    with pytest.raises(TypeError, match="frozen, slotted"):
        quick_init(Loose)


def test_a_run_stopped_between_steps_while_its_last_step_runs_ends_as_it_would_have(reg):
    async def go():
        run = Engine(reg).start(mkplan({"id": "a", "action": "nap", "parameters": {"seconds": 0.1}}))
        while run.records["a"].state is not StepState.RUNNING:
            await asyncio.sleep(0.01)
        run.cancel_between_steps("handed back")
        return await asyncio.wait_for(run.result(), 5)  # it used to wait for ever

    result = asyncio.run(go())
    assert result.ok and result.steps["a"].state is StepState.SUCCEEDED


def test_a_step_waiting_for_a_slot_does_not_start_once_the_run_stops_between_steps():
    reg = Registry()
    log: list[str] = []

    @reg.tool
    async def work(name: str) -> str:
        log.append(f"{name} begins")
        await asyncio.sleep(0.1)
        log.append(f"{name} ends")
        return name

    plan = mkplan({"id": "a", "action": "work", "parameters": {"name": "a"}}, {"id": "b", "action": "work", "parameters": {"name": "b"}})

    async def go():
        run = Engine(reg, max_concurrency=1).start(plan)
        while not log:
            await asyncio.sleep(0.01)
        run.cancel_between_steps("handed back")
        return await asyncio.wait_for(run.result(), 5), run

    result, run = asyncio.run(go())
    assert log == ["a begins", "a ends"]  # b never began: nothing was cut off
    assert result.status.value == "cancelled" and result.steps["a"].state is StepState.SUCCEEDED
    cancelled = [e for e in run.history if e.type == "step_cancelled"]
    assert [(e.step_id, e.was_running) for e in cancelled] == [("b", False)]


def test_a_run_cancelled_by_a_steps_start_runs_no_tool_of_that_launch():
    reg = Registry()
    ran: list[str] = []

    @reg.tool
    async def work(name: str) -> str:
        ran.append(name)
        return name

    plan = mkplan(*({"id": sid, "action": "work", "parameters": {"name": sid}} for sid in "abc"))

    async def go():
        run = Engine(reg).start(plan)
        run.subscribe(lambda ev: run.cancel("stop at the first start") if ev.type == "step_started" else None)
        return await run.result(), run

    result, run = asyncio.run(go())
    assert result.status.value == "cancelled" and ran == []
    assert {sid: r.state for sid, r in result.steps.items()} == dict.fromkeys("abc", StepState.CANCELLED)
    assert [(e.step_id, e.was_running) for e in run.history if e.type == "step_cancelled"] == [("a", False), ("b", False), ("c", False)]


def test_a_step_cancelled_before_its_task_ran_is_run_again_on_resume_not_held(tmp_path):
    from planexec.store import open_store

    reg = Registry()
    calls: list[str] = []

    @reg.tool(idempotent=True)
    async def quick(name: str) -> str:
        calls.append(name)
        return name

    @reg.tool
    async def charge(name: str) -> str:  # not idempotent: a cut-off attempt would be held for a person
        calls.append(name)
        return "charged " + name

    plan = mkplan(
        {"id": "a", "action": "quick", "parameters": {"name": "a"}},
        {"id": "c", "action": "charge", "parameters": {"name": "c"}, "depends_on": ["a"]},
    )
    path = tmp_path / "runs.db"

    async def first():
        store = open_store(path)
        run = Engine(reg, store=store).start(plan, run_id="r1")
        loop = asyncio.get_running_loop()
        run.subscribe(lambda ev: loop.call_soon(run.cancel, "stop") if ev.type == "step_succeeded" else None)
        try:
            return await run.result(), run
        finally:
            store.close()

    async def second():
        store = open_store(path)
        try:
            return await Engine(reg, store=store).resume("r1").result()
        finally:
            store.close()

    result, run = asyncio.run(first())
    assert result.status.value == "cancelled" and calls == ["a"]
    assert [(e.type, getattr(e, "was_running", None)) for e in run.history if getattr(e, "step_id", None) == "c"] == [
        ("step_started", None),
        ("step_cancelled", False),  # started as it was launched, its tool never called
    ]
    resumed = asyncio.run(second())
    assert resumed.ok and calls == ["a", "c"]  # run once, not held for a decision


def test_a_step_that_waits_for_a_slot_is_not_overtaken_by_one_made_ready_later(reg):
    plan = mkplan(
        {"id": "a", "action": "quick"},
        {"id": "b", "action": "quick"},
        {"id": "c", "action": "quick"},
        {"id": "d", "action": "quick", "depends_on": ["a"]},
    )

    async def go():
        run = Engine(reg, max_concurrency=1).start(plan)
        await run.result()
        return run

    run = asyncio.run(go())
    assert [e.step_id for e in run.history if e.type == "step_started"] == ["a", "b", "c", "d"]


def test_a_run_stopped_between_steps_that_owes_a_replan_is_handed_back_without_calling_the_replanner():
    from planexec.engine.replan import FunctionReplanner

    reg = Registry()
    replans: list[str] = []

    @reg.tool
    async def flaky() -> str:
        await asyncio.sleep(0.3)
        raise RuntimeError("boom")

    @reg.tool
    async def quick(name: str) -> str:
        await asyncio.sleep(0.1)
        return name

    plan = mkplan(
        {"id": "a", "action": "flaky", "failure_action": "replan"},
        {"id": "c", "action": "quick", "parameters": {"name": "c"}},
        {"id": "b", "action": "quick", "parameters": {"name": "b"}},
    )
    replanner = FunctionReplanner(lambda ctx: replans.append("asked") or [{"id": "z", "action": "quick", "parameters": {"name": "z"}}])

    async def go():
        run = Engine(reg, max_concurrency=2, replanner=replanner).start(plan)
        await asyncio.sleep(0.02)
        run.cancel_between_steps("released")  # a and c run, b waits for a slot
        return await asyncio.wait_for(run.result(), 5), run  # it used to wait for ever for b

    result, run = asyncio.run(go())
    assert result.status.value == "cancelled" and result.reason == "released" and replans == []
    assert {sid: r.state.value for sid, r in result.steps.items()} == {"a": "failed", "c": "succeeded", "b": "cancelled"}
    assert [e.type for e in run.history if getattr(e, "step_id", None) == "b"] == ["step_ready", "step_cancelled"]


def test_a_run_stopped_between_steps_from_an_event_starts_nothing_after_it(reg):
    plan = mkplan(*({"id": sid, "action": "quick"} for sid in "abcd"))

    async def go():
        run = Engine(reg).start(plan)
        run.subscribe(lambda ev: run.cancel_between_steps("stop") if ev.type == "step_started" else None)
        return await run.result(), run

    result, run = asyncio.run(go())
    assert [e.step_id for e in run.history if e.type == "step_started"] == ["a"]
    assert result.steps["a"].state is StepState.SUCCEEDED and result.status.value == "cancelled"
    assert all(result.steps[sid].state is StepState.CANCELLED for sid in "bcd")


def test_a_step_held_for_a_decision_stays_held_when_its_resumed_run_is_stopped(tmp_path):
    """A held step cancelled with its run is cut off again on the next resume, never run without a person."""
    from planexec.engine.resume import plan_resumption
    from planexec.store import open_store

    reg = Registry()

    @reg.tool
    async def charge() -> str:  # not idempotent
        return "charged"

    @reg.tool(idempotent=True)
    async def slow() -> str:
        await asyncio.sleep(0.2)
        return "done"

    plan = mkplan({"id": "h", "action": "charge"}, {"id": "w", "action": "slow"})
    store = open_store(tmp_path / "runs.db")

    async def first():  # as if the process died while h ran: its start stored, nothing after
        run = Engine(reg, store=store).start(plan, run_id="r")
        run.subscribe(lambda ev: run.cancel("crash") if ev.type == "step_started" and ev.step_id == "h" else None)
        await run.result()

    asyncio.run(first())
    # the crashed history, in a fresh store: the run and h started, nothing ended
    started = [e for e in store.events("r") if e.type == "run_started" or (e.type == "step_started" and e.step_id == "h")]
    crashed = open_store(tmp_path / "crashed.db")
    crashed.save_plan("r", plan)
    crashed.append(started)
    store.close()

    async def resume_and_stop():
        run = Engine(reg, store=crashed).resume("r")
        assert "h" in run.state.held_steps
        await asyncio.sleep(0.05)
        run.cancel_between_steps("stop")
        return await asyncio.wait_for(run.result(), 5)

    asyncio.run(resume_and_stop())
    again = plan_resumption("r", crashed.events("r"), crashed.plan_versions("r"), lambda step: step.action == "slow")
    assert "h" in again.held  # still waiting for a person, not to be run again
    crashed.close()


def test_a_retry_waiting_for_a_slot_when_the_run_is_cancelled_was_not_running():
    """Found by the property test: the retry's record still said running, so its cancel claimed a cut-off attempt."""
    reg = Registry()
    attempts: list[str] = []

    @reg.tool
    async def flaky(name: str) -> str:
        attempts.append(name)
        await asyncio.sleep(0.05)  # long enough for the other step to be waiting on the slot when this one fails
        raise RuntimeError("first attempt fails")

    @reg.tool
    async def hold(name: str) -> str:
        await asyncio.sleep(5)  # takes the only slot while the retry waits for it
        return name

    retry = {"kind": "retry", "max_attempts": 3, "backoff": 0.001, "jitter": 0.0}
    plan = mkplan(
        {"id": "a", "action": "flaky", "parameters": {"name": "a"}, "failure_action": retry},
        {"id": "b", "action": "hold", "parameters": {"name": "b"}},
    )

    async def go():
        run = Engine(reg, max_concurrency=1, cancel_grace=0.1).start(plan)
        while not any(e.type == "step_ready" and e.step_id == "a" for e in run.history):
            await asyncio.sleep(0.01)
        run.cancel("stop while the retry waits")
        return await asyncio.wait_for(run.result(), 5), run

    result, run = asyncio.run(go())
    assert attempts == ["a"] and result.status.value == "cancelled"
    story = [(e.type, getattr(e, "was_running", None)) for e in run.history if getattr(e, "step_id", None) == "a"]
    assert story[-2:] == [("step_ready", None), ("step_cancelled", False)], story
