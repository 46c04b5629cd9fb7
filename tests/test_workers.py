"""Tools, workers and the registry: schemas from type hints, checked calls, plugins."""

from __future__ import annotations

import asyncio
import sys
import textwrap

import pytest
from pydantic import BaseModel

from planexec import Plan, Registry, RoleWorker, StepCall, Tool, tool
from planexec.errors import RegistryError, ToolInputError, ToolOutputError
from planexec.models import Message, ModelRequest
from planexec.testing import FunctionModel, ScriptedModel, tool_call
from planexec.workers.worker import ToolWorker


class Point(BaseModel):
    x: int
    y: int


def test_input_schema_comes_from_type_hints():
    def move(p: Point, dx: int, label: str = "moved") -> Point:
        """Move a point."""
        return Point(x=p.x + dx, y=p.y)

    t = Tool(move)
    schema = t.input_schema()
    assert schema["required"] == ["p", "dx"]
    assert schema["properties"]["label"]["default"] == "moved"
    assert schema["additionalProperties"] is False
    assert t.description == "Move a point."
    assert t.output_schema()["required"] == ["x", "y"]
    assert asyncio.run(t.invoke({"p": {"x": 1, "y": 2}, "dx": 3})) == {"x": 4, "y": 2}


def test_bad_arguments_are_refused_before_the_function_runs():
    ran = []

    @tool
    def add(a: int, b: int) -> int:
        ran.append((a, b))
        return a + b

    with pytest.raises(ToolInputError) as info:
        asyncio.run(add.invoke({"a": "x", "c": 1}))
    assert ran == []
    assert sorted(p.rule for p in info.value.problems) == ["missing_parameter", "unknown_parameter", "wrong_type"]
    assert "parameters.b" in str(info.value)
    assert add(2, 3) == 5  # the decorated function is still callable


def test_return_values_are_checked_and_must_be_json():
    @tool
    def says_int() -> int:
        return "not a number"  # type: ignore[return-value]

    @tool
    def garbage():
        return object()

    with pytest.raises(ToolOutputError, match="declared type int rejects"):
        asyncio.run(says_int.invoke({}))
    with pytest.raises(ToolOutputError, match="cannot be stored as JSON"):
        asyncio.run(garbage.invoke({}))


def test_async_and_sync_tools_and_the_step_call_parameter():
    seen = {}

    @tool
    async def a_async(n: int) -> int:
        return n * 2

    @tool
    def b_sync(n: int, call: StepCall) -> str:
        seen["step"] = call.step_id
        return f"{call.step_id}:{n}"

    assert b_sync.input_schema()["required"] == ["n"]  # the call is injected, not a parameter
    step = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "s", "action": "b_sync"}]}).steps[0]
    call = StepCall(run_id="r", plan_id="p", step=step, worker="tool", parameters={"n": 1})
    assert asyncio.run(a_async.invoke({"n": 4})) == 8
    assert asyncio.run(b_sync.invoke({"n": 1}, call)) == "s:1"
    assert seen == {"step": "s"}


def test_varargs_tools_are_refused():
    def f(*args):
        return args

    with pytest.raises(RegistryError, match=r"\*args"):
        Tool(f)


def test_registry_groups_tools_into_role_workers():
    reg = Registry()

    @reg.tool(worker="db")
    def backup(name: str) -> str:
        return name

    @reg.tool(worker="db")
    def restore(name: str) -> str:
        return name

    assert reg.worker("db").actions == {"backup", "restore"}
    assert {"backup", "restore"} <= reg.worker("tool").actions  # the catch-all worker sees every tool
    with pytest.raises(RegistryError, match="already registered"):
        reg.tool(lambda: 1, name="backup")
    with pytest.raises(RegistryError, match="no worker 'ghost'; known: db, tool"):
        reg.worker("ghost")


def test_builtins_register_through_the_entry_point():
    reg = Registry.default()
    assert {"echo", "sleep", "concat", "noop"} <= set(reg.tools)
    assert {"truthy", "has_keys"} <= set(reg.predicates)
    assert any(line.startswith("entry point builtin") for line in reg.loaded)


def test_third_party_plugins_register_through_the_entry_point_group(tmp_path, monkeypatch):
    pkg = tmp_path / "acme_tools.py"
    pkg.write_text(
        textwrap.dedent(
            """
            def shout(text: str) -> str:
                return text.upper()

            def register(registry):
                registry.tool(shout, worker="acme")
            """
        )
    )
    dist = tmp_path / "acme_tools-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tools\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[planexec.plugins]\nacme = acme_tools:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry.default()
    assert reg.worker("acme").actions == {"shout"}
    assert any("acme_tools:register" in line for line in reg.loaded)
    sys.modules.pop("acme_tools", None)


def test_load_module_from_a_file_and_by_name(tmp_path, monkeypatch):
    f = tmp_path / "mytools.py"
    f.write_text(
        textwrap.dedent(
            """
            from planexec import tool
            from planexec.workers.tools import predicate
            from planexec.workers.worker import ToolWorker

            @tool(worker="greeter")
            def greet(name: str) -> str:
                return "hi " + name

            @predicate
            def polite(output) -> bool:
                return output.startswith("hi")

            loud = ToolWorker("loud", [greet])
            """
        )
    )
    reg = Registry()
    reg.load_module(str(f))
    assert "greet" in reg.tools and "polite" in reg.predicates
    assert reg.worker("greeter").actions == {"greet"} and reg.worker("loud").actions == {"greet"}
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mytools", raising=False)  # another test's module of that name, imported earlier
    reg2 = Registry()
    reg2.load_module("mytools")
    assert "greet" in reg2.tools
    with pytest.raises(RegistryError, match="cannot import tools module 'no_such_mod'"):
        reg2.load_module("no_such_mod")
    with pytest.raises(RegistryError, match="does not exist"):
        reg2.load_module(str(tmp_path / "missing.py"))


def test_catalog_lists_workers_actions_and_schemas():
    reg = Registry()

    @reg.tool(worker="math")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    entry = next(w for w in reg.catalog() if w["name"] == "math")
    assert entry["actions"][0]["name"] == "add"
    assert entry["actions"][0]["description"] == "Add two integers."
    assert entry["actions"][0]["parameters"]["required"] == ["a", "b"]


def _call(action="respond", instruction="add 2 and 3", params=None):
    step = Plan.model_validate(
        {"plan_id": "p", "goal": "arithmetic", "steps": [{"id": "s", "action": action, "worker": "coder", "instruction": instruction}]}
    ).steps[0]
    return StepCall(run_id="r", plan_id="p", goal="arithmetic", step=step, worker="coder", parameters=params or {})


def test_role_worker_runs_a_tool_loop_and_counts_usage():
    @tool(read_only=True)
    def add(a: int, b: int) -> int:
        return a + b

    model = ScriptedModel([tool_call("add", a=2, b=3), tool_call("add", a="x"), '{"sum": 5}'])
    worker = RoleWorker("coder", model=model, description="writes code", system_prompt="You are a careful coder.", tools=[add])
    result = asyncio.run(worker.perform(_call(params={"hint": "use add"})))
    assert result.output == {"sum": 5}  # JSON replies are parsed
    assert result.tools == ["add"]  # the second call's arguments were refused: it never ran
    assert result.usage.model_calls == 3
    assert result.usage.input_tokens == sum(sum(len(m.content.split()) + 4 for m in r.messages) for r in model.requests)
    first = model.requests[0]
    assert first.messages[0] == Message(role="system", content="You are a careful coder.")
    assert "add 2 and 3" in first.messages[1].content and '"hint": "use add"' in first.messages[1].content
    assert first.tools[0].name == "add"
    tool_results = [m.content for m in model.requests[2].messages if m.role == "tool"]
    assert tool_results[0] == "5"
    assert tool_results[1].startswith(
        "error: the call to 'add' was refused (bad_arguments: tool 'add' refused its arguments"
    )  # its mistake


def test_role_worker_with_a_function_model_and_a_turn_limit():
    def loop_forever(request: ModelRequest):
        return tool_call("echo", value=1)

    @tool
    async def echo(value: int) -> int:
        return value

    worker = RoleWorker("coder", model=FunctionModel(loop_forever), description="d", system_prompt="s", tools=[echo], max_turns=3)
    with pytest.raises(Exception, match=r"ran out of turns \(3\) with work left"):
        asyncio.run(worker.perform(_call()))
    assert worker.actions == {"respond", "echo"}


def test_tool_worker_reports_unknown_actions():
    worker = ToolWorker("w", [])
    with pytest.raises(Exception, match="has no tool 'respond'"):
        asyncio.run(worker.perform(_call()))


def test_an_answer_cut_off_by_the_token_limit_or_looping_ends_the_step_incomplete_never_succeeded():
    from rich.console import Console

    from planexec import Engine, Plan, Registry
    from planexec.cli.progress import print_summary
    from planexec.models import ModelResponse

    loop = "The file notes.txt has three words in it. " * 30
    cases = {
        "cut": ModelResponse(text="The file notes.txt has three words in it. It also", finish_reason="length"),
        "loop": ModelResponse(text=loop, finish_reason="stop"),
        "fine": ModelResponse(text="notes.txt has 3 words.", finish_reason="stop"),
    }
    results = {}
    for name, reply in cases.items():
        registry = Registry()
        registry.add_worker(RoleWorker("writer", model=ScriptedModel([reply]), description="writes", system_prompt="Write.", max_tokens=64))
        plan = Plan.from_data({"plan_id": "p", "goal": "count", "steps": [{"id": "count", "worker": "writer", "action": "respond"}]})
        results[name] = Engine(registry).run_sync(plan)
    cut, looping, fine = results["cut"].steps["count"], results["loop"].steps["count"], results["fine"].steps["count"]
    assert fine.state.value == "succeeded" and fine.output.value == "notes.txt has 3 words."
    assert cut.state.value == "failed" and cut.error.rule == "incomplete"
    assert "cut off by its token limit of 64 (finish reason 'length')" in cut.error.message and "max_tokens" in cut.error.message
    assert looping.state.value == "failed" and looping.error.rule == "incomplete"
    assert "degenerated into repetition ('The file notes.txt has three words in it.' 30 times)" in looping.error.message
    assert results["cut"].status.value != "succeeded"
    console = Console(record=True, width=250)
    print_summary(console, results["loop"])
    text = console.export_text()
    assert "count" in text and "incomplete" in text and "repetition" in text  # the summary says which step and why


def test_repetition_is_told_from_prose_lists_and_short_answers():
    from planexec.workers.worker import repetition

    assert repetition("Tides rise. " * 10) is None  # short pieces (under 12 characters) are not judged
    assert repetition("The sea breathes twice a day. " * 5) is not None
    assert repetition("\n".join(f"- item {i}: value {i * 7}" for i in range(60))) is None  # a list is not a loop
    assert repetition("A first sentence that says one thing. A second one that says another. The answer is 396.") is None
    assert repetition("ha" * 600) is not None  # no sentences at all: a loop all the same (compresses to under 5%)
