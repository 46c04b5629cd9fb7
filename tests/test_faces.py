"""One goal path under every face: the library, the CLI, the web console's start form and the MCP server's plan_goal
work the same goal through `Team.iter` (with a `Submission`) and store the same run: the same stages, plan and defaults.

The planner is scripted (the provider ``script`` of a ``sitecustomize`` every Python here loads); each face is a real
process of its own but the library's, over one SQLite store. No run is run: each waits for a person's approval.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from planexec import ReviewOptions, Submission, Team, Toolbox
from planexec.models import providers
from planexec.policies import load_policies
from planexec.store import open_store
from planexec.testing import ScriptedModel

WAIT = 60.0
GOAL = "two sums joined"
TOKEN = "a-console-token-for-the-faces-test"
PLAN = json.dumps(
    {
        "steps": [
            {"id": "s1", "worker": "tool", "action": "calculator", "instruction": "multiply", "parameters": {"expression": "17 * 23"}},
            {"id": "s2", "worker": "tool", "action": "calculator", "instruction": "add", "parameters": {"expression": "4 + 1"}},
            {"id": "s3", "worker": "tool", "action": "concat", "instruction": "join",
             "parameters": {"parts": ["${s1}", "${s2}"], "separator": " and "}, "depends_on": ["s1", "s2"]},
        ]
    }
)  # fmt: skip
SITE = textwrap.dedent(
    """
    import json
    import os

    from planexec.models.providers import register_provider
    from planexec.testing import ScriptedModel

    _answers = json.loads(os.environ["PLANEXEC_TEST_ANSWERS"])
    register_provider("script", lambda model, options: ScriptedModel(list(_answers), name=f"script:{model}"), replace=True)
    """
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """planexec.toml (the scripted planner, a policy), the scripted provider for every Python started here, one store."""
    (tmp_path / "planexec.toml").write_text('[planexec]\nplanner_model = "script:planner"\npolicies = ["policies.yaml"]\n')
    (tmp_path / "policies.yaml").write_text("max_steps: 5\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PLANEXEC_TEST_ANSWERS", json.dumps([PLAN]))
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "runs.db"))
    for name in ("PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(providers._registered, "script", lambda model, options: ScriptedModel([PLAN], name=f"script:{model}"))
    return tmp_path


def _library(project: Path) -> list[dict]:
    """The library's face: the team planexec.toml makes, as the faces make it, and its stages."""
    team = Team.from_config(
        project,
        store=str(project / "runs.db"),
        mode="plan",
        toolbox=Toolbox(roles=True, workspace="workspace"),
        review=ReviewOptions(policies=tuple(load_policies(["policies.yaml"]))),
    )

    async def stages() -> list[dict]:
        return [s.to_dict() async for s in team.iter(GOAL, run_id="lib", submit=Submission(by="ana"))]

    try:
        return asyncio.run(stages())
    finally:
        team.store.close()  # type: ignore[union-attr]


def _cli(project: Path) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "planexec", "submit", "--goal", GOAL, "--run-id", "cli", "--json"],
        cwd=project, env=dict(os.environ), capture_output=True, text=True, timeout=WAIT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _web(project: Path) -> str:
    """The console's start form, posted as a browser would; the run id it redirects to."""
    port = _free_port()
    log = (project / "serve.log").open("w")
    console = subprocess.Popen(
        [sys.executable, "-m", "planexec", "serve", "--port", str(port), "--token", TOKEN, "--no-worker"],
        cwd=project, env=dict(os.environ), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {TOKEN}"}

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert console.poll() is None, (project / "serve.log").read_text()
            try:
                page = opener.open(urllib.request.Request(base + "/start", headers=auth), timeout=10).read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline, "the console did not answer"
                time.sleep(0.1)
        csrf = page.split('name="csrf" value="')[1].split('"')[0]
        form = urllib.parse.urlencode({"csrf": csrf, "goal": GOAL, "mode": "plan"}).encode()
        headers = {**auth, "Content-Type": "application/x-www-form-urlencoded", "Origin": base}
        with pytest.raises(urllib.error.HTTPError) as redirect:
            opener.open(urllib.request.Request(base + "/start/goal", data=form, headers=headers), timeout=30)
        assert redirect.value.code == 303
        run_id = urllib.parse.unquote(redirect.value.headers["Location"].rsplit("/runs/", 1)[1])
        while not _pending(project, run_id):
            assert time.monotonic() < deadline, f"the console's run {run_id} never waited for approval"
            time.sleep(0.1)
        return run_id
    finally:
        console.terminate()
        console.wait(timeout=WAIT)
        log.close()


def _mcp(project: Path) -> tuple[str, dict]:
    """The MCP server's plan_goal over stdio; the run id and what it answered."""
    pytest.importorskip("mcp", reason="the MCP face needs the mcp SDK: pip install -e '.[mcp]' (CI installs it with the dev extra)")
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "planexec", "mcp", "--no-worker"], cwd=str(project), env=dict(os.environ)
    )

    async def scenario() -> dict:
        with (project / "mcp.log").open("a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("plan_goal", {"goal": GOAL, "reuse": False})
                assert not result.is_error, result.content[0].text
                answer: dict = result.structured_content
                handed = await session.call_tool("run_plan", {"run_id": answer["run_id"]})  # handed on: it still waits for a person
                assert not handed.is_error, handed.content[0].text
                answer["run_plan"] = handed.structured_content
                return answer

    answer = anyio.run(scenario)
    return answer["run_id"], answer


def _pending(project: Path, run_id: str) -> list:
    try:
        with open_store(str(project / "runs.db"), create=False) as store:
            return [a for a in store.approvals(run_id, pending_only=True) if a.step_id is None]
    except Exception:  # not stored yet
        return []


def _stored(project: Path, run_id: str) -> dict:
    """What a face left in the store: the run's state, its plan, its events, its setup, what waits for a person."""
    with open_store(str(project / "runs.db"), create=False) as store:
        summary = store.run(run_id)
        [version] = store.plan_versions(run_id)
        events = store.events(run_id)
        pending = [(a.step_id, a.content_hash) for a in store.approvals(run_id, pending_only=True)]
        queued = store.queued_run(run_id)  # type: ignore[attr-defined]
    return {
        "status": summary.status.value,
        "goal": summary.goal,
        "plan": version.plan.content_hash,
        "steps": version.plan.step_ids,
        "events": [e.type for e in events],
        "drafted_by": [e.model for e in events if e.type == "plan_drafted"],
        "setup": events[0].setup,
        "pending": pending,
        "queue": (queued.state.value, queued.approval, queued.approve_steps),
    }


def test_the_library_the_cli_the_web_console_and_the_mcp_server_work_a_goal_through_the_same_stages(project):
    library = _library(project)
    cli = _cli(project)
    web = _web(project)
    mcp, answer = _mcp(project)

    kinds = ["planned", "waiting_for_person", "queued"]
    assert [s["kind"] for s in library] == kinds and [s["kind"] for s in cli] == kinds  # the two faces that print stages
    assert library[1]["policies"] == cli[1]["policies"] == answer["review"]["decision"] == "approve"
    assert library[0]["plan"] == cli[0]["plan"] and library[0]["plan"]["content_hash"] == answer["content_hash"]
    assert library[2]["state"] == cli[2]["state"] == "waiting" and answer["state"] == "waiting_for_approval"
    assert answer["run_plan"]["state"] == "waiting_for_approval" and len(answer["run_plan"]["pending"]) == 1

    runs = {face: _stored(project, run_id) for face, run_id in {"library": "lib", "cli": "cli", "web": web, "mcp": mcp}.items()}
    first = runs["library"]
    assert first["status"] == "waiting" and first["goal"] == GOAL and first["steps"] == ["s1", "s2", "s3"]
    assert first["events"] == ["run_started", "plan_drafted", "run_finished"] and first["drafted_by"] == ["script:planner"]
    assert first["pending"] == [(None, first["plan"])] and first["queue"] == ("queued", "pending", False)
    for face, stored in runs.items():  # the same plan, the same defaults, the same state, whichever face
        assert stored == first, f"the {face} face stored {stored}, the library {first}"
