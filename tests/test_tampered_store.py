"""A changed store is never acted on: what was edited behind the store's back is refused, marked or reported.

Each case edits a real store as someone with the file (or the server) would:
SQLite with its triggers dropped for the edit and put back after it,
PostgreSQL with triggers off for the session. Then the real CLI (in a child
process: no traceback may reach the user) or the library call the faces use
must refuse it with a `TamperedError` that names what changed, mark it, or
report it: ``resume``, ``resolve``, ``run --template``, the fleet's worker,
an approval, ``runs``, ``show``, ``audit verify`` and ``store check``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from planexec import Engine, Plan, Registry
from planexec.errors import TamperedError
from planexec.fleet.worker import QueueWorker, submit_plan
from planexec.store import check_store, open_store, resolve_step, verify_run
from planexec.store.schema import SCHEMA_VERSION, SQLITE_APPLICATION_ID, migrate

TOOLS = textwrap.dedent(
    '''
    from planexec import tool


    @tool(idempotent=True)
    async def safe(name: str) -> str:
        """Safe to run twice."""
        return name.upper()


    @tool(idempotent=True)
    async def repeat(text: str) -> str:
        """What it was given."""
        return text


    @tool
    async def pay(payee: str, amount: int) -> str:
        """A payment: a side effect."""
        return f"paid {amount} to {payee}"
    '''
)

PLAN = {
    "plan_id": "p",
    "goal": "name it, then say it",
    "steps": [
        {"id": "a", "action": "safe", "parameters": {"name": "a"}},
        {"id": "b", "action": "repeat", "parameters": {"text": "${a}"}, "depends_on": ["a"]},
    ],
}
PAY = {
    "plan_id": "pay",
    "goal": "pay the supplier",
    "steps": [{"id": "pay", "action": "pay", "parameters": {"payee": "acme", "amount": 10}}],
}


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    url = request.getfixturevalue("postgres_url")
    return f"{url}?schema=t_{uuid.uuid4().hex[:12]}"


def edit(target: str, statement: str, params: tuple[object, ...] = ()) -> None:
    """Change the store's database behind its back: its triggers out of the way for this one edit."""
    if "://" not in target:
        conn = sqlite3.connect(target, isolation_level=None)
        triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
        for name, _ in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute(statement, params)
        for _, sql in triggers:  # put back: the file looks whole, only its content changed
            conn.execute(sql)
        conn.close()
        return
    import psycopg

    from planexec.store.postgres import split_schema

    dsn, schema = split_schema(target)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("SET session_replication_role = replica")  # no triggers for this session
        conn.execute(statement.replace("?", "%s"), params)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m planexec ARGS`` in a child process (it inherits PYTHONPATH): its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "planexec", *args], cwd=cwd, env=dict(os.environ),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def stopped_run(folder: Path, target: str) -> None:
    """Run r1 of `PLAN` in `target`, as a process that died while b ran: a succeeded, b cut off (it is idempotent)."""
    module = folder / "tools.py"
    module.write_text(TOOLS, encoding="utf-8")
    reg = Registry.default()
    reg.load_module(str(module))

    async def go():
        r = Engine(reg).start(Plan.from_data(PLAN), run_id="r1", setup={"tools": [str(module)]})
        return r, await r.result()

    r, _ = asyncio.run(go())
    cut = next(i for i, e in enumerate(r.history) if e.type == "step_started" and e.step_id == "b") + 1
    with open_store(target) as store:
        store.save_plan("r1", Plan.from_data(PLAN))
        store.append(r.history[:cut])


def evil_output(target: str) -> None:
    """Step a's stored output becomes EVIL (the event's text edited, its hash left as it was)."""
    with open_store(target) as store:
        seq = next(e.seq for e in store.events("r1") if e.type == "step_succeeded" and e.step_id == "a")
    edit(target, 'UPDATE events SET body = REPLACE(body, \'"value":"A"\', \'"value":"EVIL"\') WHERE run_id = ? AND seq = ?', ("r1", seq))
    with open_store(target) as store:
        assert next(e for e in store.events("r1") if e.seq == seq).output.value == "EVIL"


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr


# --- a run's records changed -----------------------------------------------------------------------


def test_resume_and_resolve_refuse_a_run_whose_finished_step_output_was_changed(tmp_path):
    db = str(tmp_path / "runs.db")
    stopped_run(tmp_path, db)
    evil_output(db)

    resumed = cli("resume", "r1", "--store", db, "--json", cwd=tmp_path)
    no_traceback(resumed)
    assert resumed.returncode == 2 and resumed.stdout == "" and "EVIL" not in resumed.stdout
    assert "run r1" in resumed.stderr and "was changed after it was written" in resumed.stderr
    assert "step_succeeded" in resumed.stderr and "changed: its content does not match its hash" in resumed.stderr
    assert f"planexec audit verify r1 --store {db}" in resumed.stderr
    resolved = cli("resolve", "r1", "b", "--skip", "--store", db, cwd=tmp_path)
    no_traceback(resolved)
    assert resolved.returncode == 2 and "was changed after it was written" in resolved.stderr

    with open_store(db) as store:  # nothing was written: no RunResumed, no decision
        assert [e.type for e in store.events("r1")][-1] == "step_started"
        assert store.lease("r1") is None
    verified = cli("audit", "verify", "r1", "--store", db, cwd=tmp_path)
    assert verified.returncode == 1 and "TAMPERED" in verified.stdout
    shown = cli("show", "r1", "--store", db, cwd=tmp_path)
    no_traceback(shown)
    assert shown.returncode == 0 and shown.stdout.startswith("WARNING: run r1 was changed in the store after it was recorded")


def test_the_library_calls_every_face_uses_refuse_a_changed_run(target, tmp_path):
    stopped_run(tmp_path, target)
    reg = Registry.default()
    reg.load_module(str(tmp_path / "tools.py"))
    with open_store(target) as store:  # intact: the checks pass
        assert verify_run(store, "r1").ok
        store.request_approval("r1", "sha256:next", step_id="b")
    evil_output(target)
    with open_store(target) as store:
        with pytest.raises(TamperedError) as caught:
            Engine(reg, store=store).resume("r1")
        assert caught.value.run_id == "r1" and caught.value.inspect.startswith("planexec audit verify r1")
        assert store.lease("r1") is None  # given back: another process may look at it
        with pytest.raises(TamperedError):
            resolve_step(store, "r1", "b", "skip")
        with pytest.raises(TamperedError):  # the web console's and planexec approve's call
            store.decide_approval("r1", step_id="b", approved=True, by="ada")
        denied = store.decide_approval("r1", step_id="b", approved=False, by="ada", reason="it changed")
        assert denied.state.value == "denied"  # a denial runs nothing: it is recorded all the same


def test_a_worker_refuses_a_queued_run_whose_plan_was_changed_and_runs_none_of_it(tmp_path):
    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    db = str(tmp_path / "runs.db")
    with open_store(db) as store:
        submit_plan(store, Plan.from_data(PAY), run_id="q1", setup={"tools": [str(tmp_path / "tools.py")]}, approved_by="tester")
    edit(db, "UPDATE plans SET plan = REPLACE(plan, 'acme', 'mallory') WHERE run_id = ?", ("q1",))
    with open_store(db) as store:
        report = asyncio.run(QueueWorker(store, once=True).serve())
        (done,) = report.runs
        assert done.outcome == "refused" and "TamperedError" in (done.reason or "") and "plan version 1" in (done.reason or "")
        assert not any(e.type == "step_started" for e in store.events("q1"))
        assert store.queued_run("q1").state.value == "refused"
        assert asyncio.run(QueueWorker(store, once=True, idle_exit=0).serve()).runs == []  # never taken again


# --- a template version changed ----------------------------------------------------------------------


def test_run_template_refuses_a_template_whose_payee_and_amount_were_changed(tmp_path):
    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    db = str(tmp_path / "runs.db")
    with open_store(db) as store:
        store.save_template("pay", Plan.from_data(PAY))
    run = ["run", "--template", "pay", "--tools", "tools.py", "--yes", "--json", "--store", db]
    good = cli(*run, cwd=tmp_path)
    assert good.returncode == 0 and json.loads(good.stdout)["steps"]["pay"]["output"]["value"] == "paid 10 to acme", good.stderr

    edit(db, "UPDATE templates SET plan = REPLACE(REPLACE(plan, 'acme', 'mallory'), '10', '9999') WHERE name = ?", ("pay",))
    refused = cli(*run, cwd=tmp_path)
    no_traceback(refused)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "template 'pay'" in refused.stderr and "version 1: changed: its content does not match its hash" in refused.stderr
    assert f"planexec store check --store {db}" in refused.stderr
    with open_store(db) as store:
        assert [r.goal for r in store.runs()] == ["pay the supplier"]  # only the run before the edit
    checked = cli("store", "check", "--store", db, cwd=tmp_path)
    no_traceback(checked)
    assert checked.returncode == 1 and "template 'pay' version 1: changed" in checked.stdout


def test_a_changed_or_unhashed_template_version_is_refused_and_reported(target):
    with open_store(target) as store:
        store.save_template("pay", Plan.from_data(PAY))
        store.save_template("pay", Plan.from_data(PAY), description="again")
        assert store.template("pay").version == 2 and len(store.templates()) == 2
    edit(target, "UPDATE templates SET hash = NULL WHERE name = ? AND version = 2", ("pay",))  # the hash removed, not the content
    with open_store(target) as store:
        with pytest.raises(TamperedError) as caught:
            store.template("pay")
        assert caught.value.template == "pay" and "it has no hash: it was removed" in str(caught.value)
        assert store.template("pay", 1).version == 1  # the intact version is still there to use
        with pytest.raises(TamperedError):
            store.templates()
    report = check_store(target)
    assert not report.ok and report.tampered and report.templates == 2
    (changed,) = [p.detail for p in report.problems]
    assert changed.startswith("template 'pay' version 2: it was saved at")


def test_a_template_saved_before_versions_were_hashed_is_read_as_it_is(tmp_path):
    """A store of schema 6 with a template: migrated, the version has no hash and is used; the store says when each log began."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA application_id = {SQLITE_APPLICATION_ID}")
    assert migrate(conn.cursor(), "sqlite", 0, "2026-01-01T00:00:00.000000Z", target=6) == [1, 2, 3, 4, 5, 6]
    conn.execute(
        "INSERT INTO templates (name, version, plan, params, created_at) VALUES (?, 1, ?, '[]', '2026-01-02T00:00:00.000000Z')",
        ("pay", json.dumps(PAY)),
    )
    conn.close()
    with open_store(path) as store:
        assert store.template("pay").plan["goal"] == "pay the supplier"
        with store.tx(write=False) as cur:
            cur.execute("SELECT key, value FROM planexec_meta")
            meta = dict(cur.fetchall())
            cur.execute("SELECT MAX(version) FROM schema_migrations")
            assert cur.fetchone()[0] == SCHEMA_VERSION
    assert meta["audit_since"] == "2026-01-01T00:00:00.000000Z" and meta["templates_audit_since"] > meta["audit_since"]
    assert check_store(path).ok
    edit(str(path), "UPDATE planexec_meta SET value = '2020-01-01' WHERE key = 'audit_since'")
    with pytest.raises(sqlite3.IntegrityError, match="never change"):  # the store itself refuses to move when it began
        sqlite3.connect(path, isolation_level=None).execute("DELETE FROM planexec_meta WHERE key = 'audit_since'")


# --- the runs row, and a chain removed --------------------------------------------------------------------


def test_an_edited_runs_row_is_marked_by_runs_and_show_and_reported(tmp_path):
    db = str(tmp_path / "runs.db")
    stopped_run(tmp_path, db)
    edit(db, "UPDATE runs SET status = 'succeeded', goal = 'all paid' WHERE run_id = ?", ("r1",))

    listed = cli("runs", "--store", db, cwd=tmp_path)
    no_traceback(listed)
    assert listed.returncode == 0 and "(CHANGED)" in listed.stdout
    assert "r1: CHANGED: its runs row says goal 'all paid', its events say 'name it, then say it'" in " ".join(listed.stdout.split())
    assert "its runs row says status 'succeeded', its events say 'running'" in " ".join(listed.stdout.split())
    shown = cli("show", "r1", "--store", db, cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith("WARNING: run r1 was changed in the store")
    assert "the run's summary (its runs row): changed: its runs row says status 'succeeded'" in shown.stdout
    as_json = json.loads(cli("runs", "--json", "--store", db, cwd=tmp_path).stdout)
    assert len(as_json[0]["mismatch"]) == 2
    verified = cli("audit", "verify", "r1", "--store", db, cwd=tmp_path)
    assert verified.returncode == 1 and "runs row" in verified.stdout
    checked = cli("store", "check", "--store", db, cwd=tmp_path)
    assert checked.returncode == 1 and "run r1 · the run's summary (its runs row): changed" in checked.stdout
    resumed = cli("resume", "r1", "--store", db, cwd=tmp_path)  # its row is part of what a resume would trust
    no_traceback(resumed)
    assert resumed.returncode == 2 and "its runs row says goal 'all paid'" in resumed.stderr and "(and 1 more)" in resumed.stderr


def test_a_run_recorded_after_the_audit_log_began_cannot_be_unchained(target, tmp_path):
    stopped_run(tmp_path, target)
    for table in ("events", "plans"):
        edit(target, f"UPDATE {table} SET link = NULL, prev_hash = NULL, hash = NULL WHERE run_id = ?", ("r1",))
    edit(target, "UPDATE audit_heads SET link = NULL, seq = NULL, hash = NULL WHERE run_id = ?", ("r1",))
    with open_store(target) as store:
        report = verify_run(store, "r1")
        assert not report.ok and not report.chained and report.note == ""
        (problem,) = report.problems
        assert problem.record == "the run's chain" and "after the audit log began" in problem.detail
        assert "their hashes were removed" in problem.detail
        with pytest.raises(TamperedError):
            store.require_intact("r1")
    checked = check_store(target)
    assert checked.tampered and checked.runs_not_chained == 0
    assert any("the run's chain: removed" in p.detail for p in checked.problems)


def test_audit_verify_says_an_unchained_new_run_is_tampered_not_old(tmp_path):
    db = str(tmp_path / "runs.db")
    stopped_run(tmp_path, db)
    for table in ("events", "plans"):
        edit(db, f"UPDATE {table} SET link = NULL, prev_hash = NULL, hash = NULL WHERE run_id = ?", ("r1",))
    edit(db, "UPDATE audit_heads SET link = NULL, seq = NULL, hash = NULL WHERE run_id = ?", ("r1",))
    verified = cli("audit", "verify", "r1", "--store", db, cwd=tmp_path)
    no_traceback(verified)
    assert verified.returncode == 1 and "not chained (recorded before the audit log)" not in verified.stdout
    assert "TAMPERED" in verified.stdout and "after the audit log began" in " ".join(verified.stdout.split())
    resumed = cli("resume", "r1", "--store", db, cwd=tmp_path)
    assert resumed.returncode == 2 and "their hashes were removed" in resumed.stderr
