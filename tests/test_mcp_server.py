"""planexec as an MCP server (``planexec mcp``), driven by the mcp SDK's own client.

Every server is a real ``planexec mcp`` process this file starts in a
project folder (tools.py, planexec.toml, a SQLite store whose plan library
holds ``release``), spoken to over stdio, or over streamable HTTP on a free
loopback port; the server stores each plan as a waiting run in the store's
queue, and its own worker (a thread of the server's process) runs it once
approved. A person approves from yet another process (``planexec
approve``), or through the client's elicitation form; the model never can.
Plans of goals come from a scripted planner: ``serve.py`` registers a
``script`` provider, then runs the CLI.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="planexec mcp needs the mcp SDK: pip install -e '.[mcp]' (CI installs it with the dev extra)")

import anyio
import httpx2
import mcp_types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from planexec.cli.main import main
from planexec.store import ApprovalState, open_store

WAIT = 60.0

TOOLS = textwrap.dedent(
    '''
    """Tools for the MCP server tests: `ship` is a side effect, one line in $SHIP_LOG each time it runs."""
    import os

    from planexec import tool

    print("tools.py loaded")  # on stdout: planexec mcp keeps its stdio protocol clean of it


    @tool(idempotent=True)
    def build(name: str) -> str:
        """Build something."""
        return f"built {name}"


    @tool
    def ship(name: str) -> str:
        """Ship it: a side effect."""
        with open(os.environ["SHIP_LOG"], "a") as f:
            f.write(f"{name}\\n")
        return f"shipped {name}"
    '''
)

# the CLI with a scripted planner: each model answers from planner.json, in order
SERVE = textwrap.dedent(
    """
    import json
    import sys

    from planexec.cli.main import main
    from planexec.models.providers import register_provider
    from planexec.testing import ScriptedModel

    answers = json.loads(open("planner.json").read())
    register_provider("script", lambda model, options: ScriptedModel(list(answers), name=f"script:{model}"), replace=True)
    sys.exit(main(sys.argv[1:]))
    """
)

RELEASE = {
    "plan_id": "release",
    "goal": "ship {{name}}",
    "steps": [
        {"id": "compile", "action": "build", "parameters": {"name": "{{name}}"}},
        {"id": "ship", "action": "ship", "parameters": {"name": "{{name}}"}, "depends_on": ["compile"]},
    ],
}

PLANNED = {  # what the scripted planner writes for a goal
    "steps": [
        {
            "id": "docs",
            "worker": "tool",
            "action": "build",
            "instruction": "build the docs",
            "parameters": {"name": "docs"},
            "depends_on": [],
        },
        {
            "id": "site",
            "worker": "tool",
            "action": "ship",
            "instruction": "publish them",
            "parameters": {"name": "site"},
            "depends_on": ["docs"],
        },
    ]
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """tools.py, planexec.toml (tools, a policy), the store with the template `release`, serve.py with the planner's answers."""
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "serve.py").write_text(SERVE)
    (tmp_path / "planner.json").write_text(json.dumps([json.dumps(PLANNED)]))
    (tmp_path / "policies.yaml").write_text("max_steps: 5\n")
    (tmp_path / "planexec.toml").write_text('[planexec]\ntools = ["tools.py"]\npolicies = ["policies.yaml"]\n')
    store = open_store(str(tmp_path / "runs.db"))
    try:
        store.save_template("release", RELEASE, params=["name"], description="build, then ship")
    finally:
        store.close()
    monkeypatch.chdir(tmp_path)
    for name in ("PLANEXEC_STORE", "PLANEXEC_MCP_TOKEN", "PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def environment(project: Path) -> dict[str, str]:
    return {**os.environ, "SHIP_LOG": str(project / "ship.log"), "COLUMNS": "200"}


STRAY: list[Exception] = []  # what a client could not read on a server's stdout


async def stray(message) -> None:
    if isinstance(message, Exception):
        STRAY.append(message)


@contextlib.asynccontextmanager
async def connected(project: Path, *options: str, elicitation=None, scripted: bool = False):
    """A client session with a ``planexec mcp`` started over stdio in `project` (its stderr in server.log); `scripted`: its planner too."""
    program = [str(project / "serve.py")] if scripted else ["-m", "planexec"]
    planner = {"PLANEXEC_PLANNER_MODEL": "script:planner"} if scripted else {}
    params = StdioServerParameters(
        command=sys.executable,
        args=[*program, "mcp", "--store", str(project / "runs.db"), *options],
        cwd=str(project),
        env={**environment(project), **planner},
    )
    with (project / "server.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=elicitation, message_handler=stray) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments) -> dict:
    """The structured answer of a tool call that must succeed."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def refused(session: ClientSession, tool: str, **arguments) -> str:
    """The message of a tool call that must be refused."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return result.content[0].text


async def until(session: ClientSession, run_id: str, *states: str) -> dict:
    """show_run once the run is in one of `states`."""
    deadline = time.monotonic() + WAIT
    while True:
        shown = await call(session, "show_run", run_id=run_id)
        if shown["state"] in states:
            return shown
        assert time.monotonic() < deadline, f"run {run_id} stayed {shown['state']}: {shown['next']}"
        await anyio.sleep(0.1)


def approve(project: Path, run_id: str, *options: str) -> str:
    """``planexec approve RUN_ID`` from another process, as a person would."""
    done = subprocess.run(
        [sys.executable, "-m", "planexec", "approve", run_id, "--store", str(project / "runs.db"), "--by", "alice", *options],
        cwd=project,
        env=environment(project),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def approvals(project: Path, run_id: str):
    store = open_store(str(project / "runs.db"), create=False)
    try:
        return store.approvals(run_id)
    finally:
        store.close()


def shipped(project: Path) -> list[str]:
    log = project / "ship.log"
    return log.read_text().split() if log.exists() else []


# --- the tools ----------------------------------------------------------------------------------


def test_the_tools_have_typed_input_and_output_schemas_and_no_tool_takes_a_decision(project):
    async def scenario():
        async with connected(project) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            templates = (await session.list_resource_templates()).resource_templates
            listed = await call(session, "list_templates")
        return tools, templates, listed

    STRAY.clear()
    tools, templates, listed = anyio.run(scenario)
    assert STRAY == []  # tools.py prints when it loads: not onto the protocol's stdout
    assert set(tools) == {
        "plan_goal", "run_plan", "run_template", "show_run", "list_runs", "list_templates", "list_approvals", "decide_approval",
    }  # fmt: skip
    assert tools["plan_goal"].input_schema["required"] == ["goal"]
    assert tools["run_template"].input_schema["properties"]["parameters"]["anyOf"][0]["type"] == "object"
    assert all(t.output_schema and t.output_schema["type"] == "object" for t in tools.values())
    assert {"run_id", "content_hash", "plan", "review"} <= set(tools["plan_goal"].output_schema["properties"])
    decide = tools["decide_approval"].input_schema["properties"]
    assert set(decide) == {"run_id", "step_id"}  # what to decide, never the decision: the person gives that
    assert tools["show_run"].annotations.read_only_hint and not tools["run_plan"].annotations.read_only_hint
    assert [t.uri_template for t in templates] == ["planexec://runs/{run_id}"]
    assert listed["templates"] == [
        {"name": "release", "version": 1, "params": ["name"], "description": "build, then ship", "goal": "ship {{name}}", "steps": 2}
    ]


def test_a_template_run_waits_for_a_person_who_approves_from_another_process_then_it_finishes(project):
    async def scenario():
        async with connected(project) as session:
            started = await call(session, "run_template", name="release", parameters={"name": "web"})
            run_id = started["run_id"]
            waiting = await until(session, run_id, "waiting_for_approval")
            assert shipped(project) == []  # nothing ran before a person approved
            pending = (await call(session, "list_approvals"))["approvals"]
            said = approve(project, run_id)
            done = await until(session, run_id, "succeeded", "failed", "partial")
            resource = await session.read_resource(f"planexec://runs/{run_id}")
            listed = await call(session, "list_runs", limit=5)
        return started, waiting, pending, said, done, json.loads(resource.contents[0].text), listed

    started, waiting, pending, said, done, resource, listed = anyio.run(scenario)
    run_id = started["run_id"]
    assert started["planned"]["source"] == "template release v1" and started["planned"]["goal"] == "ship web"
    assert started["state"] == "waiting_for_approval" and started["pid"] is None  # no process of its own: the queue's
    assert [p["what"] for p in waiting["pending"]] == ["plan v1"] and f"planexec approve {run_id}" in waiting["next"]
    assert [(p["run_id"], p["kind"], p["content_hash"]) for p in pending] == [(run_id, "plan", started["planned"]["content_hash"])]
    assert f"approved plan v1 of run {run_id} (by alice)" in said
    assert done["state"] == "succeeded" and done["answer"] == "shipped web" and done["pending"] == []
    assert [(s["step_id"], s["state"], s["output"]) for s in done["steps"]] == [
        ("compile", "succeeded", "built web"),
        ("ship", "succeeded", "shipped web"),
    ]
    assert shipped(project) == ["web"]
    [decided] = approvals(project, run_id)
    assert (decided.state, decided.by) == (ApprovalState.APPROVED, "alice")
    assert resource["answer"] == "shipped web" and resource["state"] == "succeeded"
    assert listed["runs"][0]["run_id"] == run_id and listed["runs"][0]["state"] == "succeeded"


def test_a_goal_is_planned_and_stored_but_not_run_until_a_person_approves_it_then_the_servers_worker_runs_it(project):
    async def scenario():
        async with connected(project, scripted=True) as session:
            planned = await call(session, "plan_goal", goal="publish the docs", reuse=False)
            shown = await call(session, "show_run", run_id=planned["run_id"])
            listed = await call(session, "list_runs", state="waiting_for_approval")
            started = await call(session, "run_plan", run_id=planned["run_id"])  # handed on: it still waits for a person
            await anyio.sleep(1.0)
            assert shipped(project) == []
            approve(project, planned["run_id"])
            done = await until(session, planned["run_id"], "succeeded", "failed", "partial")
            again = await refused(session, "run_plan", run_id=planned["run_id"])
        return planned, shown, listed, started, done, again

    planned, shown, listed, started, done, again = anyio.run(scenario)
    run_id = planned["run_id"]
    assert planned["state"] == "waiting_for_approval" and planned["goal"] == "publish the docs"
    assert planned["source"] == "planned by script:planner"
    assert [s["id"] for s in planned["plan"]["steps"]] == ["docs", "site"] and planned["steps"] == 2
    assert planned["content_hash"] == planned["plan"]["content_hash"] and planned["content_hash"].startswith("sha256:")
    assert planned["review"]["decision"] == "approve" and [v["policy"] for v in planned["review"]["verdicts"]] == ["max_steps"]
    assert planned["usage"]["model_calls"] == 1 and planned["draft_problems"] == []
    assert shown["state"] == "waiting_for_approval" and [s["state"] for s in shown["steps"]] == ["pending", "pending"]
    assert [p["content_hash"] for p in shown["pending"]] == [planned["content_hash"]]
    assert [r["run_id"] for r in listed["runs"]] == [run_id]
    assert started["run_id"] == run_id and started["state"] == "waiting_for_approval" and len(started["pending"]) == 1
    assert done["state"] == "succeeded" and done["answer"] == "shipped site" and shipped(project) == ["site"]
    assert f"run {run_id!r} is succeeded" in again and "run_plan hands on only a run that waits" in again


def test_the_model_cannot_approve_a_client_that_cannot_ask_its_user_is_refused_and_nothing_runs(project):
    async def scenario():
        async with connected(project) as session:
            started = await call(session, "run_template", name="release", parameters={"name": "web"})
            run_id = started["run_id"]
            await until(session, run_id, "waiting_for_approval")
            message = await refused(session, "decide_approval", run_id=run_id)
            await anyio.sleep(0.5)
            still = await call(session, "show_run", run_id=run_id)
            approve(project, run_id, "--deny", "--reason", "not today")  # a person says no: the waiting run ends, nothing of it ran
            ended = await until(session, run_id, "cancelled")
        return run_id, message, still, ended

    run_id, message, still, ended = anyio.run(scenario)
    assert "this client cannot ask its user" in message and "the model may not decide" in message
    assert f"planexec approve {run_id}" in message and "Traceback" not in message
    assert still["state"] == "waiting_for_approval" and [p["what"] for p in still["pending"]] == ["plan v1"]
    assert "its plan was denied by alice: not today" in ended["reason"] and shipped(project) == []
    [decided] = approvals(project, run_id)
    assert (decided.state, decided.by, decided.reason) == (ApprovalState.DENIED, "alice", "not today")


def test_the_person_using_the_client_decides_through_its_elicitation_form_recorded_under_the_operators_name(project):
    asked: list[str] = []
    answers = iter([("decline", None), ("accept", {"decision": "approve", "reason": "looks right"})])

    async def person(context, params):
        asked.append(params.message)
        action, content = next(answers)
        return mcp_types.ElicitResult(action=action, content=content)

    async def scenario():
        async with connected(project, "--user", "carol", elicitation=person) as session:
            started = await call(session, "run_template", name="release", parameters={"name": "api"})
            run_id = started["run_id"]
            await until(session, run_id, "waiting_for_approval")
            declined = await call(session, "decide_approval", run_id=run_id)
            decided = await call(session, "decide_approval", run_id=run_id)
            done = await until(session, run_id, "succeeded", "failed")
        async with connected(project, "--no-decide", elicitation=person) as session:
            off = await refused(session, "decide_approval", run_id=run_id)
        return run_id, declined, decided, done, off

    run_id, declined, decided, done, off = anyio.run(scenario)
    assert declined["state"] == "undecided" and "the person chose decline" in declined["next"]
    assert decided["state"] == "approved" and decided["by"] == "carol" and decided["what"] == "plan v1"
    assert len(asked) == 2 and "the person using this client (not the model)" in asked[0] and f"plan v1 of run {run_id}" in asked[0]
    assert done["state"] == "succeeded" and shipped(project) == ["api"]
    [approval] = approvals(project, run_id)
    assert approval.by == "carol" and approval.reason == "decided in mcp (MCP elicitation): looks right"
    assert "--no-decide" in off


def test_bad_requests_are_tool_errors_that_say_what_is_wrong_without_a_traceback(project):
    async def scenario():
        async with connected(project) as session:
            return [
                await refused(session, "show_run", run_id="nope"),
                await refused(session, "run_plan", run_id="nope"),
                await refused(session, "run_template", name="nope"),
                await refused(session, "run_template", name="release"),
                await refused(session, "run_template", name="release", parameters={"name": "x", "colour": "blue"}),
                await refused(session, "run_template", name="release", version=7, parameters={"name": "x"}),
                await refused(session, "list_runs", state="sleeping"),
                await refused(session, "decide_approval", run_id="nope"),
                await refused(session, "plan_goal", goal="  "),
                await refused(session, "show_run"),
            ]

    messages = anyio.run(scenario)
    assert "no run 'nope'" in messages[0] and "list_runs" in messages[0]
    assert "no run 'nope'" in messages[1]
    assert "no template 'nope'" in messages[2] and "the plan library has: release" in messages[2]
    assert "missing name" in messages[3]
    assert "colour" in messages[4]
    assert "version 7" in messages[5] or "v7" in messages[5]
    assert "state must be one of" in messages[6] and "waiting_for_approval" in messages[6]
    assert "cannot ask its user" in messages[7]
    assert "the goal is empty" in messages[8]
    assert "run_id" in messages[9] and "Field required" in messages[9]
    assert all("Traceback" not in m for m in messages)
    assert "Traceback" not in (project / "server.log").read_text()
    assert shipped(project) == []


def test_a_plan_a_policy_rejects_is_stored_denied_and_never_started(project):
    (project / "policies.yaml").write_text('forbid: ["ship"]\n')

    async def scenario():
        async with connected(project) as session:
            started = await call(session, "run_template", name="release", parameters={"name": "web"})
            message = await refused(session, "run_plan", run_id=started["run_id"])
            pending = await call(session, "list_approvals")
        return started, message, pending

    started, message, pending = anyio.run(scenario)
    assert started["state"] == "rejected" and started["pid"] is None
    assert started["planned"]["review"]["decision"] == "reject" and "nothing will run: rejected by policy" in started["next"]
    assert "was denied by policy" in message and pending["approvals"] == []
    [decided] = approvals(project, started["run_id"])
    assert (decided.state, decided.by) == (ApprovalState.DENIED, "policy")


# --- streamable HTTP --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_streamable_http_on_a_free_loopback_port_answers_only_with_the_token(project):
    port, token = free_port(), "a-token-of-our-own-choosing"
    log = (project / "http.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "planexec", "mcp", "--http", "--port", str(port), "--store", str(project / "runs.db")],
        cwd=project,
        env={**environment(project), "PLANEXEC_MCP_TOKEN": token},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + WAIT
        while "planexec MCP server on" not in (project / "http.log").read_text():
            assert server.poll() is None and time.monotonic() < deadline, (project / "http.log").read_text()
            time.sleep(0.05)
        request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as no_token:
            urllib.request.urlopen(request, timeout=10)

        async def scenario():
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as client,
                streamable_http_client(url, http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                tools = [t.name for t in (await session.list_tools()).tools]
                return tools, await call(session, "list_templates"), await refused(session, "show_run", run_id="nope")

        tools, listed, message = anyio.run(scenario)
    finally:
        server.terminate()
        server.wait(timeout=WAIT)
        log.close()
    assert no_token.value.code == 401
    assert "run_template" in tools and [t["name"] for t in listed["templates"]] == ["release"]
    assert "no run 'nope'" in message
    said = (project / "http.log").read_text()
    assert f"http://127.0.0.1:{port}/mcp" in said and token not in said  # a token you chose is not printed


def test_http_beyond_loopback_needs_allow_remote_and_a_token_chosen_by_the_person(project, capsys):
    assert main(["mcp", "--http", "--host", "0.0.0.0"]) == 2
    assert "not a loopback address" in capsys.readouterr().err
    assert main(["mcp", "--http", "--host", "0.0.0.0", "--allow-remote"]) == 2
    assert "needs a token you chose" in capsys.readouterr().err
    assert main(["mcp", "--http", "--token", "short"]) == 2
    assert "at least 16 characters" in capsys.readouterr().err
    assert main(["mcp", "--http", "--port", "70000"]) == 2
    assert "--port must be between" in capsys.readouterr().err
