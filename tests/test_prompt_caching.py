"""Prompt caching: cached tokens in `Usage`, priced at their rates, read from each provider, and prompts whose stable part comes first.

The providers are tested at the HTTP level, each SDK given a client of its
own HTTP library with a ``MockTransport`` (no network). The prompt tests
ask each caller (planner, replanner, router, joiner, role worker) for two
goals and check that everything before the goal is byte-identical.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re

import pytest
from rich.console import Console

from planexec import Registry
from planexec.cli.main import main
from planexec.cli.progress import print_summary, usage_table
from planexec.engine.join import JoinContext
from planexec.engine.replan import ReplanContext
from planexec.engine.results import ReplanRequest
from planexec.errors import ConfigError, ModelBadRequestError
from planexec.models import Message, ModelRequest, ModelResponse, ToolDefinition
from planexec.models.managed import ManagedModel
from planexec.models.pricing import Price, PriceTable
from planexec.plan.model import Plan
from planexec.planning.joiner import ModelJoiner
from planexec.planning.planner import Planner
from planexec.planning.replanner import PlannerReplanner
from planexec.planning.router import route_request
from planexec.store.location import open_store
from planexec.team.settings import PlanningOptions, Toolbox
from planexec.team.team import Team
from planexec.testing import FunctionModel, ScriptedModel
from planexec.usage import Usage
from planexec.workers.io import StepCall
from planexec.workers.toolkit import calculator
from planexec.workers.worker import RoleWorker

GOALS = ("What is 40 + 2?", "Find the population of Peru and halve it.")
SAID = json.dumps({"steps": [{"id": "s1", "worker": "tool", "action": "echo", "instruction": "say hi", "parameters": {"value": "hi"}}]})


# --- the Usage record ------------------------------------------------------------------------------------


def test_usage_json_keeps_its_field_order_and_old_records_load_with_no_cached_tokens():
    usage = Usage(input_tokens=2000, output_tokens=50, model_calls=1, cost=0.5, cached_input_tokens=1500, cache_write_tokens=300)
    assert list(json.loads(usage.model_dump_json())) == [
        "input_tokens", "output_tokens", "model_calls", "cost", "unpriced_calls", "cached_input_tokens", "cache_write_tokens",
    ]  # fmt: skip
    assert Usage.model_validate_json(usage.model_dump_json()) == usage
    old = Usage.model_validate_json('{"input_tokens": 10, "output_tokens": 2, "model_calls": 1, "cost": 0.25, "unpriced_calls": 0}')
    assert (old.cached_input_tokens, old.cache_write_tokens, old.uncached_input_tokens) == (0, 0, 10)


def test_cached_tokens_add_up_and_are_described_only_when_there_are_some():
    a = Usage(input_tokens=2000, output_tokens=10, model_calls=1, cached_input_tokens=1500)
    b = Usage(input_tokens=1200, output_tokens=5, model_calls=1, cache_write_tokens=1000)
    total = a + b + Usage()
    assert total == Usage(input_tokens=3200, output_tokens=15, model_calls=2, cached_input_tokens=1500, cache_write_tokens=1000)
    assert total.uncached_input_tokens == 700 and total.total_tokens == 3215
    assert total.describe_cache() == " (1500 cached, 1000 written to cache)"
    assert a.describe_cache() == " (1500 cached)" and Usage(input_tokens=5).describe_cache() == ""
    assert not Usage(cached_input_tokens=1).is_zero()


# --- prices ----------------------------------------------------------------------------------------------


def test_cached_and_written_tokens_are_priced_at_their_own_rates():
    price = Price(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)
    # 2000 uncached x $3 + 6000 read x $0.30 + 2000 written x $3.75 + 1000 out x $15, per million
    cost = price.of(10_000, 1_000, cached_input_tokens=6_000, cache_write_tokens=2_000)
    assert cost == pytest.approx(0.0303, abs=1e-12)
    assert price.of(10_000, 1_000) == pytest.approx(0.045, abs=1e-12)  # no cache: the old formula


def test_a_price_without_cache_rates_charges_cached_tokens_at_the_input_rate():
    price = Price(input=2.0, output=8.0)
    assert price.of(1_000, 0, cached_input_tokens=800, cache_write_tokens=100) == price.of(1_000, 0)
    table = PriceTable({"x:m": {"input": 2.0, "output": 8.0}})
    usage = table.apply("x:m", Usage(input_tokens=1_000, model_calls=1, cached_input_tokens=800))
    assert usage.cost == pytest.approx(0.002, abs=1e-12)


def test_the_shipped_prices_have_cache_rates():
    table = PriceTable.default()
    assert table.lookup("openai:gpt-4o-mini") == Price(input=0.15, output=0.60, cached_input=0.075)
    assert table.lookup("openai:gpt-4.1-mini-2025-04-14") == Price(input=0.40, output=1.60, cached_input=0.10)
    sonnet = table.lookup("anthropic:claude-sonnet-4-6")
    assert sonnet == Price(input=3.0, output=15.0, cached_input=0.30, cache_write=3.75)
    for key, price in table.prefixes:
        # reads 10% of input, 5-minute writes 125% (Claude 3 Haiku's published rates are rounded: $0.03 and $0.30)
        if key.startswith("anthropic:") and key != "anthropic:claude-3-haiku":
            assert price.cached_input == pytest.approx(price.input / 10) and price.cache_write == pytest.approx(price.input * 1.25), key


# --- OpenAI ----------------------------------------------------------------------------------------------


def _openai_http():
    openai = pytest.importorskip("openai", reason="needs the openai SDK")
    return importlib.import_module(openai.DefaultAsyncHttpxClient.__mro__[1].__module__.split(".")[0])


def _openai(handler, model="gpt-4o-mini"):
    from planexec.models.openai import OpenAIModel

    http = _openai_http()
    client = http.AsyncClient(transport=http.MockTransport(handler))
    return OpenAIModel(model, base_url="http://mock.invalid/v1", api_key="sk-test", http_client=client)


def _completion(usage: dict) -> dict:
    return {
        "id": "c1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": usage,
    }  # fmt: skip


def test_openai_cached_tokens_land_in_usage_and_are_priced_at_the_cached_rate(allow_requests):
    http = _openai_http()
    usage = {"prompt_tokens": 2000, "completion_tokens": 100, "total_tokens": 2100, "prompt_tokens_details": {"cached_tokens": 1536}}
    model = _openai(lambda r: http.Response(200, json=_completion(usage)))
    response = asyncio.run(
        ManagedModel(model, prices=PriceTable.default()).complete(ModelRequest(messages=[Message(role="user", content="Hi")]))
    )
    assert response.usage.model_copy(update={"cost": 0.0}) == Usage(
        input_tokens=2000, output_tokens=100, model_calls=1, cached_input_tokens=1536
    )
    # gpt-4o-mini: 464 x $0.15 + 1536 x $0.075 + 100 x $0.60, per million
    assert response.usage.cost == pytest.approx(0.0002448, abs=1e-12)


def test_openai_stream_usage_and_servers_without_details(allow_requests):
    http = _openai_http()
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]},
        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
         "usage": {"prompt_tokens": 1500, "completion_tokens": 1, "total_tokens": 1501,
                   "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 0}}},
    ]  # fmt: skip
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    model = _openai(lambda r: http.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode()))

    async def final():
        return [item async for item in model.stream(ModelRequest(messages=[Message(role="user", content="Hi")]))][-1]

    assert asyncio.run(final()).usage == Usage(input_tokens=1500, output_tokens=1, model_calls=1, cached_input_tokens=1024)
    # a server that sends no prompt_tokens_details (or null): nothing cached
    for details in ({}, {"prompt_tokens_details": None}):
        usage = {"prompt_tokens": 30, "completion_tokens": 2, "total_tokens": 32, **details}
        plain = _openai(lambda r, u=usage: http.Response(200, json=_completion(u)))
        got = asyncio.run(plain.complete(ModelRequest(messages=[Message(role="user", content="Hi")]))).usage
        assert got == Usage(input_tokens=30, output_tokens=2, model_calls=1)


# --- Anthropic -------------------------------------------------------------------------------------------


def _anthropic(handler, model="claude-sonnet-4-6", **kwargs):
    pytest.importorskip("anthropic", reason="needs the anthropic SDK")
    from anthropic import _base_client

    from planexec.models.anthropic import AnthropicModel

    http = getattr(_base_client, "httpx2", None) or _base_client.httpx
    client = http.AsyncClient(transport=http.MockTransport(handler))
    return AnthropicModel(model, api_key="sk-test", base_url="http://mock.invalid", http_client=client, **kwargs), http


def _message(usage: dict, content=None) -> dict:
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
        "content": content or [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None, "usage": usage,
    }  # fmt: skip


def _recording_anthropic(usage: dict, **kwargs):
    sent: list[dict] = []
    holder: dict = {}

    def handler(request):
        sent.append(json.loads(request.content))
        return holder["http"].Response(200, json=_message(usage))

    model, holder["http"] = _anthropic(handler, **kwargs)
    return model, sent


LONG = "Follow the rules below to the letter. " * 120  # 4,560 characters: ~1,140 tokens by the chars/4 estimate


def test_anthropic_cache_reads_and_writes_land_in_usage_and_are_priced_at_their_rates(allow_requests):
    usage = {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 0}
    model, _ = _recording_anthropic(usage)
    request = ModelRequest(messages=[Message(role="system", content=LONG), Message(role="user", content="Hi")])
    read = asyncio.run(ManagedModel(model, prices=PriceTable.default()).complete(request)).usage
    assert read.model_copy(update={"cost": 0.0}) == Usage(input_tokens=3050, output_tokens=20, model_calls=1, cached_input_tokens=3000)
    # claude-sonnet-4: 50 x $3 + 3000 x $0.30 + 20 x $15, per million
    assert read.cost == pytest.approx(0.00135, abs=1e-12)

    usage = {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 3000}
    model, _ = _recording_anthropic(usage)
    written = asyncio.run(ManagedModel(model, prices=PriceTable.default()).complete(request)).usage
    assert (written.input_tokens, written.cached_input_tokens, written.cache_write_tokens) == (3050, 0, 3000)
    # 50 x $3 + 3000 x $3.75 + 20 x $15, per million
    assert written.cost == pytest.approx(0.0117, abs=1e-12)


def test_anthropic_marks_a_long_system_prompt_for_caching_and_leaves_a_short_one_alone(allow_requests):
    model, sent = _recording_anthropic({"input_tokens": 5, "output_tokens": 1})
    for system in (LONG, "Be brief."):
        asyncio.run(model.complete(ModelRequest(messages=[Message(role="system", content=system), Message(role="user", content="Hi")])))
    long, short = sent
    assert long["system"] == [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    assert short["system"] == "Be brief." and "cache_control" not in json.dumps(short)
    assert model.cache_min_tokens == 1024


def test_anthropic_marks_the_last_of_the_callers_tools_and_not_the_answer_tool(allow_requests):
    model, sent = _recording_anthropic({"input_tokens": 5, "output_tokens": 1})
    tools = [ToolDefinition(name=f"tool{i}", description="Looks things up. " * 40) for i in range(8)]  # ~5,700 characters
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    messages = [Message(role="system", content="Be brief."), Message(role="user", content="Hi")]
    with pytest.raises(ModelBadRequestError, match="final_answer"):  # the reply is text, not the answer tool: the request matters here
        asyncio.run(model.complete(ModelRequest(messages=messages, tools=tools, output_schema=schema)))
    body = sent[0]
    marked = [t["name"] for t in body["tools"] if "cache_control" in t]
    assert marked == ["tool7"] and body["tools"][-1]["name"] == "final_answer"
    # the system block comes after the tools in the cached prefix: long enough with them, so it is marked too
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}


def test_anthropic_cache_threshold_is_a_setting(allow_requests, monkeypatch):
    model, sent = _recording_anthropic({"input_tokens": 5, "output_tokens": 1}, cache_min_tokens=0)
    asyncio.run(model.complete(ModelRequest(messages=[Message(role="system", content="Be brief."), Message(role="user", content="Hi")])))
    assert sent[0]["system"][0]["cache_control"] == {"type": "ephemeral"}
    monkeypatch.setenv("PLANEXEC_ANTHROPIC_CACHE_MIN_TOKENS", "100000")
    model, sent = _recording_anthropic({"input_tokens": 5, "output_tokens": 1})
    asyncio.run(model.complete(ModelRequest(messages=[Message(role="system", content=LONG), Message(role="user", content="Hi")])))
    assert model.cache_min_tokens == 100_000 and sent[0]["system"] == LONG
    monkeypatch.setenv("PLANEXEC_ANTHROPIC_CACHE_MIN_TOKENS", "lots")
    with pytest.raises(ConfigError, match="PLANEXEC_ANTHROPIC_CACHE_MIN_TOKENS"):
        _anthropic(lambda r: None)
    monkeypatch.delenv("PLANEXEC_ANTHROPIC_CACHE_MIN_TOKENS")
    assert _anthropic(lambda r: None, model="claude-3-5-haiku-latest")[0].cache_min_tokens == 2048


def test_anthropic_streamed_usage_counts_cache_reads(allow_requests):
    start = _message({"input_tokens": 40, "output_tokens": 1, "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 0}, [])
    start["stop_reason"] = None
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 3}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
    holder: dict = {}
    model, holder["http"] = _anthropic(lambda r: holder["http"].Response(200, headers={"content-type": "text/event-stream"}, content=body))

    async def final():
        return [item async for item in model.stream(ModelRequest(messages=[Message(role="user", content="Hi")]))][-1]

    assert asyncio.run(final()).usage == Usage(input_tokens=2040, output_tokens=3, model_calls=1, cached_input_tokens=2000)


# --- a run's totals --------------------------------------------------------------------------------------


def test_a_runs_total_usage_sums_the_cached_tokens_of_every_call_and_show_prints_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    plan = json.dumps(
        {"steps": [{"id": "s1", "worker": "writer", "action": "write", "instruction": "write it", "parameters": {}, "depends_on": []}]}
    )
    planned = ModelResponse(text=plan, usage=Usage(input_tokens=3000, output_tokens=40, model_calls=1, cached_input_tokens=2048))
    written = ModelResponse(text="Done.", usage=Usage(input_tokens=1500, output_tokens=2, model_calls=1, cache_write_tokens=1200))
    store = open_store(str(tmp_path / "runs.db"))
    team = Team(
        ScriptedModel([planned, written], name="test:cached"),
        mode="plan",
        store=store,
        toolbox=Toolbox(roles=["writer"]),
        planning=PlanningOptions(joiner=False),
    )
    result = team.run_sync("Write a note.")
    assert result.status.value == "succeeded", result.error
    assert (result.usage.input_tokens, result.usage.cached_input_tokens, result.usage.cache_write_tokens) == (4500, 2048, 1200)
    roles = result.usage_by_role()
    assert roles["planner"].cached_input_tokens == 2048 and sum(u.cache_write_tokens for u in roles.values()) == 1200
    stored = store.run(result.run_id).usage  # the store's running total, from each event's usage record
    assert (stored.cached_input_tokens, stored.cache_write_tokens) == (2048, 1200)
    console = Console(record=True, width=160)
    print_summary(console, result)
    console.print(usage_table(result))
    shown = console.export_text()
    assert "usage: 4500 tokens in (2048 cached, 1200 written to cache), 42 out" in shown
    assert re.search(r"planner\s+│\s+1\s+│\s+3000\s+│\s+2048\s+│", shown), shown
    store.close()
    assert main(["show", result.run_id, "--store", str(tmp_path / "runs.db")]) == 0
    assert "4500 tokens in (2048 cached, 1200 written to cache)" in capsys.readouterr().out


# --- prompts: the stable part first, the same for every goal -------------------------------------------------


def _prefix_and_last(messages: list[Message]) -> tuple[list[Message], Message]:
    return messages[:-1], messages[-1]


def _assert_stable(first: list[Message], second: list[Message], goals=GOALS) -> None:
    """Everything before the last message is identical; the goal is in the last one only."""
    (prefix1, last1), (prefix2, last2) = _prefix_and_last(first), _prefix_and_last(second)
    assert prefix1 == prefix2 and prefix1[0].role == "system"
    assert goals[0] in last1.content and goals[1] in last2.content
    assert not any(goal in m.content for goal in goals for m in prefix1)


def _search(query: str) -> str:
    """Search the web."""
    return "nothing"


def _example_registry() -> Registry:
    """Two of the shipped examples fit (search and calculator): they become turns, in an order a goal could change."""
    reg = Registry.default()
    reg.add_tool(calculator)
    reg.tool(read_only=True, name="search")(_search)
    return reg


@pytest.fixture
def calc_registry():
    return _example_registry()


def test_planner_prompt_is_the_same_before_the_goal_for_a_hosted_model(calc_registry):
    planner = Planner(ScriptedModel([]), calc_registry)
    assert planner.nearest_example_last is False
    first, second = (planner.messages(goal) for goal in GOALS)
    # rules and catalog, two examples in their file's order, the goal
    assert [m.role for m in first] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m.content for m in first[1:5:2]] == [
        "Goal: What is the population of France plus the population of Spain?",
        "Goal: What is 12 * 7 + 3?",
    ]
    _assert_stable(first, second)
    # and byte-identical across planners over registries with the same catalog
    assert Planner(ScriptedModel([]), _example_registry()).messages(GOALS[0]) == first


def test_planner_for_a_small_model_keeps_its_system_message_the_same(calc_registry, registry):
    planner = Planner(ScriptedModel([]), calc_registry, positional=True)
    assert planner.nearest_example_last is True  # a grammar-bound model copies the example nearest the goal
    first, second = (planner.messages(goal) for goal in GOALS)
    assert first[0] == second[0] and first[-1].content == f"Goal: {GOALS[0]}"
    assert first[1:-1] != second[1:-1]  # the trade: its example turns follow the goal, so only the system message is shared
    # no example fits: they are shown in the system prompt, the same for every goal
    plain = Planner(ScriptedModel([]), registry)
    _assert_stable(plain.messages(GOALS[0]), plain.messages(GOALS[1]))


def test_replanner_prompt_is_the_same_before_the_request(registry):
    replanner = PlannerReplanner(Planner(ScriptedModel([]), registry))
    first, second = (
        replanner.messages(
            ReplanContext(goal=goal, plan=Plan.from_json(_plan_json(goal)), done={}, failures={}, request=ReplanRequest(reason="r")), 2
        )
        for goal in GOALS
    )
    _assert_stable(first, second)


def _plan_json(goal: str) -> str:
    steps = [{"id": "s1", "worker": "tool", "action": "echo", "instruction": "say hi", "parameters": {"value": "hi"}}]
    return json.dumps({"plan_id": "p", "goal": goal, "steps": steps})


def test_router_prompt_is_the_same_before_the_goal():
    _assert_stable(route_request(GOALS[0]).messages, route_request(GOALS[1]).messages)


def test_joiner_prompt_is_the_same_before_the_goal():
    joiner = ModelJoiner(ScriptedModel([]))
    first, second = (
        joiner.request(JoinContext(goal=goal, plan=Plan.from_json(_plan_json(goal)), outputs={"s1": "hi"})).messages for goal in GOALS
    )
    _assert_stable(first, second)


def test_role_worker_prompt_is_the_same_before_the_task():
    model = FunctionModel(lambda request: "Done.")
    worker = RoleWorker("writer", model=model, description="Writes.", system_prompt="You write short notes.", tools=[calculator])
    for goal in GOALS:
        step = Plan.model_validate({"plan_id": "p", "goal": goal, "steps": [{"id": "s", "worker": "writer", "action": "respond"}]}).steps[0]
        asyncio.run(worker.perform(StepCall(run_id=f"run-{goal}", plan_id="p", goal=goal, step=step, worker="writer")))
    first, second = model.requests
    _assert_stable(first.messages, second.messages)
    assert first.tools == second.tools and first.tools  # the tool catalogue is sent the same way each time
