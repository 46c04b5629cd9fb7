"""Tools an integrator can build: from a JSON Schema, arguments as given, a per-run context, text results as text."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from dataclasses import dataclass, field
from typing import (
    Annotated,
    Any,
    NotRequired,  # pydantic needs this TypedDict before Python 3.12
)

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from planexec import Engine, Plan, Registry, RoleWorker, StepCall, Tool, tool
from planexec.errors import RegistryError, ToolInputError, ToolOutputError
from planexec.plan.validation import validate_plan
from planexec.planning.draft_schema import draft_schema
from planexec.testing import ScriptedModel, tool_call
from planexec.workers.context import ToolContext, current_dependencies, run_dependencies
from planexec.workers.worker import ToolWorker

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to look for"},
        "limit": {"type": "integer", "default": 10},
        "filters": {"type": "object", "properties": {"colour": {"type": "string"}}},
    },
    "required": ["query"],
}


def _call(action: str = "search", *, run_id: str = "r1", step_id: str = "s1", parameters: dict[str, Any] | None = None) -> StepCall:
    step = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": step_id, "action": action}]}).steps[0]
    return StepCall(run_id=run_id, plan_id="p", step=step, worker="tool", parameters=parameters or {})


def _search_tool(received: list[dict[str, Any]]) -> Tool:
    def handler(**arguments: Any) -> list[str]:
        received.append(arguments)
        return [f"{arguments['query']}-{i}" for i in range(arguments["limit"])][:2]

    return Tool.from_schema("search", "Search the catalogue.", SEARCH_SCHEMA, handler, read_only=True, idempotent=True)


# --- 1. tools from a JSON Schema -------------------------------------------


def test_a_schema_tool_gets_the_arguments_as_given_plus_the_schemas_defaults():
    received: list[dict[str, Any]] = []
    search = _search_tool(received)
    given = {"query": "lamp", "filters": {"colour": "red"}}
    assert asyncio.run(search.invoke(given)) == ["lamp-0", "lamp-1"]
    assert received == [{"query": "lamp", "filters": {"colour": "red"}, "limit": 10}]
    assert received[0]["filters"] is given["filters"]  # the caller's own value, not a copy rebuilt by a model
    assert given == {"query": "lamp", "filters": {"colour": "red"}}  # the caller's dict is not touched
    assert search.description == "Search the catalogue." and search.read_only and search.idempotent
    assert search.definition().parameters == search.input_schema()


def test_a_schema_tool_refuses_arguments_with_the_problems_a_function_tool_gives():
    received: list[dict[str, Any]] = []
    search = _search_tool(received)

    @tool
    def like_search(query: str, limit: int = 10) -> list[str]:
        return []

    bad = {"limit": "many", "colour": "red"}
    with pytest.raises(ToolInputError) as by_schema:
        asyncio.run(search.invoke(bad))
    with pytest.raises(ToolInputError) as by_function:
        asyncio.run(like_search.invoke(bad))
    assert received == []  # refused before the handler ran
    for info in (by_schema, by_function):
        found = sorted((p.rule, p.field) for p in info.value.problems)
        assert found == [
            ("missing_parameter", "parameters.query"),
            ("unknown_parameter", "parameters.colour"),
            ("wrong_type", "parameters.limit"),
        ]
    assert "'search' refused its arguments" in str(by_schema.value) and "got 'many'" in str(by_schema.value)
    with pytest.raises(ToolInputError) as nested:
        asyncio.run(search.invoke({"query": "q", "filters": {"colour": 3}}))
    assert [(p.rule, p.field) for p in nested.value.problems] == [("wrong_type", "parameters.filters.colour")]


def test_a_schema_tool_is_strict_json_schema_not_coercion():
    search = _search_tool([])
    with pytest.raises(ToolInputError, match="limit"):
        asyncio.run(search.invoke({"query": "q", "limit": "5"}))  # a function tool would take "5" as 5


def test_a_schema_tools_schema_reaches_the_catalog_the_draft_schema_and_validation():
    registry = Registry()
    search = registry.add_tool(_search_tool([]), worker="shop")
    entry = next(w for w in registry.catalog() if w["name"] == "shop")
    assert entry["actions"] == [{"name": "search", "description": "Search the catalogue.", "parameters": search.input_schema()}]
    assert search.input_schema()["additionalProperties"] is False  # closed, as a function tool's is

    schema = json.dumps(draft_schema(registry))
    assert '"const": "search"' in schema and '"what to look for"' in schema

    def plan(parameters: dict[str, Any], *, depends: list[str] | None = None) -> Plan:
        steps = [{"id": "s0", "worker": "shop", "action": "search", "parameters": {"query": "a"}}]
        steps.append({"id": "s1", "worker": "shop", "action": "search", "parameters": parameters, "depends_on": depends or []})
        return Plan.model_validate({"plan_id": "p", "goal": "g", "steps": steps})

    problems = validate_plan(plan({"limit": "x", "extra": 1}), registry)
    assert sorted((p.rule, p.step_id, p.field) for p in problems) == [
        ("missing_parameter", "s1", "parameters.query"),
        ("unknown_parameter", "s1", "parameters.extra"),
        ("wrong_type", "s1", "parameters.limit"),
    ]
    assert validate_plan(plan({"query": "b", "limit": "${s0}"}, depends=["s0"]), registry) == []  # a reference is checked at run time

    fields = search.input_model.model_fields
    assert list(fields) == ["query", "limit", "filters"]
    assert [name for name, f in fields.items() if f.is_required()] == ["query"]


def test_a_schema_tool_runs_from_a_plan_through_its_worker():
    received: list[dict[str, Any]] = []
    registry = Registry()
    registry.add_tool(_search_tool(received), worker="shop")
    result = asyncio.run(registry.worker("shop").perform(_call(parameters={"query": "q", "limit": 1})))
    assert result.output == ["q-0"] and result.tools == ["search"]
    assert received == [{"query": "q", "limit": 1}]


def test_schema_tools_take_async_handlers_draft7_definitions_and_an_output_schema():
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"point": {"$ref": "#/definitions/Point"}},
        "required": ["point"],
        "definitions": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
    }

    async def move(point: dict[str, Any]) -> Any:
        return {"x": point["x"] + 1} if point["x"] >= 0 else {"x": "negative"}

    out = {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
    moved = Tool.from_schema("move", "Move a point.", schema, move, output_schema=out)
    assert moved.is_async and moved.output_schema() == out
    assert "$schema" not in moved.input_schema() and moved.input_schema()["properties"]["point"] == {"$ref": "#/$defs/Point"}
    assert asyncio.run(moved.invoke({"point": {"x": 1}})) == {"x": 2}
    with pytest.raises(ToolInputError) as info:
        asyncio.run(moved.invoke({"point": {"x": "one"}}))
    assert [p.field for p in info.value.problems] == ["parameters.point.x"]
    with pytest.raises(ToolOutputError, match="output schema rejects at x"):
        asyncio.run(moved.invoke({"point": {"x": -1}}))
    registry = Registry()
    registry.add_tool(moved)
    assert "tool__move__Point" in json.dumps(draft_schema(registry))  # its definitions nest like a pydantic model's


def test_a_schema_that_allows_extra_arguments_keeps_them_and_a_bad_schema_is_refused():
    open_schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True}
    echo = Tool.from_schema("echo_all", "Echo.", open_schema, lambda **kw: kw)
    assert asyncio.run(echo.invoke({"a": 1, "b": [2]})) == {"a": 1, "b": [2]}
    with pytest.raises(RegistryError, match="input_schema is not a valid JSON Schema"):
        Tool.from_schema("bad", "Bad.", {"type": "object", "properties": {"a": {"type": "integr"}}}, lambda **kw: kw)
    with pytest.raises(RegistryError, match="must describe an object"):
        Tool.from_schema("bad", "Bad.", {"type": "array"}, lambda **kw: kw)
    with pytest.raises(RegistryError, match="output_schema is not a valid JSON Schema"):
        Tool.from_schema("bad", "Bad.", {"type": "object"}, lambda **kw: kw, output_schema={"type": 5})


# --- 2. arguments as given -------------------------------------------------

UNSET = object()  # a default whose identity the function checks
SHARED: list[str] = []


class Options(TypedDict):
    colour: str
    size: NotRequired[int | None]


class Box(BaseModel):
    width: int
    label: str | None = None


def test_a_function_tool_receives_its_arguments_as_given_and_only_its_own_defaults():
    seen: dict[str, Any] = {}

    @tool
    def place(
        count: int,
        options: Options,
        extra: dict[str, Any],
        box: Box | None = None,
        marker: Any = UNSET,
        tags: list[str] = SHARED,  # its identity is the point of the test
        scale: Annotated[float, Field(ge=0)] = 1.0,
        note: str | None = None,
    ) -> str:
        seen.update(count=count, options=options, extra=extra, box=box, marker=marker, tags=tags, scale=scale, note=note)
        return "placed"

    given = {"count": "5", "options": {"colour": "red"}, "extra": {"k": None, "n": [1]}, "note": None}
    assert asyncio.run(place.invoke(given)) == "placed"
    assert seen["count"] == 5  # validated: coerced to the annotated type
    assert seen["options"] == {"colour": "red"}  # no "size": None invented for a key the caller left out
    assert seen["extra"] == {"k": None, "n": [1]}
    assert seen["note"] is None and seen["box"] is None and seen["scale"] == 1.0
    assert seen["marker"] is UNSET and seen["tags"] is SHARED  # the function's own default objects, not copies

    asyncio.run(place.invoke({**given, "box": {"width": 2}, "marker": "m", "tags": ["a"]}))
    assert seen["box"] == Box(width=2) and seen["box"].model_fields_set == {"width"}  # the model the annotation asks for
    assert seen["marker"] == "m" and seen["tags"] == ["a"]  # a value the caller gave is never replaced by a default
    assert place.keywords(place.check_arguments({"count": 1, "options": {"colour": "b"}, "extra": {}}))["marker"] is UNSET


def test_a_default_declared_with_pydantic_field_is_applied_as_pydantic_reads_it():
    @tool
    def pad(text: str, width: int = Field(default=4, ge=1)) -> str:
        return text.ljust(width, ".")

    assert asyncio.run(pad.invoke({"text": "a"})) == "a..."  # 4, not the FieldInfo object the signature holds
    with pytest.raises(ToolInputError, match="width"):
        asyncio.run(pad.invoke({"text": "a", "width": 0}))


# --- 3. a typed per-run context --------------------------------------------


@dataclass
class Shop:
    name: str
    stock: dict[str, int] = field(default_factory=dict)


@tool(read_only=True)
def in_stock(ctx: ToolContext[Shop], item: str) -> str:
    """How many of an item the shop of this run has."""
    return f"{ctx.deps.name}:{item}={ctx.deps.stock.get(item, 0)} (run {ctx.run_id}, step {ctx.step_id}, tool {ctx.tool})"


@tool
async def restock(ctx: ToolContext[Shop], item: str, count: int = 1) -> int:
    """Add items to this run's shop."""
    ctx.deps.stock[item] = ctx.deps.stock.get(item, 0) + count
    await asyncio.sleep(0)
    return ctx.deps.stock[item]


def test_the_context_parameter_is_injected_not_part_of_the_schema():
    assert in_stock.input_schema()["required"] == ["item"] and "ctx" not in in_stock.input_schema()["properties"]
    assert in_stock.context_param == "ctx" and in_stock.description.startswith("How many")
    with run_dependencies(Shop("north", {"lamp": 3})) as deps:
        assert current_dependencies() is deps
        out = asyncio.run(in_stock.invoke({"item": "lamp"}, _call("in_stock", run_id="r7", step_id="count")))
    assert out == "north:lamp=3 (run r7, step count, tool in_stock)"
    assert current_dependencies() is None


def test_outside_a_run_the_context_has_no_dependencies():
    @tool
    def who(ctx: ToolContext[Any]) -> str:
        return f"{ctx.deps!r} {ctx.run_id!r} {ctx.step_id!r} {ctx.attempt}"

    assert asyncio.run(who.invoke({})) == "None None None 1"


def test_one_registry_serves_concurrent_runs_with_their_own_dependencies():
    registry = Registry()
    registry.add_tool(in_stock, worker="shop")
    registry.add_tool(restock, worker="shop")
    shops = {"r1": Shop("north", {"lamp": 1}), "r2": Shop("south", {"lamp": 10})}

    async def one_run(run_id: str) -> tuple[int, str]:
        with run_dependencies(shops[run_id]):
            worker = registry.worker("shop")
            added = await worker.perform(_call("restock", run_id=run_id, parameters={"item": "lamp", "count": 2}))
            await asyncio.sleep(0.01)  # the other run sets its dependencies meanwhile
            counted = await worker.perform(_call("in_stock", run_id=run_id, step_id="s2", parameters={"item": "lamp"}))
            return added.output, counted.output

    async def both() -> list[tuple[int, str]]:
        return await asyncio.gather(one_run("r1"), one_run("r2"))

    assert asyncio.run(both()) == [
        (3, "north:lamp=3 (run r1, step s2, tool in_stock)"),
        (12, "south:lamp=12 (run r2, step s2, tool in_stock)"),
    ]
    assert shops["r1"].stock == {"lamp": 3} and shops["r2"].stock == {"lamp": 12}


def test_runs_of_one_engine_started_inside_run_dependencies_see_their_own():
    registry = Registry()
    registry.add_tool(in_stock)
    steps = [
        {"id": "a", "action": "in_stock", "parameters": {"item": "lamp"}},
        {"id": "b", "action": "in_stock", "parameters": {"item": "cup"}},
    ]
    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": steps})
    engine = Engine(registry=registry)

    async def one_run(shop: Shop, run_id: str) -> dict[str, Any]:
        with run_dependencies(shop):
            result = await engine.run(plan, run_id=run_id)
        return result.outputs()

    async def both() -> list[dict[str, Any]]:
        return await asyncio.gather(one_run(Shop("north", {"lamp": 1}), "r1"), one_run(Shop("south", {"cup": 2}), "r2"))

    north, south = asyncio.run(both())
    assert north == {"a": "north:lamp=1 (run r1, step a, tool in_stock)", "b": "north:cup=0 (run r1, step b, tool in_stock)"}
    assert south == {"a": "south:lamp=0 (run r2, step a, tool in_stock)", "b": "south:cup=2 (run r2, step b, tool in_stock)"}
    with run_dependencies(Shop("east", {"cup": 5})):
        assert engine.run_sync(plan, run_id="r3").outputs()["b"] == "east:cup=5 (run r3, step b, tool in_stock)"


def test_a_schema_tools_handler_may_take_the_context_too():
    def handler(ctx: ToolContext[Shop], **arguments: Any) -> int:
        return ctx.deps.stock.get(arguments["item"], 0)

    count = Tool.from_schema("count", "Count an item.", {"properties": {"item": {"type": "string"}}, "required": ["item"]}, handler)
    assert "ctx" not in count.input_schema()["properties"]
    with run_dependencies(Shop("east", {"cup": 4})):
        assert asyncio.run(count.invoke({"item": "cup"})) == 4


def test_a_role_workers_tool_calls_get_the_runs_dependencies():
    model = ScriptedModel([tool_call("in_stock", item="cup"), "done"])
    worker = RoleWorker("clerk", model=model, description="d", system_prompt="s", tools=[in_stock])
    with run_dependencies(Shop("west", {"cup": 2})):
        result = asyncio.run(worker.perform(_call("respond", run_id="r9", step_id="ask")))
    assert result.output == "done"
    assert model.requests[1].messages[-1].content == "west:cup=2 (run r9, step ask, tool in_stock)"


# --- 4. text results reach a model as text ---------------------------------

TEXT = 'line one\nline "two" — ünïcode'


@tool(read_only=True)
def read_note() -> str:
    """Read the note."""
    return TEXT


@tool(read_only=True)
def read_meta() -> dict[str, Any]:
    """Read the note's metadata."""
    return {"lines": 2, "title": "a\nb"}


def test_a_string_result_reaches_a_native_tool_calling_model_as_text():
    model = ScriptedModel([[tool_call("read_note"), tool_call("read_meta")], "done"])
    worker = RoleWorker("reader", model=model, description="d", system_prompt="s", tools=[read_note, read_meta])
    assert asyncio.run(worker.perform(_call("respond"))).output == "done"
    note, meta = model.requests[1].messages[-2:]
    assert note.role == "tool" and note.content == TEXT  # no quotes, no escaped newline
    assert meta.role == "tool" and json.loads(meta.content) == {"lines": 2, "title": "a\nb"}  # other values stay JSON


def test_a_string_result_reaches_a_json_mode_model_as_text():
    replies = ['{"tool": "read_note", "arguments": {}}', '{"tool": "read_meta", "arguments": {}}', '{"answer": "ok"}']
    model = ScriptedModel(replies)
    worker = RoleWorker("reader", model=model, description="d", system_prompt="s", tools=[read_note, read_meta], tool_calling="json")
    assert asyncio.run(worker.perform(_call("respond"))).output == "ok"
    assert model.requests[1].messages[-1].content == f"Result of tool read_note:\n{TEXT}"
    assert model.requests[2].messages[-1].content == 'Result of tool read_meta:\n{"lines": 2, "title": "a\\nb"}'


# --- 5. a tools module that registers nothing ------------------------------


def test_a_tools_module_of_plain_functions_is_an_error_that_says_how_to_declare_a_tool(tmp_path):
    plain = tmp_path / "plain_tools.py"
    plain.write_text(
        textwrap.dedent(
            """
            import os

            def count_lines(path: str) -> int:
                return len(open(path).read().splitlines())

            def word_count(text: str) -> int:
                return len(text.split())

            def _private():
                pass
            """
        )
    )
    registry = Registry()
    with pytest.raises(RegistryError) as info:
        registry.load_module(str(plain))
    message = str(info.value)
    assert repr(str(plain)) in message and "declares no tool" in message
    assert "count_lines, word_count are plain functions" in message and "_private" not in message and "os" not in message.split(".")[0]
    assert "@tool" in message and "from planexec import tool" in message and "register(registry)" in message
    assert registry.loaded == [] and list(registry.tools) == []


def test_a_register_hook_that_adds_nothing_is_an_error_and_a_module_loads_twice(tmp_path, monkeypatch):
    empty = tmp_path / "empty_hook.py"
    empty.write_text("def register(registry):\n    pass\n")
    with pytest.raises(RegistryError, match="declares no tool"):
        Registry().load_module(str(empty))
    (tmp_path / "good_tools.py").write_text("from planexec import tool\n\n@tool\ndef ping() -> str:\n    return 'pong'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry()
    registry.load_module("good_tools")
    registry.load_module("good_tools")  # its tools are registered already, yet it declares one: not "nothing"
    assert "ping" in registry.tools and registry.loaded == ["module good_tools", "module good_tools"]
    hooked = "from planexec import tool\n\nmade = {}\n\ndef register(registry):\n    registry.add_tool(made.setdefault('t', tool(lambda: 'pong', name='ping2')))\n"
    (tmp_path / "hooked_tools.py").write_text(hooked)
    registry.load_module("hooked_tools")
    registry.load_module("hooked_tools")  # the hook registers the same tool again: still a declaration
    assert "ping2" in registry.tools
    sys.modules.pop("good_tools", None)
    sys.modules.pop("hooked_tools", None)


def test_a_plain_worker_tool_still_works_with_a_step_call():
    worker = ToolWorker("shop", [read_note])
    assert asyncio.run(worker.perform(_call("read_note"))).output == TEXT


def test_tool_options_are_written_once_and_every_way_of_declaring_a_tool_takes_them_all():
    """`ToolOptions` is `Tool`'s keyword arguments; `tool(...)` and `Registry.tool(...)` pass any of them through
    (before, `Registry.tool` silently lacked resources, input_schema and output_schema)."""
    import inspect

    from planexec.workers.tools import ToolOptions

    keywords = {p.name for p in inspect.signature(Tool.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY}
    assert set(ToolOptions.__annotations__) == keywords

    registry = Registry()

    @registry.tool(resources={"num_cpus": 2}, output_schema={"type": "integer"}, read_only=True, sensitive=["x"])
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    registered = registry.tools["double"]
    assert registered.resources == {"num_cpus": 2} and registered.read_only and registered.sensitive == {"x"}
    assert registered.output_schema() == {"type": "integer"}

    def handler(args: dict) -> str:
        return args["q"]

    by_schema = registry.tool(handler, name="lookup", input_schema={"type": "object", "properties": {"q": {"type": "string"}}})
    assert registry.tools["lookup"] is by_schema and by_schema.input_schema()["properties"]["q"] == {"type": "string"}
    with pytest.raises(RegistryError, match="resources takes"):
        registry.tool(lambda: 1, name="bad", resources={"gpus": 1})
