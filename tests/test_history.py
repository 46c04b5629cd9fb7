"""The history commands: ``planexec runs``, ``show`` and ``logs`` over a run store written by `record_run`."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from planexec import Engine, Plan, Registry
from planexec.cli.main import main
from planexec.engine.recording import record_run
from planexec.store import SqliteRunStore, open_store


def _registry(delay: float = 0.0) -> Registry:
    reg = Registry()

    @reg.tool
    async def double(value: int = 1) -> int:
        """Twice the value."""
        await asyncio.sleep(delay)
        return value * 2

    @reg.tool
    def explode() -> None:
        """Always fail."""
        raise RuntimeError("kaboom")

    return reg


PLAN = {
    "plan_id": "doubling",
    "goal": "double twice",
    "steps": [
        {"id": "first", "action": "double", "worker": "tool", "parameters": {"value": 3}},
        {"id": "second", "action": "double", "worker": "tool", "parameters": {"value": "${first}"}, "instruction": "again"},
    ],
}


def record(path, plan_data=PLAN, run_id="run-1", delay=0.0):
    """Run a plan to the end, recorded into the SQLite store at `path`; its result."""

    async def go():
        store = SqliteRunStore(path)
        try:
            run = Engine(_registry(delay)).start(Plan.from_data(plan_data), run_id=run_id)
            record_run(run, store)
            return await run.result()
        finally:
            store.close()

    return asyncio.run(go())


@pytest.fixture
def db(tmp_path, monkeypatch):
    """A store with two runs (one succeeded, one aborted) in the project folder's default place."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PLANEXEC_STORE", raising=False)
    path = tmp_path / ".planexec" / "runs.db"
    record(path)
    failing = {"plan_id": "bad", "goal": "fail on purpose", "steps": [{"id": "boom", "action": "explode", "worker": "tool"}]}
    record(path, failing, run_id="run-2")
    with SqliteRunStore(path) as s:
        s.request_approval("run-1", "sha256:abc", step_id="second")
        s.decide_approval("run-1", step_id="second", approved=True, by="alice", reason="fine")
    return path


def test_runs_lists_status_goal_duration_and_cost(db, capsys):
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert "run-1" in out and "run-2" in out and "succeeded" in out and "aborted" in out
    assert "double twice" in out and "$0.0000" in out
    assert out.index("run-2") < out.index("run-1")  # newest first


def test_runs_as_json_filtered_and_limited(db, capsys):
    assert main(["runs", "--json", "--status", "aborted"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in rows] == ["run-2"] and rows[0]["status"] == "aborted" and rows[0]["goal"] == "fail on purpose"
    assert main(["runs", "--json", "--limit", "1"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1


def test_show_rebuilds_the_run_from_its_events(db, capsys):
    assert main(["show", "run-1"]) == 0
    out = capsys.readouterr().out
    for text in ("run run-1: double twice", "status succeeded", "v1 (2 steps) · the first plan", "first · succeeded · tool.double",
                 'inputs: {"value": "${first}"}', "instruction: again", "output: 12", "approval #1 of step second: approved by alice (fine)",
                 "answer: 12"):  # fmt: skip
        assert text in out, text


def test_show_of_a_large_run_lists_every_step_in_plain_columns_in_a_few_prints(tmp_path, monkeypatch, capsys):
    """Rich costs a call's worth for each print and ~1.6 ms for each row of its table: a 2,000-step run took 5.9 s."""
    from rich.console import Console

    steps = [{"id": "s000", "action": "double", "worker": "tool", "parameters": {"value": 1}}]
    steps += [
        {"id": f"s{i:03d}", "action": "double", "worker": "tool", "parameters": {"value": f"${{s{i - 1:03d}}}"}} for i in range(1, 250)
    ]
    steps.append({"id": "boom", "action": "explode", "worker": "tool", "depends_on": ["s249"], "failure_action": "skip"})
    path = tmp_path / "runs.db"
    record(path, {"plan_id": "long", "goal": "a long chain", "steps": steps}, run_id="long")
    prints = []
    real = Console.print
    monkeypatch.setattr(Console, "print", lambda self, *a, **k: (prints.append(1), real(self, *a, **k))[1])
    assert main(["show", "long", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert len(prints) <= 10, len(prints)  # was 1,500 or so: one a line
    lines = out.splitlines()
    head = lines.index("steps of long")
    assert lines[head + 1].split() == ["step", "state", "attempts", "worker", "wall", "tokens", "in/out", "cost", "error", "/", "reason"]
    rows = lines[head + 3 : head + 3 + 251]
    assert [r.split()[0] for r in rows] == [s["id"] for s in steps]  # every step, in order, none left out
    assert rows[0].split()[1:3] == ["succeeded", "1"] and rows[-1].split()[1] == "failed" and rows[-1].endswith("exception: kaboom")
    assert len({r.index("tool") for r in rows}) == 1  # one column, aligned
    assert "s249 · succeeded · tool.double" in out and "output: " + str(2**250) in out  # and each step's own lines, as before


def test_show_names_the_error_of_a_failed_step(db, capsys):
    assert main(["show", "run-2"]) == 0
    out = capsys.readouterr().out
    assert "status aborted" in out and "error: exception: kaboom" in out


def test_show_as_json(db, capsys):
    assert main(["show", "run-1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"]["status"] == "succeeded" and data["answer"] == 12
    assert data["steps"]["second"]["output"]["value"] == 12 and data["steps"]["second"]["state"] == "succeeded"
    assert data["versions"][0]["plan"]["plan_id"] == "doubling" and data["in_flight"] == []
    assert data["approvals"][0]["by"] == "alice" and data["events"] == 6


def test_logs_prints_every_event(db, capsys):
    assert main(["logs", "run-1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and "run run-1 started" in lines[0] and "finished: succeeded" in lines[-1]
    assert main(["logs", "run-1", "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["seq"] for e in events] == list(range(6)) and events[1]["type"] == "step_started"


@pytest.mark.parametrize("command", [["show", "nope"], ["logs", "nope"], ["logs", "nope", "--follow"]])
def test_an_unknown_run_id_is_named_and_exits_2(db, capsys, command):
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    assert main(command) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_without_a_store_nothing_is_created(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PLANEXEC_STORE", raising=False)
    assert main(["runs"]) == 0
    assert "no runs recorded here yet" in capsys.readouterr().out
    assert main(["show", "run-1"]) == 2
    assert "no run store at .planexec/runs.db" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "content", [b"not a database\n" * 20, b"SQLite format 3\x00" + b"\x10\x00\x01\x01\x00\x40\x20\x20" + b"\x00" * 76 + b"\xee" * 3000]
)
@pytest.mark.parametrize("command", [["runs"], ["show", "run-1"], ["logs", "run-1"]])
def test_a_corrupt_store_is_an_error_naming_the_file_and_is_left_alone(tmp_path, capsys, content, command):
    path = tmp_path / "runs.db"
    path.write_bytes(content)
    assert main([*command, "--store", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and ("not an SQLite database" in err or "damaged" in err)
    assert path.read_bytes() == content and [p.name for p in tmp_path.iterdir()] == ["runs.db"]


def test_a_foreign_sqlite_file_is_an_error(tmp_path, capsys):
    import sqlite3

    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (n)")
    conn.commit()
    conn.close()
    assert main(["runs", "--store", str(path)]) == 2
    assert "is not a planexec run store: it holds other tables (orders)" in capsys.readouterr().err


def test_an_unreachable_postgres_store_is_an_error_naming_the_host(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    assert main(["runs", "--store", f"postgresql://me:pw@127.0.0.1:{port}/db"]) == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "pw" not in err.replace("planexec", "")
    assert time.monotonic() - t0 < 5


def test_the_store_comes_from_the_environment_or_planexec_toml(tmp_path, monkeypatch, capsys):
    record(tmp_path / "elsewhere" / "runs.db", run_id="run-env")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "elsewhere" / "runs.db"))
    assert main(["runs", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == ["run-env"]
    monkeypatch.delenv("PLANEXEC_STORE")
    (tmp_path / "planexec.toml").write_text('[planexec]\nstore = "sqlite:///elsewhere/runs.db"\n')
    assert main(["show", "run-env", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["run_id"] == "run-env"


def test_the_history_reads_a_postgres_store(postgres_url, capsys):
    url = f"{postgres_url}?schema=history_{uuid.uuid4().hex[:12]}"
    with open_store(url) as s:
        from planexec.engine.events import RunStarted, utcnow

        s.append(
            [RunStarted(run_id="pg-1", seq=0, at=utcnow(), plan_id="p", plan_version=1, content_hash="h", goal="on postgres", step_ids=[])]
        )
    assert main(["runs", "--store", url]) == 0
    assert "on postgres" in capsys.readouterr().out
    assert main(["show", "pg-1", "--store", url]) == 0
    assert "status interrupted" in capsys.readouterr().out  # no process holds it


def test_logs_follow_from_another_process_while_the_run_goes_on(tmp_path):
    path = tmp_path / "runs.db"
    steps = [{"id": "gate", "action": "wait", "worker": "tool"}]
    steps += [
        {"id": f"s{i}", "action": "double", "worker": "tool", "parameters": {"value": i}, "depends_on": [f"s{i - 1}" if i else "gate"]}
        for i in range(4)
    ]
    plan_data = {"plan_id": "slow", "goal": "slowly", "steps": steps}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
    }

    async def go():
        opened = asyncio.Event()
        reg = _registry(delay=0.05)

        @reg.tool
        async def wait() -> str:
            """Hold the run until the follower has shown this step started."""
            await opened.wait()
            return "open"

        store = SqliteRunStore(path)
        try:
            run = Engine(reg).start(Plan.from_data(plan_data), run_id="live")
            record_run(run, store)
            await asyncio.sleep(0)  # RunStarted is stored before the follower starts
            follower = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "planexec", "logs", "live", "--follow", "--poll", "0.05", "--store", str(path),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            )  # fmt: skip
            seen = []
            while not any("gate: started" in line for line in seen):  # the follower sees the run while it is held
                line = await asyncio.wait_for(follower.stdout.readline(), timeout=60)
                assert line, (await follower.stderr.read()).decode()
                seen.append(line.decode())
            assert run.history[-1].type != "run_finished"
            opened.set()
            result = await run.result()
            out, err = await asyncio.wait_for(follower.communicate(), timeout=60)
            return result, follower.returncode, "".join(seen) + out.decode(), err.decode()
        finally:
            store.close()

    result, code, out, err = asyncio.run(go())
    assert result.ok and code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 + 2 * 5 and "finished: succeeded" in lines[-1]  # no step waited: no "ready" lines
    shown = [line.split("] ", 1)[1] for line in lines[3:5]]
    assert shown[0] == "s0: started (attempt 1, worker tool, action double)" and shown[1].startswith("s0: succeeded (attempt 1, ")


def test_show_step_of_an_interrupted_run_shows_its_step_cut_off_as_the_whole_run_does(tmp_path, capsys):
    """`show RUN --step S` on a run whose process died: the step it had running is interrupted (cut off), not running."""
    from planexec.engine.events import RunStarted, StepStarted, utcnow

    db = str(tmp_path / "runs.db")
    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "s", "action": "pay", "worker": "tool"}]})
    with SqliteRunStore(db) as store:
        store.save_plan("r1", plan)
        at = utcnow()
        store.append(
            [
                RunStarted(
                    run_id="r1", seq=0, at=at, plan_id="p", plan_version=1, content_hash=plan.content_hash, goal="g", step_ids=["s"]
                ),
                StepStarted(run_id="r1", seq=1, at=at, step_id="s", worker="tool", action="pay", attempt=1),
            ]
        )
    assert main(["show", "r1", "--store", db]) == 0
    whole = capsys.readouterr().out
    assert "s · interrupted · tool.pay" in whole
    assert main(["show", "r1", "--step", "s", "--store", db]) == 0
    one = capsys.readouterr().out
    assert "s · interrupted · tool.pay" in one and "when the run's process died" in one and "s · running" not in one
