"""Bounded, strict step outputs: a limit in bytes checked off the event loop, and no silent change to a value.

Each case runs a real plan on an `Engine` with a small worker that returns
what the test gives it (the way a custom worker or a distributed runner
hands the engine a `WorkResult`), or with a `@tool` where the tool path
reaches the engine's encoder unchanged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import itertools
import json
import math
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from planexec import Engine, Plan, Registry, RoleWorker, RunStatus, StepState, Team, Tool, tool
from planexec.cli.main import main
from planexec.config import ConfigError, load_config
from planexec.engine.config import EngineConfig
from planexec.errors import ToolOutputError
from planexec.store import open_store
from planexec.testing import FunctionModel, ScriptedModel, tool_call
from planexec.workers.io import WorkResult
from planexec.workers.outputs import DEFAULT_MAX_OUTPUT_BYTES, encode, encode_inline

MiB = 1024 * 1024


class Returns:
    """A worker whose action ``<name>`` returns ``outputs[name]()``: a fresh value (a fresh generator) each attempt."""

    name, description, max_concurrency = "returns", "returns what the test gives it", None

    def __init__(self, outputs: dict[str, Callable[[], Any]]) -> None:
        self.outputs = outputs

    @property
    def actions(self) -> set[str]:
        return set(self.outputs)

    def input_model(self, action: str) -> None:
        return None

    async def perform(self, call: Any) -> WorkResult:
        return WorkResult(output=self.outputs[call.action]())


def run_steps(outputs: dict[str, Callable[[], Any]], *, timeout: float = 10, store: Any = None, **settings: Any):
    """Run one step per output (each ``failure_action: skip``) and return the `RunResult`."""
    reg = Registry.default()
    reg.add_worker(Returns(outputs))
    plan = Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "g",
            "steps": [{"id": n, "action": n, "worker": "returns", "timeout": timeout, "failure_action": "skip"} for n in outputs],
        }
    )

    async def go():
        return await Engine(reg, store=store, **settings).start(plan, run_id="r").result()

    return asyncio.run(go())


def watching_the_loop(reg: Registry, plan: Plan) -> tuple[Any, list[float], float]:
    """Run `plan` while a task ticks every 5 ms: (the result, the gaps between ticks, seconds in all)."""
    gaps: list[float] = []

    async def go():
        task = asyncio.ensure_future(Engine(reg).start(plan).result())
        last = time.perf_counter()
        while not task.done():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
        return await task

    t0 = time.perf_counter()
    result = asyncio.run(go())
    return result, gaps, time.perf_counter() - t0


class Handle:
    """Something that is not data."""


class Colour(enum.Enum):
    RED = "red"


class Reading(BaseModel):
    sensor: str
    value: float
    taken: datetime.datetime = datetime.datetime(2026, 1, 2, 3, 4, 5)
    unit_name: str = Field("C", alias="unit")


@dataclasses.dataclass
class Row:
    key: str
    values: tuple[int, ...]
    reading: Reading


# --- what was silently changed or grew without bound -------------------------------------------------


def test_an_infinite_generator_fails_its_step_at_once_and_is_never_consumed():
    """Before: consumed on the event loop past the 10 s timeout until 3.5 GB. Now refused where it stands."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        result = run_steps({"stream": lambda: (i for i in itertools.count()), "nested": lambda: {"rows": [1, 2, itertools.count()]}})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - t0
    assert elapsed < 5  # well within the steps' 10 s timeout (measured: ~0.05 s)
    assert peak < 20 * MiB  # the whole run, engine included (measured: ~1-2 MiB)
    stream, nested = result.steps["stream"], result.steps["nested"]
    assert stream.state is StepState.FAILED and stream.error.rule == "tool_output" and stream.error.type == "ToolOutputError"
    assert stream.error.message.startswith("step 'stream' (worker 'returns'): output is a generator, an iterator")
    assert "output.rows[2] is an itertools.count object" in nested.error.message
    assert "Traceback" not in stream.error.message


def test_a_huge_structure_stops_at_the_limit_without_being_copied_whole():
    row = "x" * 100
    rows = [row] * 5_000_000  # about 500 MB of JSON, built before measuring
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        result = run_steps({"big": lambda: {"rows": rows}})
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    error = result.steps["big"].error
    assert error.rule == "tool_output"
    assert f"larger than the limit (max_output_bytes = {DEFAULT_MAX_OUTPUT_BYTES:,} bytes (32.0 MiB))" in error.message
    assert ", passed at output.rows[" in error.message  # where the running size passed it
    assert peak < 16 * MiB and elapsed < 5  # the copy stops at 32 MiB of JSON: ~330,000 references, not 5,000,000


def test_a_100_mb_string_fails_naming_its_size_without_being_read():
    reg = Registry.default()

    @reg.tool
    def dump() -> str:
        return "x" * 100_000_000

    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "dump", "action": "dump", "failure_action": "skip"}]})

    def failed(**settings: Any):
        async def go():
            return await Engine(reg, **settings).start(plan).result()

        t0 = time.perf_counter()
        step = asyncio.run(go()).steps["dump"]
        return step, time.perf_counter() - t0

    step, elapsed = failed(max_output_bytes=1_000_000)
    assert step.state is StepState.FAILED and step.error.rule == "tool_output"
    assert step.error.message == (
        "step 'dump' (tool 'dump'): output is larger than the limit (max_output_bytes = 1,000,000 bytes): "
        "at least 100,000,002 bytes (95.4 MiB) of JSON"
    )
    assert elapsed < 2
    step, _ = failed()  # the default limit refuses it too
    assert "(max_output_bytes = 33,554,432 bytes (32.0 MiB))" in step.error.message and "100,000,002 bytes" in step.error.message


class _Listish(list):
    """A list subclass: still a list, still JSON."""


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (math.nan, "output is nan, which JSON cannot hold"),
        (math.inf, "output is inf, which JSON cannot hold"),
        (-math.inf, "output is -inf, which JSON cannot hold"),
        ({"items": [1.0, 2.0, 3.0, math.nan]}, "output.items[3] is nan"),
        ({"tags": {"b", "a"}}, "output.tags is a set, whose order is not the same from one process to the next"),
        (frozenset({1}), "output is a frozenset"),
        ("generator", "output is a generator, an iterator, which would have to be consumed"),
        (iter([1, 2]), "output is a list_iterator, an iterator"),
        (Handle(), f"output is a {__name__}.Handle object, which is not JSON data"),
        ({"a": {"b": [0, Handle()]}}, f"output.a.b[1] is a {__name__}.Handle object"),
        ({"odd key": {(1, 2): "x"}}, "output['odd key'] has a tuple as a key"),
        ({"v": {}.values()}, "output.v is a dict_values, which is not JSON data"),
        (b"\xff\xfe", "output is a bytes that is not UTF-8 text"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) or " " in v else v,
)
def test_values_that_are_not_json_fail_naming_the_step_the_place_and_the_type(value, says):
    make = (lambda: (i for i in range(3))) if value == "generator" else (lambda: value)
    step = run_steps({"odd": make}).steps["odd"]
    assert step.state is StepState.FAILED and step.error.rule == "tool_output" and step.error.type == "ToolOutputError"
    assert step.error.message.startswith("step 'odd' (worker 'returns'): ")
    assert says in step.error.message


def test_a_value_that_contains_itself_or_nests_too_deep_fails():
    loop: list[Any] = [1]
    loop.append(loop)
    deep: Any = "leaf"
    for _ in range(300):
        deep = [deep]
    result = run_steps({"loop": lambda: loop, "deep": lambda: deep})
    assert "output[1] contains itself" in result.steps["loop"].error.message
    assert "is nested more than 200 levels deep" in result.steps["deep"].error.message


def test_a_tools_top_level_nan_fails_where_it_used_to_be_stored_as_null():
    reg = Registry.default()

    @reg.tool
    def ratio() -> float:
        return math.nan

    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "r", "action": "ratio", "failure_action": "skip"}]})
    step = Engine(reg).run_sync(plan).steps["r"]
    assert step.error.message == (
        "step 'r' (tool 'ratio'): output is nan, which JSON cannot hold (return None or a string for a missing value)"
    )


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"x": math.nan}, "output.x is nan, which JSON cannot hold"),
        ({"tags": {"a"}}, "output.tags is a set, whose order is not the same"),
        ("generator", "output is a generator, an iterator, which would have to be consumed"),
        ({"rows": [1, 2, "generator"]}, "output.rows[2] is a generator"),
    ],
    ids=["nan", "set", "generator", "nested-generator"],
)
def test_a_function_tools_nested_values_are_refused_too(value, says):
    """Before: `Tool.encode_output` dumped a function tool's value first: NaN became null, a set or a generator a list."""

    def fresh(v: Any) -> Any:
        if v == "generator":
            return (i for i in range(3))
        if isinstance(v, dict):
            return {k: fresh(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fresh(x) for x in v]
        return v

    reg = Registry.default()

    @reg.tool
    def returns():
        return fresh(value)

    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "s", "action": "returns", "failure_action": "skip"}]})
    step = Engine(reg).run_sync(plan).steps["s"]
    assert step.state is StepState.FAILED and step.error.rule == "tool_output" and step.error.type == "ToolOutputError"
    assert step.error.message.startswith("step 's' (tool 'returns'): ")
    assert says in step.error.message


GENERATOR_TOOLS = """
import itertools, json, sys, time
from collections.abc import Iterable
from planexec import Engine, Plan, Registry

reg = Registry.default()

@reg.tool
def stream():
    return (i for i in itertools.count())

@reg.tool
def counted() -> list[int]:
    return (i for i in itertools.count())

@reg.tool
def lazy() -> Iterable[int]:
    return itertools.count()

steps = [{"id": n, "action": n, "timeout": 1, "failure_action": "skip"} for n in ("stream", "counted", "lazy")]
plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": steps})
t0 = time.perf_counter()
result = Engine(reg).run_sync(plan)
print(json.dumps({"elapsed": time.perf_counter() - t0, "errors": {s: r.error.message for s, r in result.steps.items()}}))
"""


def test_a_tool_returning_an_infinite_generator_fails_within_its_timeout_and_the_process_ends():
    """Before: pydantic consumed it on the event loop, past the 1 s timeout, until memory ran out. Now refused unconsumed."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", GENERATOR_TOOLS], capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["elapsed"] < 1  # within the steps' timeout, not at it (measured: ~0.01 s)
    assert wall < 30  # the process ended by itself
    for name in ("stream", "counted", "lazy"):
        message = report["errors"][name]
        assert message.startswith(f"step {name!r} (tool {name!r}): output is ")
        assert "generator" in message or "itertools.count" in message
        assert "an iterator, which would have to be consumed" in message


def test_a_typed_tool_checks_strictly_before_its_type():
    reg = Registry.default()

    @reg.tool
    def readings() -> list[float]:
        return [1.0, math.nan]

    @reg.tool
    def labels() -> set[str]:
        return {"b", "a"}

    @reg.tool
    def fine() -> Reading:
        return Reading(sensor="s", value=2.5)

    @reg.tool
    def wrong() -> int:
        return "many"  # type: ignore[return-value]

    steps = [{"id": n, "action": n, "failure_action": "skip"} for n in ("readings", "labels", "fine", "wrong")]
    result = Engine(reg).run_sync(Plan.model_validate({"plan_id": "p", "goal": "g", "steps": steps}))
    errors = {s: r.error.message for s, r in result.steps.items() if r.error}
    assert errors["readings"] == (
        "step 'readings' (tool 'readings'): output[1] is nan, which JSON cannot hold (return None or a string for a missing value)"
    )
    assert errors["labels"].startswith("step 'labels' (tool 'labels'): output is a set, whose order is not the same")
    assert errors["wrong"].startswith("step 'wrong' (tool 'wrong'): returned str that its declared type int rejects")
    # as before: a typed tool's value is dumped by its declared type (field names, not aliases)
    assert result.steps["fine"].output.value == {"sensor": "s", "value": 2.5, "taken": "2026-01-02T03:04:05", "unit_name": "C"}


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "untyped"])
def test_a_tool_returning_100_mb_fails_against_a_10_mb_limit_naming_the_size(typed):
    reg = Registry.default()
    big = "x" * 100_000_000

    def dump() -> str:
        return big

    def dump_untyped():
        return big

    reg.add_tool(Tool(dump if typed else dump_untyped, name="dump"))
    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "dump", "action": "dump", "failure_action": "skip"}]})
    t0 = time.perf_counter()
    step = Engine(reg, max_output_bytes=10 * MiB).run_sync(plan).steps["dump"]
    assert time.perf_counter() - t0 < 2
    assert step.error.message == (
        "step 'dump' (tool 'dump'): output is larger than the limit (max_output_bytes = 10,485,760 bytes (10.0 MiB)): "
        "at least 100,000,002 bytes (95.4 MiB) of JSON"
    )


def test_a_large_typed_tool_output_is_checked_off_the_event_loop():
    """A 1,000,000-number output of a ``-> list[int]`` tool: checked, validated and dumped in a thread."""
    big = list(range(1_000_000))
    reg = Registry.default()

    @reg.tool
    def numbers() -> list[int]:
        return big

    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "n", "action": "numbers"}]})
    result, gaps, elapsed = watching_the_loop(reg, plan)
    assert result.status is RunStatus.SUCCEEDED and result.steps["n"].output.value == big
    assert max(gaps) < max(0.25, elapsed / 4)


def test_a_role_workers_model_reads_a_strict_tool_result():
    """The same check when a model calls the tool: an error it can read, or JSON (a pydantic model dumped by alias)."""
    reg = Registry.default()

    @tool(read_only=True)
    def measure(bad: bool = False):
        return {"v": math.nan} if bad else Reading(sensor="s", value=1.5)

    seen: list[str] = []

    def play(request: Any) -> Any:
        results = [m.content for m in request.messages if m.role == "tool"]
        if len(results) < 2:
            return tool_call("measure", bad=not results)
        seen.extend(results)
        return "done"

    model = FunctionModel(play)
    reg.add_worker(RoleWorker("meter", model=model, description="measures", system_prompt="Measure.", tools=[measure], tasks=["read"]))
    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "r", "action": "read", "worker": "meter"}]})
    result = Engine(reg).run_sync(plan)
    assert result.status is RunStatus.SUCCEEDED, result.steps["r"].error
    assert (
        seen[0] == "error: step 'r' (tool 'measure'): output.v is nan, which JSON cannot hold (return None or a string for a missing value)"
    )
    assert json.loads(seen[1]) == {"sensor": "s", "value": 1.5, "taken": "2026-01-02T03:04:05", "unit": "C"}


# --- what is legitimately JSON stays as it was ---------------------------------------------------------


ORDINARY: dict[str, Callable[[], Any]] = {
    "nested": lambda: {"a": {"b": [1, 2.5, "three", None, True, {"c": []}]}, "n": -(10**30)},
    "model": lambda: Reading(sensor="s1", value=21.5),
    "dataclass": lambda: Row(key="k", values=(1, 2, 3), reading=Reading(sensor="s2", value=-1.0)),
    "tuples": lambda: ((1, 2), ("a", ("b",)), ()),
    "scalars": lambda: [Colour.RED, datetime.date(2026, 5, 6), b"text", "ünïcode ✓", _Listish([1])],
    "keys": lambda: {2: "int key", "s": "str key", False: "bool key", 2.5: "float key"},
    "text": lambda: "plain",
    "none": lambda: None,
}


def test_ordinary_outputs_succeed_and_are_stored_as_before(tmp_path):
    store = open_store(str(tmp_path / "runs.db"))
    result = run_steps(ORDINARY, store=store)
    assert result.status is RunStatus.SUCCEEDED, {s: r.error for s, r in result.steps.items() if r.error}
    stored = {e.step_id: e.output.value for e in store.events("r") if e.type == "step_succeeded"}
    for name, make in ORDINARY.items():
        before = to_jsonable_python(make())  # what the engine stored before this change
        assert result.steps[name].output.value == before, name
        assert stored[name] == json.loads(json.dumps(before)), name
    assert stored["model"] == {"sensor": "s1", "value": 21.5, "taken": "2026-01-02T03:04:05", "unit": "C"}


def test_a_large_allowed_output_is_encoded_off_the_event_loop():
    """A 2,000,000-element output is encoded in a thread: the loop keeps ticking the whole time."""
    big = list(range(2_000_000))
    reg = Registry.default()
    reg.add_worker(Returns({"big": lambda: {"numbers": big}}))
    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "big", "action": "big", "worker": "returns"}]})
    result, gaps, elapsed = watching_the_loop(reg, plan)
    assert result.status is RunStatus.SUCCEEDED and result.steps["big"].output.value == {"numbers": big}
    assert elapsed > 0.2  # long enough for the measure to mean something
    assert max(gaps) < max(0.25, elapsed / 4)  # the loop never waited for the whole encoding (measured: ~10-30 ms)


def test_encoding_never_holds_a_step_past_its_timeout():
    big = [list(range(100)) for _ in range(60_000)]  # 6,000,000 numbers: seconds to encode, under the limit
    t0 = time.perf_counter()
    result = run_steps({"slow": lambda: big}, timeout=0.3, max_output_bytes=0)
    elapsed = time.perf_counter() - t0
    step = result.steps["slow"]
    assert step.state is StepState.FAILED and step.error.rule in ("timeout", "tool_output")
    assert "0.3s" in step.error.message or "did not finish within the step's timeout" in step.error.message
    assert elapsed < 2
    for _ in range(100):  # the thread stops by itself once nobody waits for it
        if not any(t.name == "planexec-encode" for t in threading.enumerate()):
            break
        time.sleep(0.02)
    assert not any(t.name == "planexec-encode" for t in threading.enumerate())


# --- the limit is a setting -------------------------------------------------------------------------


def test_the_limit_is_configurable():
    out = {"text": "y" * 1000}
    assert (
        run_steps({"s": lambda: out}, max_output_bytes=500)
        .steps["s"]
        .error.message.startswith("step 's' (worker 'returns'): output is larger than the limit (max_output_bytes = 500 bytes): at least")
    )
    for unlimited in (None, 0, 2000):
        assert run_steps({"s": lambda: out}, max_output_bytes=unlimited).steps["s"].output.value == out
    assert EngineConfig().max_output_bytes == DEFAULT_MAX_OUTPUT_BYTES == 32 * MiB
    assert Engine(config=EngineConfig(max_output_bytes=10)).config.max_output_bytes == 10
    for bad in (-1, 1.5, True, "1MB"):
        with pytest.raises(ValueError, match="max_output_bytes"):
            EngineConfig(max_output_bytes=bad)


# --- the encoder on its own ----------------------------------------------------------------------------


def test_the_encoder_counts_compact_json_bytes_exactly_when_nothing_is_escaped():
    value = {"a": [1, 2.5, None, True, False, "ü"], "b": {"c": "d"}, "e": []}
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    assert encode(value, step_id="s", tool="t", max_bytes=size) == value
    with pytest.raises(ToolOutputError, match=f"max_output_bytes = {size - 1} bytes") as info:
        encode(value, step_id="s", tool="t", max_bytes=size - 1)
    assert info.value.tool == "t"
    (problem,) = info.value.problems
    assert (problem.rule, problem.step_id, problem.field) == ("output_too_large", "s", "output")


def test_inline_encoding_hands_large_values_to_a_thread_and_refuses_bad_ones_at_once():
    assert encode_inline({"a": 1}, step_id="s", tool="t") == (True, {"a": 1})
    assert encode_inline(list(range(10_000)), step_id="s", tool="t") == (False, None)
    assert encode_inline("x" * 1_000_000, step_id="s", tool="t") == (False, None)
    assert encode_inline(Reading(sensor="a", value=1), step_id="s", tool="t") == (False, None)  # a model dump is a copy
    with pytest.raises(ToolOutputError) as info:
        encode_inline({"v": [math.inf]}, step_id="s", tool="t")
    (problem,) = info.value.problems
    assert (problem.rule, problem.field) == ("not_finite", "output.v[0]")


def test_a_stop_request_ends_the_walk():
    stop = threading.Event()
    stop.set()
    with pytest.raises(ToolOutputError, match="the step stopped waiting for it") as info:
        encode(list(range(10_000)), step_id="s", tool="t", stop=stop)
    assert info.value.problems[0].rule == "output_timeout"


def test_work_result_as_json_is_the_same_strict_encoder():
    assert WorkResult(output=(1, {"a": (2,)})).as_json("w").output == [1, {"a": [2]}]
    plain = WorkResult(output="text")
    assert plain.as_json("w") is plain
    with pytest.raises(ToolOutputError, match=r"^step 's' \(tool 'fetch'\): output\.rows\[0\] is a set"):
        WorkResult(output={"rows": [{1}]}, tools=["fetch"]).as_json("w", step_id="s")
    with pytest.raises(ToolOutputError, match=r"^worker 'w': output is larger than the limit \(max_output_bytes = 10 bytes\)"):
        WorkResult(output="x" * 20).as_json("w", max_bytes=10)


def test_the_limit_is_read_from_planexec_toml(tmp_path, monkeypatch, capsys):
    """``max_output_bytes = 1000`` in planexec.toml fails a step whose output takes 2,002 bytes (planexec run and Team alike)."""
    (tmp_path / "lib.py").write_text("from planexec import tool\n\n@tool\ndef big() -> str:\n    return 'x' * 2000\n")
    (tmp_path / "plan.json").write_text(json.dumps({"plan_id": "p", "goal": "g", "steps": [{"id": "big", "action": "big"}]}))
    (tmp_path / "planexec.toml").write_text('[planexec]\ntools = ["lib.py"]\nmax_output_bytes = 1000\n')
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--plan", "plan.json", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["steps"]["big"]["error"]
    assert error["rule"] == "tool_output"
    assert error["message"] == (
        "step 'big' (tool 'big'): output is larger than the limit (max_output_bytes = 1,000 bytes): at least 2,002 bytes of JSON"
    )
    assert Team.from_config(tmp_path, model=ScriptedModel([])).engine().config.max_output_bytes == 1000
    (tmp_path / "planexec.toml").write_text('[planexec]\ntools = ["lib.py"]\nmax_output_bytes = 0\n')  # 0: no limit
    assert main(["run", "--plan", "plan.json", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"]["big"]["state"] == "succeeded"
    (tmp_path / "planexec.toml").write_text("[planexec]\n")  # not said: the engine's default
    assert Team.from_config(tmp_path, model=ScriptedModel([])).engine().config.max_output_bytes == DEFAULT_MAX_OUTPUT_BYTES
    for bad in ("-1", '"1MB"', "1.5", "true"):
        (tmp_path / "planexec.toml").write_text(f"[planexec]\nmax_output_bytes = {bad}\n")
        with pytest.raises(ConfigError, match="max_output_bytes"):
            load_config(tmp_path)
