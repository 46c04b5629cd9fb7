"""Models say what they can do (`models.profile`): the planner, its bounds, the plan format and the grants prompt read the
profile, never a model's class, name or ``base_url``; planexec.toml overrides it per model; providers are entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import EntryPoint

import pytest

from planexec import ModelProfile, Plan, Planner, Registry, Team
from planexec.config import Config
from planexec.errors import ConfigError
from planexec.models import CAPABLE, EMBEDDED, AnthropicModel, LocalModel, OpenAIModel, profile_of, providers
from planexec.models.managed import ManagedModel
from planexec.models.settings import ModelSettings
from planexec.team.assembly import bounds_for
from planexec.team.settings import PlanningOptions
from planexec.testing import ScriptedModel
from planexec.workers.roles import builtin_roles
from planexec.workers.toolkit import default_toolkit


def _registry(folder) -> Registry:
    """Tools and the built-in roles: a capable planner is taught to grant role steps their tools."""
    registry = Registry.default()
    for t in default_toolkit(folder):
        if t.name not in registry.tools:
            registry.add_tool(t)
    for role in builtin_roles(ScriptedModel([]), tools=registry.tools):
        registry.add_worker(role)
    return registry


# --- what each provider says -------------------------------------------------


def test_each_provider_says_what_its_model_can_do():
    hosted = OpenAIModel("gpt-4o-mini", api_key="sk-test")
    gateway = OpenAIModel("llama-3.3-70b", base_url="http://127.0.0.1:9/v1")
    claude = AnthropicModel("claude-sonnet-4-6", api_key="sk-test")
    local = LocalModel(n_ctx=8192)  # not loaded: the profile needs no weights
    for model in (hosted, gateway, claude):
        assert not model.profile.small and model.profile.tool_calling and model.profile.plan_format == "compact"
    assert hosted.profile.prompt_caching and claude.profile.prompt_caching
    assert not gateway.profile.prompt_caching  # nobody knows what a server of one's own caches
    assert local.profile.small and local.profile.grammar and not local.profile.tool_calling
    assert local.profile.plan_format == "json" and local.profile.context_window == 8192


def test_a_model_that_says_nothing_is_capable_and_writes_json():
    class Bare:
        name = "mine:model"

        async def complete(self, request):  # pragma: no cover - never called
            raise AssertionError

    assert profile_of(Bare()) is CAPABLE and CAPABLE.plan_format == "json" and not CAPABLE.small


def test_wrappers_keep_the_inner_models_profile_and_add_its_price():
    managed = ManagedModel(OpenAIModel("gpt-4o-mini", api_key="sk-test"))
    assert managed.profile.plan_format == "compact" and managed.profile.price is not None  # priced from the shipped table
    unpriced = ManagedModel(OpenAIModel("my-finetune", base_url="http://127.0.0.1:9/v1"))
    assert unpriced.profile.price is None  # unknown, not $0
    assert "capable, tool calls, structured output, compact plans" in managed.profile.describe()


# --- who reads it ------------------------------------------------------------


def test_a_capable_model_behind_a_base_url_gets_the_full_planning_prompt(tmp_path):
    """Before: any model with a base_url got the 135M model's prompt, no grants, no named answer."""
    registry = _registry(tmp_path)
    planner = Planner(OpenAIModel("llama-3.3-70b", base_url="http://127.0.0.1:9/v1"), registry)
    assert planner.write_grants and planner.name_answer and not planner.nearest_example_last and not planner.positional
    assert planner.compact  # its profile's form
    system = planner.messages("Summarise notes.txt")[0].content
    assert "grants=[" in system  # the capability contract is taught
    assert planner.request(planner.messages("g")).grammar is None  # it does not decode under a grammar


def test_a_small_profile_gets_the_short_prompt_whatever_its_provider(tmp_path):
    registry = _registry(tmp_path)
    small = OpenAIModel("smollm2", base_url="http://127.0.0.1:9/v1")
    small.profile = ModelProfile(size="small")
    planner = Planner(small, registry)
    assert not planner.write_grants and not planner.name_answer and planner.nearest_example_last
    assert not planner.compact and '"capabilities"' not in planner.messages("g")[0].content
    capable_json = Planner(OpenAIModel("smollm2", base_url="http://127.0.0.1:9/v1"), registry, plan_format="json")
    assert '"capabilities"' in capable_json.messages("g")[0].content  # what the small one is spared
    embedded = Planner(ScriptedModel([], profile=EMBEDDED), registry)
    assert embedded.positional and not embedded.write_grants and not embedded.compact


def test_bounds_and_the_default_plan_format_follow_the_profile():
    small = Team(ScriptedModel([], name="mine:tiny", profile=EMBEDDED), tools=[])
    capable = Team(ScriptedModel([], name="mine:big", profile=ModelProfile(compact_plans=True)), tools=[])
    named_local = Team(ScriptedModel([], name="local:not-really"), tools=[])  # a name is not a profile
    assert (small.planner.max_steps, small.bounds.agent_turns, small.plan_format) == (5, 4, "json")
    assert (capable.planner.max_steps, capable.bounds.agent_turns, capable.plan_format) == (8, 12, "compact")
    assert (named_local.planner.max_steps, named_local.plan_format) == (8, "json")
    told = Team(ScriptedModel([], profile=ModelProfile(compact_plans=True)), tools=[], planning=PlanningOptions(plan_format="json"))
    assert told.plan_format == "json" and told.planner.plan_format == "json"
    assert bounds_for(ScriptedModel([], profile=EMBEDDED)).max_tokens == 640


def test_a_role_worker_uses_json_replies_when_the_profile_has_no_tool_calling():
    from planexec.workers.worker import RoleWorker

    native = RoleWorker("w", model=ScriptedModel([]), description="d", system_prompt="p")
    json_mode = RoleWorker("w", model=ScriptedModel([], profile=EMBEDDED), description="d", system_prompt="p")
    assert not native.json_mode and json_mode.json_mode


# --- planexec.toml -----------------------------------------------------------


def test_planexec_toml_overrides_a_profile_by_name_or_prefix():
    config = Config(
        model_profiles={
            "openai:smollm2": {"size": "small", "compact_plans": False},
            "openai:llama*": {"context_window": 131072},
            "openai:llama-3.3*": {"prompt_caching": True},
        }
    )
    settings = ModelSettings(config, env={}, base_url="http://127.0.0.1:9/v1")
    small = settings.model("openai:smollm2")
    assert small.profile.small and small.profile.plan_format == "json" and small.profile.tool_calling  # the rest is the provider's
    assert small.profile_source == "model_profiles in planexec.toml over its provider's"
    llama = settings.model("openai:llama-3.3-70b")
    assert llama.profile.prompt_caching and llama.profile.context_window is None  # the longest prefix wins, alone
    assert settings.model("openai:llama-2").profile.context_window == 131072
    assert settings.model("openai:other").profile_source == "its provider's"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"size": "tiny"}, r"model_profiles\.'openai:x' in planexec\.toml: size: Input should be 'small' or 'capable'"),
        ({"tool_caling": False}, r"model_profiles\.'openai:x' in planexec\.toml: tool_caling: Extra inputs are not permitted"),
        ({"context_window": 0}, r"context_window: Input should be greater than 0"),
        ({"price": {"input": 1, "output": 2}}, r"a price is set in \[planexec\.prices\], not in a profile"),
    ],
)
def test_a_bad_profile_in_planexec_toml_is_an_error_naming_the_model_and_field(fields, message):
    with pytest.raises(ConfigError, match=message):
        ModelSettings(Config(model_profiles={"openai:x": fields}), env={})


def test_a_profile_in_a_real_planexec_toml_file_reaches_the_team(tmp_path, monkeypatch):
    from planexec.config import load_config

    (tmp_path / "planexec.toml").write_text('[planexec.model_profiles."fake:*"]\nsize = "small"\ncompact_plans = true\n')
    monkeypatch.setitem(providers._registered, "fake", lambda model, options: ScriptedModel([], name=f"fake:{model}"))
    team = Team("fake:m", tools=[], config=load_config(tmp_path / "planexec.toml"))
    assert team.bounds.max_steps == 5 and team.plan_format == "compact"
    assert any(line.startswith("planner profile: small, tool calls, structured output, compact plans") for line in team.models.notes)


# --- providers are entry points ------------------------------------------------


def test_the_built_in_providers_come_from_the_entry_point_group():
    from importlib.metadata import entry_points

    installed = {ep.name: ep.value for ep in entry_points(group=providers.ENTRY_POINT_GROUP)}
    assert installed == {
        "openai": "planexec.models.providers:openai_model",
        "anthropic": "planexec.models.providers:anthropic_model",
        "local": "planexec.models.providers:local_model",
    }
    assert {"openai", "anthropic", "local"} <= set(providers.provider_names())


def test_an_installed_provider_plugin_serves_its_names_and_a_broken_one_is_named(monkeypatch):
    plugins = {
        "good": EntryPoint("good", "planexec.testing:ScriptedModel", providers.ENTRY_POINT_GROUP),
        "broken": EntryPoint("broken", "no_such_module_here:factory", providers.ENTRY_POINT_GROUP),
        "notafactory": EntryPoint("notafactory", "planexec.models.providers:ENTRY_POINT_GROUP", providers.ENTRY_POINT_GROUP),
    }
    monkeypatch.setattr(providers, "_installed", {**providers._entry_points(), **plugins})
    monkeypatch.setattr(providers, "_registered", {})
    assert {"good", "broken", "openai"} <= set(providers.provider_names())
    with pytest.raises(ConfigError, match="model provider 'broken' is already registered"):
        providers.register_provider("broken", lambda m, o: ScriptedModel([]))
    with pytest.raises(
        ConfigError, match=r"model provider 'broken' \(no_such_module_here:factory\) could not be loaded: ModuleNotFoundError"
    ):
        providers.resolve_model("broken:x")
    with pytest.raises(ConfigError, match=r"'notafactory' .* is not a factory"):
        providers.resolve_model("notafactory:x")
    with pytest.raises(ConfigError, match=r"unknown provider 'nope' \(known: .*broken.*good"):
        providers.resolve_model("nope:x")


# --- the CLI against an OpenAI-compatible server -------------------------------


class _Gateway(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that records each request and answers with a one-step plan in the asked form."""

    requests: list[dict] = []

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if body.get("response_format"):  # a JSON draft was asked for
            text = json.dumps(
                {
                    "steps": [
                        {
                            "id": "s1",
                            "worker": "tool",
                            "action": "echo",
                            "instruction": "say hi",
                            "parameters": {"value": "hi"},
                            "depends_on": [],
                        }
                    ]
                }
            )
        else:
            text = '1. echo(value="hi") answer'
        reply = {
            "id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }  # fmt: skip
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def gateway():
    _Gateway.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", _Gateway.requests
    server.shutdown()
    server.server_close()


def _plan_cli(url: str, cwd, out) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PLANEXEC_ALLOW_MODEL_REQUESTS": "1", "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "planexec", "plan", "Say hi", "--model", "openai:llama-3.3-70b", "--base-url", url,
         "-o", str(out), "--workspace", str(cwd / "ws")],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
    )  # fmt: skip


def test_planexec_plan_against_a_gateway_uses_the_capable_prompt_unless_planexec_toml_says_small(gateway, tmp_path):
    url, seen = gateway
    proc = _plan_cli(url, tmp_path, tmp_path / "capable.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "planner profile: capable, tool calls, structured output, compact plans (its provider's)" in proc.stderr
    first = seen[0]
    system = first["messages"][0]["content"]
    assert "response_format" not in first  # the compact form: no schema sent
    assert "grants=[" in system and "answer" in system  # grants are taught, the answer line is named
    plan = Plan.from_json((tmp_path / "capable.json").read_text())
    assert [s.action for s in plan.steps] == ["echo"]

    seen.clear()
    (tmp_path / "planexec.toml").write_text('[planexec.model_profiles."openai:llama-3.3-70b"]\nsize = "small"\ncompact_plans = false\n')
    proc = _plan_cli(url, tmp_path, tmp_path / "small.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "planner profile: small, tool calls, structured output (model_profiles in planexec.toml over its provider's)" in proc.stderr
    system = seen[0]["messages"][0]["content"]
    assert seen[0]["response_format"] and "grants=[" not in system and '"capabilities"' not in system
    assert "answer_step" not in json.dumps(seen[0]["response_format"])  # no named answer for a small model


def test_planexec_run_against_a_gateway_plans_with_grants_and_needs_no_joiner(gateway, tmp_path):
    """`planexec run --model openai:... --base-url ...`: the hosted prompt, a compact plan whose answer line is named, so
    the run answers with one model call (no joiner's)."""
    url, seen = gateway
    env = {**os.environ, "PLANEXEC_ALLOW_MODEL_REQUESTS": "1", "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "planexec", "run", "Say hi", "--model", "openai:llama-3.3-70b", "--base-url", url,
         "--yes", "--json", "--no-store", "--workspace", str(tmp_path / "ws")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "succeeded" and result["answer"] == "hi"
    assert len(seen) == 1 and "grants=[" in seen[0]["messages"][0]["content"]  # the planner's one call, with the contract taught
