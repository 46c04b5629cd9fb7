"""Tools from MCP servers: real servers from PyPI (mcp-server-time, mcp-server-git) and our own test server, started here.

Every server is a real process this file starts (stdio), or a real HTTP
server on a free loopback port (streamable HTTP); nothing reaches the
network. A plan that uses them is planned by a scripted model, validated,
reviewed and run, and recorded in a SQLite store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="MCP tools need the mcp SDK: pip install -e '.[mcp]' (CI installs it with the dev extra)")

from planexec import Engine, Plan, Registry, RunStatus, StepState, Team, validate_plan
from planexec.config import Config, McpConfig, McpServerConfig, load_config
from planexec.errors import ConfigError, RegistryError
from planexec.mcp import McpServers, McpTool, load, servers_in, tool_name
from planexec.mcp.testing import http_config, stdio_config
from planexec.policies import StoreApprover
from planexec.store import open_store
from planexec.team.settings import ReviewOptions, Toolbox
from planexec.testing import ScriptedModel

TIME = McpServerConfig(command="mcp-server-time", args=["--local-timezone", "UTC"])


def needs(command: str) -> None:
    if shutil.which(command) is None:
        pytest.skip(f"needs {command} on PATH: pip install {command} (CI installs it with the dev extra)")


@pytest.fixture
def opened():
    """Servers a test loads, each closed at its end (and checked closed)."""
    made: list[McpServers] = []

    def load_into(registry: Registry, servers) -> McpServers:
        made.append(load(registry, servers))
        return made[-1]

    yield load_into
    for servers in made:
        servers.close()
        assert servers.running() == []


def plan_answer(*steps: dict) -> str:
    """What a scripted planner answers: the draft of a plan with these steps."""
    return json.dumps({"steps": [{"worker": "tool", "instruction": s["action"], "depends_on": [], **s} for s in steps]})


def team(registry: Registry, answers: list[str], *, store=None, **review) -> Team:
    return Team(
        ScriptedModel(answers, name="script:planner"),
        mode="plan",
        store=store,
        toolbox=Toolbox(registry=registry),
        review=ReviewOptions(**review),
    )


def wait_until(predicate, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


# --- the catalogue ----------------------------------------------------------------------------------


def test_the_time_servers_tools_join_the_planners_catalogue_with_their_schemas_and_annotations(opened):
    needs("mcp-server-time")
    registry = Registry.default()
    servers = opened(registry, {"time": TIME})
    assert servers.running() == ["time"]  # started to list its tools, and kept for the calls
    catalogue = {a["name"]: a for w in registry.catalog() if w["name"] == "tool" for a in w["actions"]}
    action = catalogue["time__get_current_time"]
    assert action["parameters"]["properties"]["timezone"]["type"] == "string"
    assert action["parameters"]["required"] == ["timezone"]
    assert "time" in action["description"].lower()
    tool = registry.tools["time__get_current_time"]
    assert isinstance(tool, McpTool) and (tool.server, tool.mcp_name) == ("time", "get_current_time")
    # readOnlyHint and idempotentHint are set by the server; its output is untrusted whatever it says
    assert (tool.read_only, tool.idempotent, tool.requires_approval, tool.untrusted_output) == (True, True, False, True)
    assert servers_in(registry) == [servers]


def test_an_allow_list_takes_only_the_tools_it_names_and_names_one_the_server_lacks(opened):
    needs("mcp-server-time")
    registry = Registry()
    opened(registry, {"time": TIME.model_copy(update={"tools": ["convert_time"]})})
    assert sorted(registry.tools) == ["time__convert_time"]
    with pytest.raises(RegistryError, match=r"MCP server 'clock' has no tool 'get_time' \(it has: convert_time, get_current_time\)"):
        load(Registry(), {"clock": TIME.model_copy(update={"tools": ["get_time"]})})


def test_a_server_that_cannot_start_is_a_registry_error_naming_it():
    with pytest.raises(RegistryError, match=r"cannot start MCP server 'nope' \(with planexec-no-such-server --x\)"):
        load(Registry(), {"nope": McpServerConfig(command="planexec-no-such-server", args=["--x"])})
    crashes = McpServerConfig(command=sys.executable, args=["-c", "import sys; print('no such thing', file=sys.stderr); sys.exit(2)"])
    with pytest.raises(RegistryError, match=r"cannot start MCP server 'crash'.*its last words on stderr: no such thing"):
        load(Registry(), {"crash": crashes})


def test_the_annotations_of_our_test_server_map_onto_ours(opened):
    registry = Registry()
    opened(registry, {"t": stdio_config()})
    flags = {name: (t.read_only, t.idempotent, t.requires_approval) for name, t in registry.tools.items()}
    assert flags["t__echo"] == (True, True, False)  # readOnlyHint, idempotentHint
    assert flags["t__remove"] == (False, False, True)  # destructiveHint: its steps wait for approval
    assert flags["t__boom"] == (False, False, False)  # no hints: side-effecting, not gated by itself
    assert tool_name("git", "a.b c") == "git__a_b_c"


# --- planned, validated, run and recorded ---------------------------------------------------------


def test_a_scripted_planner_plans_get_current_time_and_the_run_is_recorded(opened, tmp_path):
    needs("mcp-server-time")
    registry = Registry.default()
    servers = opened(registry, {"time": TIME})
    store = open_store(str(tmp_path / "runs.db"))
    answers = [plan_answer({"id": "now", "action": "time__get_current_time", "parameters": {"timezone": "Europe/Paris"}})]
    result = team(registry, answers, store=store).run_sync("What time is it in Paris?", run_id="mcp-1")
    assert result.status is RunStatus.SUCCEEDED, result.steps
    output = result.steps["now"].output
    assert output.value["timezone"] == "Europe/Paris" and output.value["datetime"][:2] == "20"
    assert [s.untrusted for s in output.provenance.sources] == [True]  # an MCP result is data from outside
    events = store.events("mcp-1")
    succeeded = [e for e in events if e.type == "step_succeeded"]
    assert [e.output.value["timezone"] for e in succeeded] == ["Europe/Paris"]
    assert store.run("mcp-1").status == "succeeded"
    wait_until(lambda: servers.running() == [])  # closed with the run


def test_a_wrong_argument_is_refused_before_the_server_is_asked(opened):
    needs("mcp-server-time")
    registry = Registry.default()
    opened(registry, {"time": TIME})
    plan = Plan.model_validate(
        {"plan_id": "p", "goal": "g", "steps": [{"id": "now", "action": "time__get_current_time", "parameters": {"zone": "UTC"}}]}
    )
    problems = [p.field for p in validate_plan(plan, registry)]
    assert "parameters.timezone" in problems and "parameters.zone" in problems


def test_mcp_server_git_on_a_repository_made_here(opened, tmp_path):
    needs("mcp-server-git")
    repo = _repo(tmp_path / "repo")
    registry = Registry.default()
    opened(registry, {"git": McpServerConfig(command="mcp-server-git", args=["--repository", str(repo)], tools=["git_status", "git_log"])})
    assert sorted(registry.tools).count("git__git_status") == 1 and "git__git_reset" not in registry.tools
    answers = [
        plan_answer(
            {"id": "status", "action": "git__git_status", "parameters": {"repo_path": str(repo)}},
            {"id": "log", "action": "git__git_log", "parameters": {"repo_path": str(repo), "max_count": 5}},
        )
    ]
    result = team(registry, answers).run_sync("What is the state of the repository?")
    assert result.status is RunStatus.SUCCEEDED, result.steps
    assert "nothing to commit" in result.steps["status"].output.value
    assert "the first commit" in result.steps["log"].output.value


def test_a_destructive_tool_waits_for_approval_and_runs_once_a_person_approves(opened, tmp_path):
    """git_reset says destructiveHint: its step waits in the store; the change stays staged until a person approves."""
    needs("mcp-server-git")
    repo = _repo(tmp_path / "repo")
    (repo / "b.txt").write_text("new\n")
    _git(repo, "add", "b.txt")
    registry = Registry.default()
    servers = opened(registry, {"git": McpServerConfig(command="mcp-server-git", args=["--repository", str(repo)])})
    assert registry.tools["git__git_reset"].requires_approval and not registry.tools["git__git_status"].requires_approval
    store = open_store(str(tmp_path / "runs.db"))
    answers = [plan_answer({"id": "reset", "action": "git__git_reset", "parameters": {"repo_path": str(repo)}})]
    crew = team(registry, answers, store=store, approver=StoreApprover(store, poll=0.02))

    async def go():
        run = await crew.start_goal("Unstage everything", run_id="reset-1")
        while not [a for a in store.approvals(pending_only=True) if a.run_id == "reset-1"]:
            await asyncio.sleep(0.02)
        assert run.records["reset"].state is StepState.READY  # waiting, not run
        assert _git(repo, "diff", "--cached", "--name-only") == "b.txt"  # the server was never asked
        store.decide_approval("reset-1", step_id="reset", approved=True, by="ada")
        return await run.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.SUCCEEDED, result.steps
    assert _git(repo, "diff", "--cached", "--name-only") == ""
    wait_until(lambda: servers.running() == [])


def test_without_an_approver_a_destructive_tool_is_never_called(opened, tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    registry = Registry.default()
    opened(registry, {"t": stdio_config()})
    answers = [plan_answer({"id": "rm", "action": "t__remove", "parameters": {"path": str(victim)}})]
    result = team(registry, answers).run_sync("Remove the file")
    assert result.status is not RunStatus.SUCCEEDED
    assert result.steps["rm"].error.rule == "approval_required"
    assert victim.read_text() == "keep me"


# --- failures: each fails its step clearly, and the next step on the same server works --------------


def chain(*steps: tuple[str, str, dict, dict]) -> Plan:
    """Steps in order on one server, each run whatever the one before did (skip on failure, accept failed inputs)."""
    out = []
    for i, (step_id, action, parameters, extra) in enumerate(steps):
        step = {"id": step_id, "action": action, "parameters": parameters, "failure_action": "skip", "accepts_failed_inputs": True}
        if i:
            step["depends_on"] = [steps[i - 1][0]]
        out.append({**step, **extra})
    return Plan.model_validate({"plan_id": "failures", "goal": "fail in every way", "steps": out})


def test_a_tool_that_raises_dies_or_hangs_fails_its_step_and_the_next_call_gets_a_new_server(opened, tmp_path, capfd, caplog):
    registry = Registry.default()
    servers = opened(registry, {"t": stdio_config()})
    plan = chain(
        ("pid1", "t__pid", {}, {}),
        ("boom", "t__boom", {"message": "kaput"}, {}),
        ("pid2", "t__pid", {}, {}),
        ("die", "t__die", {"code": 3}, {}),
        ("pid3", "t__pid", {}, {}),
        ("hang", "t__hang", {"seconds": 600}, {"timeout": 1}),
        ("pid4", "t__pid", {}, {}),
    )
    store = open_store(str(tmp_path / "runs.db"))
    with caplog.at_level(logging.DEBUG, logger="planexec.mcp"):
        result = Engine(registry, store=store).run_sync(plan, run_id="fail-1")
    steps = result.steps
    pid = {k: steps[k].output.value["result"] for k in ("pid1", "pid2", "pid3", "pid4")}
    errors = {k: steps[k].error for k in ("boom", "die", "hang")}
    assert errors["boom"].message.startswith("MCP server 't': tool 'boom' failed: Error executing tool boom")
    assert pid["pid2"] == pid["pid1"]  # an error answer leaves the session as it was
    assert errors["die"].message == (
        "MCP server 't' exited (code 3) during 'die'; its last words on stderr: test server: dying with code 3; "
        "it starts again for the next call"
    )
    assert pid["pid3"] != pid["pid2"]  # started again
    assert errors["hang"].rule == "timeout" and "timed out after 1s" in errors["hang"].message
    assert pid["pid4"] != pid["pid3"]  # the hung server was stopped; a new one answers
    assert steps["hang"].wall_time < 5
    # the server's stderr went to the log, never to the terminal
    assert "dying with code 3" not in capfd.readouterr().err
    assert any("dying with code 3" in r.getMessage() for r in caplog.records)
    recorded = [e.error.message for e in store.events("fail-1") if e.type == "step_failed"]
    assert errors["die"].message in recorded
    servers.close()


def test_a_server_timeout_fails_the_call_and_restarts_the_server(opened):
    registry = Registry()
    opened(registry, {"t": stdio_config(timeout=0.5)})
    plan = chain(("pid1", "t__pid", {}, {}), ("hang", "t__hang", {"seconds": 600}, {}), ("pid2", "t__pid", {}, {}))
    result = Engine(registry).run_sync(plan)
    assert result.steps["hang"].error.message == (
        "MCP server 't' did not answer 'hang' within 0.5s; it was stopped and starts again for the next call"
    )
    assert result.steps["pid2"].output.value != result.steps["pid1"].output.value


def test_an_output_over_the_engines_limit_fails_its_step_naming_the_size(opened):
    registry = Registry()
    opened(registry, {"t": stdio_config()})
    plan = chain(("flood", "t__flood", {"megabytes": 50}, {}), ("echo", "t__echo", {"text": "still here"}, {}))
    result = Engine(registry).run_sync(plan)
    error = result.steps["flood"].error
    assert error.rule == "tool_output" and "MiB" in error.message, error
    assert result.steps["echo"].output.value == {"result": "still here"}
    small = Engine(registry, max_output_bytes=1024).run_sync(chain(("flood", "t__flood", {"megabytes": 0.01}, {})))
    assert small.steps["flood"].error.rule == "tool_output"


def test_a_server_that_exits_while_idle_is_started_again_for_the_next_call(opened):
    registry = Registry()
    servers = opened(registry, {"t": stdio_config()})

    async def go():
        first = await registry.tools["t__pid"].invoke({})
        conn = servers._connections["t"]
        conn.transport.process.kill()  # from outside, between two calls
        await asyncio.to_thread(wait_until, lambda: servers.running() == [])
        return first, await registry.tools["t__pid"].invoke({})

    first, second = asyncio.run(go())
    assert first != second


class FakeRun:
    """What `McpServers.hold` needs of a run: a way to subscribe to its events."""

    def __init__(self):
        self.callbacks = []

    def subscribe(self, callback):
        self.callbacks.append(callback)

    def finish(self):
        for callback in self.callbacks:
            callback(type("RunFinished", (), {"type": "run_finished"})())


def test_the_servers_close_when_the_last_run_holding_them_ends(opened):
    registry = Registry()
    servers = opened(registry, {"t": stdio_config()})
    first, second = FakeRun(), FakeRun()
    servers.hold(first)
    servers.hold(second)
    first.finish()
    first.finish()  # a second run_finished of the same run releases nothing more
    time.sleep(0.2)
    assert servers.running() == ["t"]  # the second run still uses it
    second.finish()
    wait_until(lambda: servers.running() == [])
    assert asyncio.run(registry.tools["t__echo"].invoke({"text": "again"})) == {"result": "again"}  # started again
    assert servers.running() == ["t"]


def test_the_public_names_of_planexec_mcp():
    import planexec.mcp

    assert sorted(planexec.mcp.__all__) == [
        "McpServerConfig", "McpServers", "McpTool", "hold_servers", "load", "servers_in", "tool_name", "tool_output",
    ]  # fmt: skip
    for name in planexec.mcp.__all__:
        assert getattr(planexec.mcp, name).__doc__, name


# --- transports and configuration ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(tmp_path):
    """Our test server over streamable HTTP on a free loopback port; its port."""
    port = _free_port()
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "planexec.mcp.testing", "--http", str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP test server did not listen"
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def test_streamable_http_to_our_server_on_loopback(http_server, opened):
    registry = Registry.default()
    servers = opened(registry, {"web": http_config(http_server, headers={"X-Test": "1"})})
    assert registry.tools["web__echo"].read_only
    answers = [plan_answer({"id": "hi", "action": "web__echo", "parameters": {"text": "over HTTP"}})]
    result = team(registry, answers).run_sync("Say it over HTTP")
    assert result.status is RunStatus.SUCCEEDED and result.steps["hi"].output.value == {"result": "over HTTP"}
    wait_until(lambda: servers.running() == [])  # closed with the team's run
    boom = Engine(registry).run_sync(chain(("boom", "web__boom", {}, {})))  # a new session
    assert boom.steps["boom"].error.message.startswith("MCP server 'web': tool 'boom' failed")
    assert servers.running() == ["web"]  # a run started on an engine directly does not hold them: close() does


def test_servers_from_planexec_toml(tmp_path, monkeypatch):
    needs("mcp-server-time")
    (tmp_path / "tools").mkdir()
    (tmp_path / "planexec.toml").write_text(
        "[planexec.mcp.servers.time]\n"
        'command = "mcp-server-time"\n'
        'args = ["--local-timezone", "UTC"]\n'
        'tools = ["get_current_time"]\n'
        "timeout = 20\n"
        "\n"
        "[planexec.mcp.servers.t]\n"
        f"command = {json.dumps(sys.executable)}\n"
        'args = ["-m", "planexec.mcp.testing"]\n'
        'cwd = "tools"\n'
        'env = {PLANEXEC_TEST = "1"}\n'
    )
    config = load_config(tmp_path)
    assert config.mcp.servers["time"].timeout == 20 and config.mcp.servers["t"].cwd == str(tmp_path / "tools")
    answers = [plan_answer({"id": "now", "action": "time__get_current_time", "parameters": {"timezone": "UTC"}})]
    crew = Team.from_config(tmp_path, model=ScriptedModel(answers, name="script:planner"), mode="plan")
    try:
        assert "time__get_current_time" in crew.registry.tools and "time__convert_time" not in crew.registry.tools
        assert "t__echo" in crew.registry.tools
        result = crew.run_sync("What time is it?")
        assert result.status is RunStatus.SUCCEEDED and result.steps["now"].output.value["timezone"] == "UTC"
    finally:
        for servers in servers_in(crew.registry):
            servers.close()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"command": "x", "url": "http://127.0.0.1:1/mcp"}, "exactly one of command"),
        ({}, "exactly one of command"),
        ({"url": "http://127.0.0.1:1/mcp", "env": {"A": "1"}}, "args, env and cwd are for a command"),
        ({"command": "x", "headers": {"A": "1"}}, "headers are for a url server"),
        ({"url": "ftp://x"}, "url must start with http"),
        ({"command": "x", "timeout": 0}, "greater than 0"),
        ({"command": "x", "tool": ["a"]}, "Extra inputs are not permitted"),
    ],
)
def test_a_wrong_server_section_is_a_config_error_naming_the_file(tmp_path, section, message):
    path = tmp_path / "planexec.toml"
    body = "".join(f"{k} = {json.dumps(v) if not isinstance(v, dict) else _inline(v)}\n" for k, v in section.items())
    path.write_text(f"[planexec.mcp.servers.s]\n{body}")
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(tmp_path)
    assert str(path) in str(caught.value)


def test_a_server_name_with_a_double_underscore_is_refused():
    with pytest.raises(ValueError, match="no '__'"):
        McpConfig(servers={"a__b": McpServerConfig(command="x")})
    assert Config(mcp={"servers": {"ok-1": {"command": "x"}}}).mcp.servers["ok-1"].command == "x"


# --- helpers ------------------------------------------------------------------------------------------


def _inline(table: dict) -> str:
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in table.items()) + "}"


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _repo(path: Path) -> Path:
    path.mkdir()
    _git(path, "init", "-q")
    _git(path, "config", "user.email", "test@example.invalid")
    _git(path, "config", "user.name", "Test")
    (path / "a.txt").write_text("hello\n")
    _git(path, "add", "a.txt")
    _git(path, "commit", "-q", "-m", "the first commit")
    return path
