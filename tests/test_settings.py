"""Model names, configuration, retries and timeouts around any model, and prices."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from planexec.config import load_config
from planexec.errors import ConfigError, ModelAuthError, ModelRateLimitError, ModelServerError, ModelTimeoutError
from planexec.models import Message, ModelDelta, ModelRequest, ModelResponse
from planexec.models.managed import ManagedModel
from planexec.models.pricing import PriceTable
from planexec.models.providers import parse_model_name, register_provider, resolve_model
from planexec.models.settings import ModelSettings
from planexec.testing import FunctionModel, ScriptedModel
from planexec.usage import Usage

REQ = ModelRequest(messages=[Message(role="user", content="hi there")])


def test_nothing_configured_means_the_embedded_model_and_says_so():
    s = ModelSettings(env={})
    assert s.planner.name == "local:smollm2" and "nothing configured" in s.planner.reason
    assert s.worker.name == "local:smollm2" and s.worker.reason == "same as the planner"


def test_an_openai_key_in_the_environment_picks_openai_and_says_which_model():
    s = ModelSettings(env={"OPENAI_API_KEY": "sk-test"})
    assert s.planner.name == "openai:gpt-4o-mini"
    assert "OPENAI_API_KEY" in s.describe()[0] and "openai:gpt-4o-mini" in s.describe()[0]


def test_precedence_is_argument_then_environment_then_file(tmp_path: Path):
    (tmp_path / "planexec.toml").write_text(
        '[planexec]\nplanner_model = "openai:from-file"\nworker_model = "local:smollm2"\n'
        '[planexec.role_models]\ncoder = "anthropic:claude-x"\n'
        '[planexec.providers.openai]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "MY_KEY"\n'
    )
    config = load_config(tmp_path)
    s = ModelSettings(config, env={"MY_KEY": "k"})
    assert s.planner.name == "openai:from-file" and "planexec.toml" in s.planner.reason
    assert s.for_role("coder").name == "anthropic:claude-x"
    assert s.for_role("writer").name == "local:smollm2"
    opts = s.options("openai")
    assert opts.base_url == "http://127.0.0.1:9/v1" and opts.api_key == "k"
    s = ModelSettings(config, env={"PLANEXEC_PLANNER_MODEL": "openai:from-env", "PLANEXEC_MODEL_CODER": "openai:c"})
    assert s.planner.name == "openai:from-env" and s.for_role("coder").name == "openai:c"
    s = ModelSettings(config, env={"PLANEXEC_PLANNER_MODEL": "openai:from-env"}, planner="openai:from-flag")
    assert s.planner.name == "openai:from-flag" and "--model" in s.planner.reason


def test_a_bad_model_name_is_an_error_naming_it_and_the_providers():
    with pytest.raises(ConfigError, match=r"'gpt4'.*provider:model"):
        parse_model_name("gpt4")
    with pytest.raises(ConfigError, match=r"unknown provider 'mystery' \(known: .*anthropic, .*local, .*openai"):
        ModelSettings(env={}, planner="mystery:x")


def test_a_registered_provider_serves_its_names():
    register_provider("fake", lambda model, options: ScriptedModel([f"I am {model}"], name=f"fake:{model}"), replace=True)
    model = resolve_model("fake:one")
    response = asyncio.run(model.complete(REQ))
    assert response.text == "I am one" and model.name == "fake:one"


def test_rate_limits_and_server_errors_are_retried_with_backoff():
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    inner = ScriptedModel([ModelRateLimitError("slow down", model="x", retry_after=3.0), ModelServerError("500", model="x"), "ok"])
    model = ManagedModel(inner, retries=2, backoff=0.5, sleep=sleep, seed=1)
    assert asyncio.run(model.complete(REQ)).text == "ok"
    assert waits[0] == 3.0  # the provider's own retry-after wins
    assert 1.0 <= waits[1] <= 1.25  # 0.5 * 2, plus up to 25% jitter
    assert model.attempts == 3


def test_retries_are_bounded_and_other_errors_are_not_retried():
    async def sleep(s: float) -> None:
        return None

    model = ManagedModel(ScriptedModel([ModelServerError("a", model="x")] * 3 + ["never"]), retries=2, sleep=sleep)
    with pytest.raises(ModelServerError):
        asyncio.run(model.complete(REQ))
    assert model.attempts == 3
    model = ManagedModel(ScriptedModel([ModelAuthError("bad key", model="x"), "never"]), retries=5, sleep=sleep)
    with pytest.raises(ModelAuthError):
        asyncio.run(model.complete(REQ))
    assert model.attempts == 1


def test_a_call_past_its_timeout_is_a_model_timeout_error_naming_the_model():
    async def slow(request):
        await asyncio.sleep(5)
        return "late"

    model = ManagedModel(FunctionModel(slow, name="test:slow"), retries=0, timeout=0.05)
    with pytest.raises(ModelTimeoutError, match=r"test:slow.*0.05s"):
        asyncio.run(model.complete(REQ))


def test_a_stream_is_retried_only_before_its_first_delta():
    async def sleep(s: float) -> None:
        return None

    model = ManagedModel(ScriptedModel([ModelServerError("x", model="m"), "a b c"]), sleep=sleep)

    async def collect():
        return [item async for item in model.stream(REQ)]

    items = asyncio.run(collect())
    assert "".join(i.text for i in items if isinstance(i, ModelDelta)) == "a b c"
    assert isinstance(items[-1], ModelResponse) and items[-1].usage.model_calls == 1


def test_known_prices_give_a_cost_and_unknown_ones_are_unknown_not_zero():
    table = PriceTable.default({"openai:my-tune*": {"input": 1.0, "output": 2.0}})
    used = Usage(input_tokens=1_000_000, output_tokens=500_000, model_calls=1)
    assert table.apply("openai:gpt-4o-mini", used).cost == pytest.approx(0.15 + 0.30)
    assert table.apply("openai:gpt-4o-mini-2024-07-18", used).cost == pytest.approx(0.45)  # prefix match
    assert table.apply("openai:gpt-4o", used).cost == pytest.approx(2.5 + 5.0)  # the longest prefix wins
    assert table.apply("openai:my-tune-v2", used).cost == pytest.approx(2.0)
    assert table.apply("local:smollm2", used).cost == 0.0 and table.apply("local:smollm2", used).cost_known
    unknown = table.apply("openai:mystery", used)
    assert not unknown.cost_known and unknown.describe_cost() == "unknown"
    mixed = table.apply("openai:gpt-4o-mini", used) + unknown
    assert mixed.describe_cost().startswith(">= $0.4500") and "1 call unpriced" in mixed.describe_cost()


def test_a_managed_model_prices_every_response():
    model = ManagedModel(ScriptedModel(["one two three"], name="openai:gpt-4o-mini"))
    response = asyncio.run(model.complete(REQ))
    assert response.usage.cost == pytest.approx((response.usage.input_tokens * 0.15 + 3 * 0.60) / 1e6)
    model = ManagedModel(ScriptedModel(["x"], name="openai:unheard-of"))
    assert asyncio.run(model.complete(REQ)).usage.unpriced_calls == 1


def test_a_bad_model_setting_in_the_config_file_is_named(tmp_path: Path):
    (tmp_path / "planexec.toml").write_text("[planexec]\nmodel_retries = -1\n")
    with pytest.raises(ConfigError, match="model_retries"):
        load_config(tmp_path)


def test_an_attempt_cut_off_by_its_timeout_still_counts_the_calls_it_made(registry):
    from planexec import Engine, Plan, RoleWorker
    from planexec.testing import sleep_tool, tool_call

    model = ManagedModel(ScriptedModel([tool_call("nap", seconds=5), "never reached"], name="openai:gpt-4o-mini"))
    registry.add_worker(RoleWorker("napper", model=model, description="naps", system_prompt="nap", tools=[sleep_tool("nap")]))
    plan = Plan.from_data({"plan_id": "p", "goal": "g", "steps": [{"id": "a", "worker": "napper", "action": "respond", "timeout": 0.3}]})
    result = Engine(registry).run_sync(plan)
    rec = result.steps["a"]
    assert rec.error is not None and rec.error.rule == "timeout"
    assert rec.usage.model_calls == 1 and rec.usage.input_tokens > 0 and rec.usage.cost > 0
    assert result.usage.model_calls == 1
