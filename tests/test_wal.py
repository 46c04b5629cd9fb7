"""A run leaves no WAL behind: the SQLite store cuts its write-ahead log to nothing when a run ends and when it closes."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

from planexec import Engine, Registry
from planexec.cli.main import main
from planexec.engine.recording import DurableRunner, record_run
from planexec.engine.runner import LocalRunner
from planexec.plan.model import Plan
from planexec.store import SqliteRunStore


def _registry() -> Registry:
    registry = Registry()

    @registry.tool(idempotent=True)
    async def noop(n: int) -> int:
        return n

    return registry


def _plan(steps: int) -> Plan:
    return Plan.from_data(
        {
            "plan_id": "wal",
            "goal": "many steps",
            "steps": [{"id": f"s{i}", "worker": "tool", "action": "noop", "parameters": {"n": i}} for i in range(steps)],
        }
    )


def _wal(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


async def _run(store: SqliteRunStore, steps: int) -> None:
    registry = _registry()
    engine = Engine(registry, runner=DurableRunner(LocalRunner(registry)), max_concurrency=4)
    run = engine.start(_plan(steps), validate=False)
    record_run(run, store)
    result = await run.result()
    assert result.ok, result.reason


def test_a_long_run_leaves_no_wal_while_the_store_stays_open(tmp_path):
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    try:
        asyncio.run(_run(store, 400))  # several hundred commits: the WAL holds pages of each
        deadline = time.monotonic() + 10
        while _wal(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _wal(path) == 0, f"{_wal(path)} bytes of WAL left after the run ended"
        assert store.runs()[0].status.value == "succeeded"
        asyncio.run(_run(store, 30))  # the store still takes the next run
    finally:
        store.close()
    assert _wal(path) == 0
    with sqlite3.connect(path) as conn:  # every event reached the database file itself
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_closing_a_store_cuts_the_wal(tmp_path):
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    with store.tx(write=True) as cur:  # a write outside any run: only closing the store checkpoints it
        cur.execute("CREATE TABLE scratch (x)")
        cur.execute("INSERT INTO scratch VALUES (1)")
    assert _wal(path) > 0
    store.close()
    assert _wal(path) == 0


def test_a_reader_holding_the_wal_does_not_stop_the_writer_closing(tmp_path):
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    asyncio.run(_run(store, 5))
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM events").fetchone()  # a read transaction pins the WAL
    try:
        started = time.monotonic()
        store.close()  # cannot truncate under a reader: gives up at once instead of waiting the busy timeout
        assert time.monotonic() - started < 4
    finally:
        reader.close()
    assert SqliteRunStore(path).runs()  # nothing lost; the next writer catches up


def test_planexec_run_leaves_no_wal_beside_its_store(tmp_path, monkeypatch, capsys):
    """The command closes what it opened: after ``planexec run`` only the database file is left."""
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.json"
    steps = [{"id": f"s{i}", "worker": "tool", "action": "echo", "parameters": {"value": i}} for i in range(20)]
    plan.write_text(json.dumps({"plan_id": "p", "goal": "echo twenty times", "steps": steps}))
    db = tmp_path / "runs.db"
    assert main(["run", "--plan", str(plan), "--yes", "--json", "--store", str(db)]) == 0
    capsys.readouterr()
    assert _wal(db) == 0 and not Path(f"{db}-shm").exists()
    assert main(["show", SqliteRunStore(db).runs()[0].run_id, "--store", str(db)]) == 0


def test_two_stores_opening_one_new_file_at_once_in_one_process_both_find_it_whole(tmp_path):
    """``planexec run`` in one thread and a reader in another open the same new file at once: the opens take turns, so
    neither reads the file while the other migrates it (which dropped SQLite's locks: 'database is locked', or tables
    not there yet)."""
    import threading

    failures: list[str] = []
    for n in range(20):
        path = tmp_path / f"runs-{n}.db"
        opened: list[SqliteRunStore] = []
        ready = threading.Barrier(2)

        def open_and_read(path: Path = path, opened: list[SqliteRunStore] = opened, ready: threading.Barrier = ready) -> None:
            ready.wait()
            try:
                store = SqliteRunStore(path)
                opened.append(store)
                store.templates()
                store.runs()
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=open_and_read) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for store in opened:
            store.close()
    assert failures == []
