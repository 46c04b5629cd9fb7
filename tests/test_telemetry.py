"""OpenTelemetry traces: a run's span tree with the GenAI attributes, off by default, sub-teams, resume links, OTLP export.

Spans are captured with the SDK's in-memory exporter (a provider of the
test's own, handed to `telemetry.enable`), and exported over OTLP/HTTP to a
receiver the test runs on a free loopback port. Every test leaves telemetry
off for the next.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs pip install 'planexec[otel]'")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from planexec import Engine, Plan, Registry, RoleWorker, RunStatus, telemetry
from planexec.cli.main import main
from planexec.config import Config, TelemetryConfig, load_config
from planexec.engine.config import EngineConfig
from planexec.errors import ConfigError, ModelServerError
from planexec.models import observe
from planexec.models.base import Message, ModelRequest
from planexec.models.managed import ManagedModel
from planexec.models.providers import register_provider
from planexec.planning.planner import Planner
from planexec.store import open_store
from planexec.team.settings import ModelOptions, ReviewOptions, Toolbox
from planexec.team.subteam import SubTeam
from planexec.team.team import Team
from planexec.telemetry import names as n
from planexec.telemetry.settings import TelemetrySettings, resolve_settings
from planexec.testing import ScriptedModel, tool_call
from planexec.workers.tools import Tool

RUN = "invoke_workflow planexec"
CONTENT = {n.INPUT_MESSAGES, n.OUTPUT_MESSAGES, n.SYSTEM_INSTRUCTIONS, n.TOOL_ARGUMENTS, n.TOOL_RESULT, n.OUTPUT}
GOAL = "Add 17 and 25, then say what the weather is in Paris"
PLAN = json.dumps(
    {
        "steps": [
            {"id": "s1", "worker": "tool", "action": "add", "instruction": "add", "parameters": {"a": 17, "b": 25}, "depends_on": []},
            {
                "id": "s2",
                "worker": "clerk",
                "action": "respond",
                "instruction": "the weather in Paris",
                "parameters": {},
                "depends_on": ["s1"],
            },
        ]
    }
)
PRICES = {"script:*": {"input": 1.0, "output": 2.0}}  # dollars per million tokens


def add(a: int, b: int) -> int:
    return a + b


def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def off(monkeypatch):
    """Telemetry off before and after each test; no OTEL_* variable of the machine's leaks in."""
    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        monkeypatch.delenv(key)
    telemetry.disable()
    yield
    telemetry.disable()


def capture(*, capture_content: bool = False) -> InMemorySpanExporter:
    """Switch telemetry on with an in-memory exporter of the test's own."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.enable(provider=provider, capture_content=capture_content)
    return exporter


@pytest.fixture
def script(monkeypatch, tmp_path):
    """Models ``script:NAME`` (named, so each is a `ManagedModel`) answering from a queue per name."""
    answers: dict[str, list] = {}
    register_provider("script", lambda model, options: ScriptedModel(answers.setdefault(model, []), name=f"script:{model}"), replace=True)
    monkeypatch.chdir(tmp_path)
    for key in ("OPENAI_API_KEY", "PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL"):
        monkeypatch.delenv(key, raising=False)
    return answers


def weather_team(script, **options) -> Team:
    """A planner, a tool step and a role that calls a tool: every kind of span."""
    script["planner"] = [PLAN]
    script["worker"] = [tool_call("lookup", city="Paris"), "It is sunny in Paris."]
    team = Team(
        "script:planner", tools=[add], mode="plan", config=Config(prices=PRICES), **options, models=ModelOptions(worker="script:worker")
    )
    clerk = RoleWorker(
        "clerk", model=team.models.worker, description="answers", system_prompt="Be brief.", tools=[Tool(lookup, read_only=True)]
    )
    team.registry.add_worker(clerk)
    return team


class Tree:
    """Finished spans, by name and by parent."""

    def __init__(self, spans):
        self.spans = list(spans)
        self.by_id = {s.context.span_id: s for s in self.spans}

    def named(self, name: str) -> list:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str, **attrs):
        found = [s for s in self.named(name) if all(s.attributes.get(k) == v for k, v in attrs.items())]
        assert len(found) == 1, (name, attrs, [s.name for s in self.spans])
        return found[0]

    def parent(self, span):
        return self.by_id.get(span.parent.span_id) if span.parent is not None else None

    def children(self, span) -> list:
        return sorted(
            (s for s in self.spans if s.parent is not None and s.parent.span_id == span.context.span_id), key=lambda s: s.start_time
        )

    def chats(self) -> list:
        return [s for s in self.spans if s.attributes.get(n.OPERATION) == "chat"]


# --- the span tree ------------------------------------------------------------------------------


def test_a_planned_runs_trace_is_run_plan_steps_attempts_and_calls_with_the_genai_attributes(script):
    exporter = capture()
    result = weather_team(script).run_sync(GOAL)
    assert result.status is RunStatus.SUCCEEDED
    tree = Tree(exporter.get_finished_spans())
    print(telemetry.render_tree(tree.spans))

    run = tree.one(RUN)
    assert run.parent is None and {s.context.trace_id for s in tree.spans} == {run.context.trace_id}  # one trace
    assert run.attributes[n.OPERATION] == "invoke_workflow" and run.attributes[n.WORKFLOW] == "planexec"
    assert run.attributes[n.RUN_ID] == result.run_id and run.attributes[n.RUN_STATUS] == "succeeded"
    assert run.status.status_code is StatusCode.UNSET

    planner = tree.one("chat planner")  # the planner's call, made before the run existed, is the run's child
    assert tree.parent(planner) is run and planner.attributes[n.RUN_ID] == result.run_id
    version = tree.one("plan v1")
    assert tree.parent(version) is run and [c.name for c in tree.children(run)] == ["chat planner", "plan v1"]
    s1, s2 = tree.one("step s1"), tree.one("step s2")
    assert tree.parent(s1) is version and tree.parent(s2) is version
    assert s1.attributes[n.STEP_STATUS] == "succeeded" and s2.attributes[n.WORKER] == "clerk"
    (a1,) = tree.children(s1)
    (a2,) = tree.children(s2)
    assert a1.name == a2.name == "attempt 1" and a2.attributes[n.OPERATION] == "invoke_agent" and a2.attributes[n.AGENT_NAME] == "clerk"
    (tool_step,) = tree.children(a1)
    assert tool_step.name == "execute_tool add" and tool_step.attributes[n.TOOL_NAME] == "add"
    assert tool_step.attributes[n.OPERATION] == "execute_tool" and tool_step.attributes[n.STEP_ID] == "s1"
    first, call, second = tree.children(a2)
    assert [first.name, call.name, second.name] == ["chat worker", "execute_tool lookup", "chat worker"]
    assert first.end_time <= call.start_time <= call.end_time <= second.start_time  # the call ran between the two turns

    for chat in (first, second):
        a = chat.attributes
        assert a[n.OPERATION] == "chat" and a[n.PROVIDER] == "script" and a[n.REQUEST_MODEL] == "worker"
        assert a[n.RESPONSE_MODEL] == "script:worker" and a[n.RUN_ID] == result.run_id and a[n.STEP_ID] == "s2" and a[n.ATTEMPT] == 1
        assert a[n.INPUT_TOKENS] > 0 and a[n.OUTPUT_TOKENS] > 0 and a[n.CACHE_READ_TOKENS] == 0 and a[n.COST] > 0
    # the tokens and cost of the model calls' spans are the run's usage, exactly
    chats = tree.chats()
    assert len(chats) == result.usage.model_calls == 3
    assert sum(c.attributes[n.INPUT_TOKENS] for c in chats) == result.usage.input_tokens
    assert sum(c.attributes[n.OUTPUT_TOKENS] for c in chats) == result.usage.output_tokens
    assert sum(c.attributes[n.COST] for c in chats) == pytest.approx(result.usage.cost)
    assert run.attributes[n.USAGE + "input_tokens"] == result.usage.input_tokens
    # nothing a prompt or an output holds is in any span
    assert not [(s.name, k) for s in tree.spans for k in s.attributes if k in CONTENT]


def test_a_failing_steps_spans_carry_the_error_and_no_output(script):
    def explode(path: str) -> str:
        raise RuntimeError(f"disk on fire under {path}")

    script["planner"] = [
        json.dumps(
            {
                "steps": [
                    {
                        "id": "s1",
                        "worker": "tool",
                        "action": "explode",
                        "instruction": "x",
                        "parameters": {"path": "/data"},
                        "depends_on": [],
                    }
                ]
            }
        )
    ]
    exporter = capture()
    team = Team("script:planner", tools=[explode], mode="plan", engine=EngineConfig(max_replans=0))
    drafted = json.loads(team.plan_sync("explode").plan.to_json())
    drafted["steps"][0]["failure_action"] = {"kind": "retry", "max_attempts": 2, "backoff": 0}
    result = team.execute_sync(Plan.model_validate(drafted))
    assert result.status is not RunStatus.SUCCEEDED
    tree = Tree(exporter.get_finished_spans())
    step = tree.one("step s1")
    attempts = tree.children(step)
    assert [a.name for a in attempts] == ["attempt 1", "attempt 2"]
    for span in (*attempts, step):
        assert span.status.status_code is StatusCode.ERROR and "disk on fire under /data" in span.status.description
        assert span.attributes[n.ERROR_TYPE] == "RuntimeError"
    assert [e.name for e in step.events] == ["step_failed", "step_retried", "step_failed"]
    assert tree.one(RUN).status.status_code is StatusCode.ERROR
    assert not [(s.name, k) for s in tree.spans for k in s.attributes if k in CONTENT]


def test_capture_content_puts_prompts_outputs_and_arguments_in_the_spans(script):
    exporter = capture(capture_content=True)
    result = weather_team(script).run_sync(GOAL)
    tree = Tree(exporter.get_finished_spans())
    run = tree.one(RUN)
    assert GOAL in run.attributes[n.INPUT_MESSAGES] and "It is sunny in Paris." in run.attributes[n.OUTPUT_MESSAGES]
    planner = tree.one("chat planner")
    messages = json.loads(planner.attributes[n.INPUT_MESSAGES])
    assert messages[-1]["role"] == "user" and GOAL in messages[-1]["parts"][0]["content"]
    assert n.SYSTEM_INSTRUCTIONS in planner.attributes
    first, second = tree.named("chat worker")
    (reply,) = json.loads(first.attributes[n.OUTPUT_MESSAGES])
    assert reply["parts"][0] == {"type": "tool_call", "id": reply["parts"][0]["id"], "name": "lookup", "arguments": {"city": "Paris"}}
    assert "sunny in Paris" in second.attributes[n.INPUT_MESSAGES]  # the tool's result, as the model read it
    assert json.loads(tree.one("execute_tool lookup").attributes[n.TOOL_ARGUMENTS]) == {"city": "Paris"}
    assert tree.one("execute_tool add").attributes[n.TOOL_RESULT] == "42"
    assert tree.one("step s1").attributes[n.OUTPUT] == "42"
    assert result.answer is not None


def test_a_secret_never_reaches_a_span_even_with_content(script, monkeypatch):
    from planexec.secrets import register_secret

    register_secret("sk-test-abcdef0123456789", "TEST_KEY")
    exporter = capture(capture_content=True)
    team = weather_team(script)
    team.run_sync(GOAL + " with key sk-test-abcdef0123456789")
    text = json.dumps([dict(s.attributes) for s in exporter.get_finished_spans()])
    assert "sk-test-abcdef0123456789" not in text and "[redacted:TEST_KEY]" in text


def test_a_model_given_as_an_object_is_traced_by_the_team():
    exporter = capture()
    plan = json.dumps({"steps": [{"id": "s1", "worker": "tool", "action": "add", "instruction": "a", "parameters": {"a": 1, "b": 2}}]})
    model = ScriptedModel([plan], name="test:planner")
    result = Team(model, tools=[add], mode="plan").run_sync("add")
    assert result.answer == 3
    chat = Tree(exporter.get_finished_spans()).one("chat planner")
    assert chat.attributes[n.PROVIDER] == "test" and chat.attributes[n.INPUT_TOKENS] == result.usage.input_tokens
    assert len(model.requests) == 1  # the object itself answered: only wrapped


def test_a_model_calls_retries_and_failure_are_on_its_span():
    exporter = capture()

    async def no_wait(seconds):
        return None

    model = ManagedModel(
        ScriptedModel([ModelServerError("busy", model="x"), ModelServerError("busy", model="x"), ModelServerError("down", model="x")]),
        retries=2,
        sleep=no_wait,
    )
    with pytest.raises(ModelServerError):
        asyncio.run(model.complete(ModelRequest(messages=[Message(role="user", content="hi")])))
    (span,) = exporter.get_finished_spans()
    assert [e.name for e in span.events] == ["retry", "retry"] and span.status.status_code is StatusCode.ERROR
    assert span.attributes[n.ERROR_TYPE] == "ModelServerError" and span.parent is None  # outside any run: a root of its own


def test_a_streamed_run_and_a_single_agent_are_traced_too():
    plan = json.dumps({"steps": [{"id": "s1", "worker": "tool", "action": "add", "instruction": "a", "parameters": {"a": 1, "b": 2}}]})
    exporter = capture()
    streamed = Team(ScriptedModel([plan], name="test:planner"), tools=[add], mode="stream").run_sync("add")
    tree = Tree(exporter.get_finished_spans())
    run = tree.one(RUN)
    assert streamed.answer == 3 and tree.parent(tree.one("chat planner")) is run  # the plan is written inside the run
    assert tree.parent(tree.parent(tree.one("step s1"))) is run
    exporter.clear()
    agent = ScriptedModel([tool_call("add", a=2, b=5), "7"], name="test:agent")
    single = Team(agent, tools=[add], mode="single", review=ReviewOptions(auto_approve=True)).run_sync(
        "what is 2 plus 5?"
    )  # `add` is not read-only
    tree = Tree(exporter.get_finished_spans())
    assert single.answer == "7"
    (attempt,) = tree.children(tree.one("step agent"))
    assert [c.name for c in tree.children(attempt)] == ["chat agent", "execute_tool add", "chat agent"]
    assert sum(c.attributes[n.INPUT_TOKENS] for c in tree.chats()) == single.usage.input_tokens


def test_the_telemetry_package_lists_exactly_its_api():
    assert set(telemetry.__all__) == {
        "Telemetry", "TelemetrySettings", "TreeExporter", "active", "configure", "disable", "enable", "goal_scope",
        "render_tree", "resolve_settings", "run_scope", "start_run", "trace_run", "traced",
    }  # fmt: skip
    for name in telemetry.__all__:
        assert getattr(telemetry, name).__doc__, name


# --- off by default -------------------------------------------------------------------------------


def test_off_by_default_nothing_is_traced_and_opentelemetry_is_never_imported(tmp_path):
    code = """
import json, sys
from planexec import Team
from planexec.testing import ScriptedModel
from planexec import telemetry
from planexec.models import observe

def add(a: int, b: int) -> int:
    return a + b

plan = json.dumps({"steps": [{"id": "s1", "worker": "tool", "action": "add", "instruction": "a", "parameters": {"a": 1, "b": 2}}]})
result = Team(ScriptedModel([plan]), tools=[add], mode="plan").run_sync("add")
print(json.dumps({
    "answer": result.answer,
    "active": telemetry.active() is not None,
    "observer": observe.call_observer() is not None,
    "setup": result.model_dump(mode="json")["status"],
    "imported": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"answer": 3, "active": False, "observer": False, "setup": "succeeded", "imported": []}


def test_off_by_default_a_run_records_no_traceparent_and_watches_no_call():
    plan = json.dumps({"steps": [{"id": "s1", "worker": "tool", "action": "add", "instruction": "a", "parameters": {"a": 1, "b": 2}}]})
    team = Team(ScriptedModel([plan]), tools=[add], mode="plan")

    async def go():
        run = await team.start_goal("add")
        await run.result()
        return run

    run = asyncio.run(go())
    assert "traceparent" not in run.history[0].setup and observe.call_observer() is None
    assert team.models.planner.__class__ is ScriptedModel  # not wrapped


@pytest.mark.parametrize(
    ("config", "env", "expected"),
    [
        ({}, {}, None),
        ({}, {"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "otlp"),
        ({}, {"OTEL_TRACES_EXPORTER": "none"}, None),
        ({}, {"OTEL_TRACES_EXPORTER": "zipkin"}, None),  # not ours to follow
        ({"exporter": "otlp"}, {}, "otlp"),
        ({"exporter": "console"}, {"OTEL_SDK_DISABLED": "true"}, None),  # the standard off switch wins
        ({"enabled": False}, {"OTEL_TRACES_EXPORTER": "otlp"}, None),
        ({"enabled": True}, {}, "none"),  # the application's own tracer provider
        ({"exporter": "console"}, {"OTEL_TRACES_EXPORTER": "otlp"}, "console"),  # the file wins
    ],
)
def test_traces_are_on_only_when_configured(config, env, expected):
    settings = resolve_settings(TelemetryConfig(**config), env)
    assert (settings.exporter if settings is not None else None) == expected


def test_telemetry_settings_read_planexec_toml_and_name_what_is_wrong(tmp_path):
    (tmp_path / "planexec.toml").write_text(
        '[planexec.telemetry]\nexporter = "otlp"\nendpoint = "http://127.0.0.1:9/"\nheaders_env = "MY_OTLP_HEADERS"\ncapture_content = true\n'
    )
    config = load_config(tmp_path).telemetry
    settings = resolve_settings(config, {"MY_OTLP_HEADERS": "api-key=abc%20def012345,x-team=blue"})
    assert settings == TelemetrySettings(
        exporter="otlp",
        endpoint="http://127.0.0.1:9/v1/traces",
        capture_content=True,
        headers={"api-key": "abc def012345", "x-team": "blue"},
    )
    assert "abc def012345" not in repr(settings)
    with pytest.raises(ConfigError, match="MY_OTLP_HEADERS"):
        resolve_settings(config, {})
    (tmp_path / "planexec.toml").write_text('[planexec.telemetry]\nexporter = "jaeger"\n')
    with pytest.raises(ConfigError, match="telemetry"):
        load_config(tmp_path)


# --- sub-teams and resume ------------------------------------------------------------------------------


def test_a_sub_teams_run_nests_under_its_parent_step():
    exporter = capture()
    inner = Registry.default()
    researcher_model = telemetry.traced(ScriptedModel(["12.4 hours"], name="test:researcher"))
    inner.add_worker(RoleWorker("researcher", model=researcher_model, description="finds facts", system_prompt="s", tasks=["respond"]))
    sub_plan = json.dumps({"steps": [{"id": "a1", "worker": "researcher", "action": "respond", "instruction": "find the tide period"}]})
    sub_planner = Planner(telemetry.traced(ScriptedModel([sub_plan], name="test:sub-planner")), inner)
    reg = Registry.default()
    reg.add_worker(SubTeam("research_team", planner=sub_planner, description="researches"))
    top_plan = json.dumps({"steps": [{"id": "s1", "worker": "research_team", "action": "delegate", "instruction": "research tides"}]})
    result = Team(ScriptedModel([top_plan], name="test:manager"), mode="plan", toolbox=Toolbox(registry=reg)).run_sync("tides")
    assert result.status is RunStatus.SUCCEEDED
    tree = Tree(exporter.get_finished_spans())
    top = tree.one(RUN, **{n.RUN_ID: result.run_id})
    sub = tree.one(RUN, **{n.RUN_ID: f"{result.run_id}/s1"})
    (attempt,) = tree.children(tree.one("step s1"))
    assert tree.parent(sub) is attempt and tree.parent(tree.parent(tree.parent(attempt))) is top
    assert sub.attributes[n.DEPTH] == 1 and sub.attributes[n.PARENT_RUN] == result.run_id and sub.attributes[n.PARENT_STEP] == "s1"
    assert tree.parent(tree.one("chat sub-planner")) is attempt  # the sub-team plans inside the parent's step
    chat = tree.one("chat researcher")
    assert tree.parent(tree.parent(chat)).name == "step a1" and chat.attributes[n.RUN_ID] == f"{result.run_id}/s1"
    assert {s.context.trace_id for s in tree.spans} == {top.context.trace_id}


def test_a_resumed_run_links_to_the_trace_of_the_run_it_continues(tmp_path):
    exporter = capture()
    store = open_store(str(tmp_path / "runs.db"))
    reg = Registry.default()

    @reg.tool(idempotent=True)
    async def slow(name: str) -> str:
        """Takes a while; safe to run twice."""
        await asyncio.sleep(0.05)
        return name.upper()

    plan = Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "g",
            "steps": [
                {"id": "a", "action": "slow", "parameters": {"name": "a"}},
                {"id": "b", "action": "slow", "parameters": {"name": "b"}, "depends_on": ["a"]},
            ],
        }
    )

    async def first():
        run = telemetry.start_run(lambda: Engine(reg, store=store).start(plan, run_id="r1"))
        async for event in run.events():
            if event.type == "step_started" and event.step_id == "b":
                run.cancel("lid closed")
        return await run.result()

    async def again():
        run = telemetry.start_run(lambda: Engine(reg, store=store).resume("r1"))  # as planexec resume does
        return await run.result()

    try:
        assert asyncio.run(first()).status is RunStatus.CANCELLED
        assert asyncio.run(again()).status is RunStatus.SUCCEEDED
        recorded = store.events("r1", limit=1)[0].setup["traceparent"]
    finally:
        store.close()
    original, resumed = sorted(Tree(exporter.get_finished_spans()).named(RUN), key=lambda s: s.start_time)
    ctx = original.context
    assert recorded == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    assert resumed.attributes[n.RESUMED] is True and resumed.attributes[n.RESUMES] == recorded
    (link,) = resumed.links
    assert (link.context.trace_id, link.context.span_id) == (ctx.trace_id, ctx.span_id)
    assert resumed.context.trace_id != ctx.trace_id  # a new trace, linked to the old one
    assert original.attributes[n.RUN_STATUS] == "cancelled" and resumed.attributes[n.RUN_STATUS] == "succeeded"


# --- exporters -------------------------------------------------------------------------------------------


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector in miniature: POST /v1/traces, protobuf in, the requests kept."""

    received: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.received.append((self.path, dict(self.headers), request))
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def _value(any_value):
    return getattr(any_value, any_value.WhichOneof("value"))


def test_a_runs_trace_exports_over_otlp_http_with_the_genai_attributes(script, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    Receiver.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PLANEXEC_TEST_OTLP_HEADERS", "authorization=Bearer%20s3cret-token-42")
    try:
        config = TelemetryConfig(
            exporter="otlp", endpoint=f"http://127.0.0.1:{server.server_address[1]}", headers_env="PLANEXEC_TEST_OTLP_HEADERS"
        )
        on = telemetry.configure(config)
        assert on is not None and on.owned
        result = weather_team(script).run_sync(GOAL)
        telemetry.disable()  # flushes our provider: the batch is sent now
    finally:
        server.shutdown()
        server.server_close()
    assert Receiver.received, "nothing reached the collector"
    paths = {path for path, _, _ in Receiver.received}
    assert paths == {"/v1/traces"}
    assert {headers.get("authorization") for _, headers, _ in Receiver.received} == {"Bearer s3cret-token-42"}
    spans = []
    for _, _, request in Receiver.received:
        for resource_spans in request.resource_spans:
            service = {a.key: _value(a.value) for a in resource_spans.resource.attributes}["service.name"]
            assert service == "planexec"
            for scope_spans in resource_spans.scope_spans:
                spans += [(s.name, {a.key: _value(a.value) for a in s.attributes}) for s in scope_spans.spans]
    names = sorted(name for name, _ in spans)
    expected = [RUN, "chat planner", "plan v1", "step s1", "attempt 1", "execute_tool add"]
    expected += ["step s2", "attempt 1", "chat worker", "execute_tool lookup", "chat worker"]
    assert names == sorted(expected)
    chats = [attrs for name, attrs in spans if name.startswith("chat ")]
    for attrs in chats:
        assert attrs[n.OPERATION] == "chat" and attrs[n.PROVIDER] == "script" and attrs[n.RUN_ID] == result.run_id
        assert {n.REQUEST_MODEL, n.RESPONSE_MODEL, n.INPUT_TOKENS, n.OUTPUT_TOKENS, n.CACHE_READ_TOKENS, n.COST} <= attrs.keys()
    assert sum(a[n.INPUT_TOKENS] for a in chats) == result.usage.input_tokens
    assert sum(a[n.OUTPUT_TOKENS] for a in chats) == result.usage.output_tokens


def test_the_console_exporter_prints_the_runs_tree_on_stderr(script, capsys):
    telemetry.enable(TelemetrySettings(exporter="console"))
    weather_team(script).run_sync(GOAL)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[0].startswith(RUN) and "succeeded" in lines[0]
    assert any(line.startswith("├── chat planner") for line in lines)
    assert any("└── execute_tool add" in line for line in lines)
    assert any("execute_tool lookup" in line for line in lines)


def test_planexec_toml_switches_traces_on_for_a_command(tmp_path, monkeypatch, capsys):
    """``planexec run --plan`` with ``[planexec.telemetry] exporter = "console"``: the run's tree on stderr, the result on stdout."""
    monkeypatch.chdir(tmp_path)
    Path("planexec.toml").write_text('[planexec.telemetry]\nexporter = "console"\n')
    Path("teletools.py").write_text("from planexec import tool\n\n@tool\ndef add(a: int, b: int) -> int:\n    return a + b\n")
    plan = {"plan_id": "p", "goal": "add", "steps": [{"id": "s1", "action": "add", "parameters": {"a": 2, "b": 3}}]}
    Path("plan.json").write_text(json.dumps(plan))
    code = main(["run", "--plan", "plan.json", "--tools", "teletools", "--yes", "--json", "--no-store"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["answer"] == 5
    tree = err[err.index(RUN) :].splitlines()
    assert tree[0].startswith(RUN) and "succeeded" in tree[0] and "execute_tool add" in tree[-1]


def test_without_the_sdk_a_configured_command_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if opentelemetry-sdk were not installed
    with pytest.raises(ConfigError, match=r"planexec\[otel\]"):
        telemetry.configure(TelemetryConfig(exporter="console"))
    monkeypatch.chdir(tmp_path)
    Path("planexec.toml").write_text('[planexec.telemetry]\nexporter = "otlp"\n')
    Path("plan.json").write_text(json.dumps({"plan_id": "p", "goal": "g", "steps": [{"id": "s1", "action": "echo"}]}))
    assert main(["run", "--plan", "plan.json", "--yes", "--no-store"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'planexec[otel]'" in err and "Traceback" not in err and telemetry.active() is None


def test_a_cascade_is_one_step_span_with_an_attempt_per_model_and_its_move_as_an_event():
    exporter = capture()
    small = ScriptedModel([ModelServerError("down", model="test:small")], name="test:small")
    large = ScriptedModel(["done"], name="test:large")
    reg = Registry.default()
    reg.add_worker(RoleWorker("writer", model=small, description="writes", system_prompt="Write.", tasks=["write"]))
    draft = json.dumps({"steps": [{"id": "s1", "worker": "writer", "action": "write", "instruction": "write"}]})
    team = Team(
        ScriptedModel([draft], name="test:planner"),
        mode="plan",
        toolbox=Toolbox(registry=reg),
        models=ModelOptions(roles={"writer": [small, large]}),
    )
    result = team.run_sync("write")
    assert result.status is RunStatus.SUCCEEDED and result.answer == "done"
    tree = Tree(exporter.get_finished_spans())
    step = tree.one("step s1")
    first, second = tree.children(step)
    assert (first.name, first.attributes[n.REQUEST_MODEL]) == ("attempt 1", "test:small") and first.status.status_code is StatusCode.ERROR
    assert (second.name, second.attributes[n.REQUEST_MODEL]) == ("attempt 2", "test:large") and step.attributes[
        n.STEP_STATUS
    ] == "succeeded"
    moved = [e for e in step.events if e.name == "step_escalated"]
    assert [(e.attributes["planexec.from_model"], e.attributes["planexec.to_model"]) for e in moved] == [("test:small", "test:large")]
    assert [c.name for c in tree.chats()] == ["chat planner", "chat small", "chat large"]  # each model's call traced
