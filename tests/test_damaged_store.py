"""Damaged stores are never written (issue 12): the check on open, a damaged header told from another application's
database, and ``planexec store check`` (file, schema, audit chain) on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from planexec import Engine, Plan, Registry
from planexec.cli.main import main
from planexec.engine.recording import record_run
from planexec.errors import StoreError
from planexec.store import SqliteRunStore, integrity, open_store
from planexec.store.check import check_store
from planexec.store.integrity import inspect_header
from planexec.store.schema import SQLITE_APPLICATION_ID

RUNS = 12
STEPS = 8
TOOLS = '''"""The tools of the damaged-store tests."""
from planexec import tool


@tool
def repeat_text(text: str = "") -> str:
    """The text, repeated."""
    return text * 3
'''


def _plan(run: int) -> dict:
    steps = [
        {"id": f"s{i}", "action": "repeat_text", "worker": "tool", "parameters": {"text": f"run {run} step {i} "}} for i in range(STEPS)
    ]
    return {"plan_id": f"plan-{run}", "goal": f"echo {run}", "steps": steps}


def _registry() -> Registry:
    registry = Registry()

    @registry.tool
    def repeat_text(text: str = "") -> str:
        """The text, repeated."""
        return text * 3

    return registry


def _record(target: str, runs: range) -> None:
    """Record real runs (and an approval each) into the store at `target`."""

    async def go() -> None:
        with open_store(target) as store:
            for n in runs:
                run = Engine(_registry()).start(Plan.from_data(_plan(n)), run_id=f"run-{n:02d}")
                record_run(run, store)
                assert (await run.result()).ok
                store.request_approval(f"run-{n:02d}", f"sha256:{n}", step_id="s1")
                store.decide_approval(f"run-{n:02d}", step_id="s1", approved=True, by="ada", reason="fine")

    asyncio.run(go())


def _settle(path: Path, *, vacuum: bool = False) -> None:
    """Copy the WAL back into the file and remove it, as a store left alone is; `vacuum`: pack its pages too
    (how many transactions recorded the runs depends on timing: packed, the same runs give the same layout)."""
    conn = sqlite3.connect(path, isolation_level=None)
    if vacuum:
        conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert not Path(f"{path}-wal").exists()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    """A SQLite store with real runs, settled (no WAL); copy it before changing it."""
    path = tmp_path_factory.mktemp("healthy") / "runs.db"
    _record(str(path), range(RUNS))
    _settle(path, vacuum=True)
    return path


@pytest.fixture
def store_path(healthy, tmp_path) -> Path:
    """A copy of the healthy store in the test's own folder."""
    path = tmp_path / "runs.db"
    shutil.copyfile(healthy, path)
    return path


def _flip(path: Path, offset: int, length: int = 512) -> None:
    data = bytearray(path.read_bytes())
    for i in range(offset, offset + length):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _middle(path: Path) -> int:
    """Where the middle page of the file starts: 512 bytes flipped there hit its b-tree header and cell pointers, which
    SQLite reads, wherever the schema puts its tables (bytes in the middle of a record's text are invisible to SQLite's
    checks: `store check`'s audit chain finds those, see below)."""
    data = path.read_bytes()
    page = int.from_bytes(data[16:18], "big") or 65536
    return (len(data) // page // 2) * page


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file in the folder: its bytes and mtime (a -wal or -shm appearing or changing shows too)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir()) if p.is_file()}


def _quick_check(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    finally:
        conn.close()


def _out(capsys) -> str:
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    return text


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A plan file and a tools file to run."""
    plan, tools = tmp_path / "plan.json", tmp_path / "tools.py"
    plan.write_text(json.dumps(_plan(99)))
    tools.write_text(TOOLS)
    return plan, tools


# --- the issue: 512 bytes flipped in the middle of a store with real runs ----------------------------


def test_512_flipped_bytes_in_the_middle_refuse_a_run_and_leave_the_store_as_it_was(store_path, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan, tools = _project(tmp_path)
    _flip(store_path, _middle(store_path))
    assert _quick_check(store_path) != ["ok"]  # the damage is real: SQLite itself says so
    before = _snapshot(tmp_path)
    code = main(["run", "--plan", str(plan), "--tools", str(tools), "--yes", "--json", "--store", str(store_path)])
    out = _out(capsys)
    assert code == 2
    assert f"{store_path} is damaged" in out and "another application" not in out
    assert ".recover" in out and "backup" in out and "planexec store check" in out
    assert _snapshot(tmp_path) == before  # the file byte for byte, its mtime, and no -wal or -shm beside it


def test_the_issue_in_a_real_process(store_path, tmp_path):
    plan, tools = _project(tmp_path)
    _flip(store_path, _middle(store_path))
    before = _snapshot(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "planexec", "run", "--plan", str(plan), "--tools", str(tools), "--yes", "--store", str(store_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"}, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "damaged" in proc.stderr and str(store_path) in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [["runs"], ["show", "run-03"], ["logs", "run-03"], ["resume", "run-03"], ["audit", "verify", "run-03"]])
def test_every_command_refuses_the_damaged_store_naming_it_damaged(store_path, capsys, command):
    _flip(store_path, _middle(store_path))
    before = _snapshot(store_path.parent)
    assert main([*command, "--store", str(store_path)]) == 2
    out = _out(capsys)
    assert f"{store_path} is damaged" in out
    assert _snapshot(store_path.parent) == before


def test_a_healthy_store_still_opens_and_takes_runs(store_path, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan, tools = _project(tmp_path)
    assert main(["run", "--plan", str(plan), "--tools", str(tools), "--yes", "--json", "--store", str(store_path)]) == 0
    _out(capsys)
    with SqliteRunStore(store_path, create=False) as store:
        assert len(store.runs(limit=None)) == RUNS + 1


# --- the header: damaged is not "another application's" -------------------------------------------------


@pytest.mark.parametrize(
    "offset, data, problem",
    [
        (16, b"\x12\x34", "page size 4660 is not a power of two"),
        (16, b"\x00\x80", "page size 128 is not a power of two"),
        (18, b"\x07\x09", "file format versions 7/9"),
        (21, b"\x10\x20\x30", "payload fractions 16/32/48"),
        (80, b"\x01", "reserved for expansion"),
        (36, b"\x00\x10\x00\x00", "its freelist"),
        (16, bytes(b ^ 0xFF for b in range(84)), "page size"),  # the whole header after the magic, application_id too
    ],
    ids=["page-size", "page-size-small", "versions", "fractions", "expansion", "freelist", "all-of-it"],
)
def test_a_damaged_header_is_damaged_not_another_applications(store_path, offset, data, problem):
    raw = bytearray(store_path.read_bytes())
    raw[offset : offset + len(data)] = data
    store_path.write_bytes(bytes(raw))
    before = _snapshot(store_path.parent)
    with pytest.raises(StoreError) as info:
        SqliteRunStore(store_path)
    message = str(info.value)
    assert f"{store_path} is damaged: its SQLite header is inconsistent" in message and problem in message
    assert "another application" not in message and ".recover" in message
    assert info.value.location == str(store_path)
    assert _snapshot(store_path.parent) == before


def test_a_damaged_header_from_the_command_line(store_path, capsys):
    raw = bytearray(store_path.read_bytes())
    raw[16:18] = b"\x12\x34"
    raw[68:72] = b"\xde\xad\xbe\xef"  # the application_id garbled as well: the header is still what is damaged
    store_path.write_bytes(bytes(raw))
    assert main(["runs", "--store", str(store_path)]) == 2
    out = _out(capsys)
    assert "is damaged: its SQLite header is inconsistent" in out and "another application" not in out


def test_a_well_formed_sqlite_file_of_another_application_is_still_named_so(tmp_path, capsys):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 1234")
    conn.execute("CREATE TABLE orders (n)")
    conn.executemany("INSERT INTO orders VALUES (?)", [(i,) for i in range(2000)])
    conn.commit()
    conn.close()
    before = _snapshot(tmp_path)
    with pytest.raises(StoreError, match=r"another application \(application_id 0x4d2\)") as info:
        SqliteRunStore(path)
    assert "damaged" not in str(info.value)
    assert main(["store", "check", "--store", str(path)]) == 2
    assert "another application" in _out(capsys)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_a_truncated_store_is_damaged(store_path, keep, capsys):
    data = store_path.read_bytes()
    store_path.write_bytes(data[: int(len(data) * keep)])
    before = _snapshot(store_path.parent)
    with pytest.raises(StoreError, match="is damaged: its SQLite header is inconsistent: it says .* pages of 4096 bytes") as info:
        SqliteRunStore(store_path)
    assert "another application" not in str(info.value)
    assert main(["store", "check", "--store", str(store_path)]) == 2
    assert "DAMAGED" in _out(capsys)
    assert _snapshot(store_path.parent) == before


def test_a_header_cut_short_is_damaged(store_path):
    store_path.write_bytes(store_path.read_bytes()[:60])
    with pytest.raises(StoreError, match=r"is damaged: its SQLite header is cut short \(60 of 100 bytes\)"):
        SqliteRunStore(store_path)


def test_a_healthy_header_reads_its_figures(store_path):
    header, problem = inspect_header(store_path)
    assert problem is None and header is not None
    assert header.page_size == 4096 and header.application_id == SQLITE_APPLICATION_ID
    assert header.page_count == store_path.stat().st_size // 4096 and header.file_size == store_path.stat().st_size


# --- big files: the pages that matter -------------------------------------------------------------------


@pytest.fixture
def big(monkeypatch):
    """Every store is 'big': the check on open reads the pages that matter instead of running quick_check."""
    monkeypatch.setattr(integrity, "FULL_CHECK_BELOW", 0)


def _pages_of(path: Path, name: str) -> list[int]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return [p for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ? ORDER BY pageno", (name,))]
    finally:
        conn.close()


def _root(path: Path, name: str) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return int(conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (name,)).fetchone()[0])
    finally:
        conn.close()


def test_the_page_check_passes_a_healthy_store_with_free_pages_and_deep_trees(tmp_path, big):
    path = tmp_path / "runs.db"
    _record(str(path), range(60))
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE scratch (x)")
    conn.executemany("INSERT INTO scratch VALUES (?)", [("y" * 500,) for _ in range(400)])
    conn.commit()
    conn.execute("DROP TABLE scratch")  # its pages go to the freelist
    conn.commit()
    conn.close()
    _settle(path)
    header, _ = inspect_header(path)
    assert header is not None and header.freelist_pages > 0
    assert len(_pages_of(path, "events")) > 20  # an interior level at least
    with SqliteRunStore(path, create=False) as store:
        assert len(store.runs(limit=None)) == 60


@pytest.mark.parametrize("table", ["events", "runs", "audit_heads", "approvals"])
def test_the_page_check_refuses_a_damaged_root_page(store_path, tmp_path, table, big):
    root = _root(store_path, table)
    _flip(store_path, (root - 1) * 4096, 64)
    before = _snapshot(tmp_path)
    with pytest.raises(StoreError, match=f"is damaged: the b-tree of {table} is damaged \\(page {root}: "):
        SqliteRunStore(store_path)
    assert _snapshot(tmp_path) == before


def test_the_page_check_refuses_a_damaged_page_on_the_right_edge(store_path, big):
    events = _pages_of(store_path, "events")
    last_leaf = max(events)  # appended last: on the right edge, where the next rows go
    data = bytearray(store_path.read_bytes())
    data[(last_leaf - 1) * 4096 + 3 : (last_leaf - 1) * 4096 + 5] = b"\xff\xff"  # its cell count
    store_path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="the b-tree of events is damaged"):
        SqliteRunStore(store_path)


def test_the_page_check_refuses_a_damaged_freelist(store_path, big):
    raw = bytearray(store_path.read_bytes())
    pages = len(raw) // 4096
    raw[32:40] = pages.to_bytes(4, "big") + (1).to_bytes(4, "big")  # a trunk page that is a b-tree page
    store_path.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match="freelist is damaged"):
        SqliteRunStore(store_path)


def test_sqlite_is_the_judge_of_what_the_page_check_finds(store_path, big, monkeypatch):
    monkeypatch.setattr(integrity, "_pages_problem", lambda *args: "a problem only the screen sees")
    with SqliteRunStore(store_path, create=False) as store:  # quick_check finds nothing: the store opens
        assert len(store.runs(limit=None)) == RUNS


def test_with_a_wal_beside_the_file_sqlite_checks_through_it(store_path, big):
    writer = SqliteRunStore(store_path)  # holds the WAL open: the newest pages may be there
    try:
        _record(str(store_path), range(RUNS, RUNS + 2))
        assert Path(f"{store_path}-wal").exists()
        with SqliteRunStore(store_path, create=False) as reader:
            assert len(reader.runs(limit=None)) == RUNS + 2
    finally:
        writer.close()


# --- planexec store check ---------------------------------------------------------------------------------


def _check(capsys, target, code: int) -> tuple[str, dict]:
    """``planexec store check`` on `target`, as text and as JSON, each exiting with `code`: the text and the report."""
    assert main(["store", "check", "--store", str(target)]) == code
    text = _out(capsys)
    assert main(["store", "check", "--store", str(target), "--json"]) == code
    return text, json.loads(_out(capsys))


def test_store_check_on_a_healthy_store(store_path, capsys):
    before = _snapshot(store_path.parent)
    out, report = _check(capsys, store_path, 0)
    assert "healthy" in out and "file" in out and "schema" in out and "audit" in out
    assert f"{RUNS} runs" in out and "pages of 4096 bytes" in out and "records verified" in out
    assert report["ok"] is True and report["damaged"] is False and report["tampered"] is False
    assert report["checks"] == ["file", "schema", "audit"] and report["skipped"] == []
    assert report["runs"] == RUNS and report["runs_not_chained"] == 0
    events = RUNS * (2 + 2 * STEPS)  # started and finished, and each step's start and end
    assert report["events"] >= events and report["records"] > report["events"]  # plan versions and approvals too
    assert report["pages"] == store_path.stat().st_size // 4096 and report["schema_version"] >= 4
    assert set(report["seconds"]) == {"file", "schema", "audit", "total"}
    assert _snapshot(store_path.parent) == before


def test_store_check_on_the_damaged_store(store_path, capsys):
    _flip(store_path, _middle(store_path))
    before = _snapshot(store_path.parent)
    out, report = _check(capsys, store_path, 2)
    assert "DAMAGED" in out and ".recover" in out and "not checked" in out
    assert report["ok"] is False and report["damaged"] is True
    assert report["checks"] == ["file"] and report["skipped"] == ["schema", "audit"]
    assert report["problems"] and all(p["check"] == "file" for p in report["problems"]) and ".recover" in report["repair"]
    assert _snapshot(store_path.parent) == before


def test_store_check_on_a_damaged_header(store_path, capsys):
    raw = bytearray(store_path.read_bytes())
    raw[21:24] = b"\x00\x00\x00"
    store_path.write_bytes(bytes(raw))
    _, report = _check(capsys, store_path, 2)
    assert report["damaged"] and "payload fractions 0/0/0" in report["problems"][0]["detail"]


def _tamper_sqlite(path: Path, run_id: str, seq: int) -> None:
    """Edit an event row by SQL, with the append-only trigger out of the way and put back (the schema stays whole)."""
    conn = sqlite3.connect(path, isolation_level=None)
    (trigger,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events_no_update'").fetchone()
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE events SET body = replace(body, 'step', 'stop') WHERE run_id = ? AND seq = ?", (run_id, seq))
    conn.execute(trigger)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def test_store_check_on_a_tampered_audit_chain_names_the_run_and_event(store_path, capsys):
    _tamper_sqlite(store_path, "run-05", 3)
    out, report = _check(capsys, store_path, 1)
    assert "TAMPERED" in out and "run run-05 · seq 3" in out and "changed" in out
    assert report["tampered"] is True and report["damaged"] is False
    assert [(p["check"], p["run_id"], p["seq"]) for p in report["problems"]] == [("audit", "run-05", 3)]


def test_store_check_names_a_missing_trigger(store_path, capsys):
    conn = sqlite3.connect(store_path, isolation_level=None)
    conn.execute("DROP TRIGGER events_no_update")  # the log is no longer append-only
    conn.close()
    assert main(["store", "check", "--store", str(store_path)]) == 2
    assert "triggers missing: events_no_update" in _out(capsys)


def test_store_check_without_a_store_creates_nothing(tmp_path, capsys):
    assert main(["store", "check", "--store", str(tmp_path / "none" / "runs.db")]) == 2
    assert "no run store at" in _out(capsys)
    assert list(tmp_path.iterdir()) == []


def test_check_store_is_the_library_call(store_path):
    report = check_store(store_path)
    assert report.ok and report.backend == "sqlite" and report.location == str(store_path)
    assert json.loads(report.to_json())["runs"] == RUNS


# --- PostgreSQL ---------------------------------------------------------------------------------------


@pytest.fixture
def pg_target(postgres_url) -> str:
    target = f"{postgres_url}?schema=t_{uuid.uuid4().hex[:12]}"
    _record(target, range(3))
    return target


def test_store_check_on_a_healthy_postgres_store(pg_target, capsys):
    out, report = _check(capsys, pg_target, 0)
    assert report["ok"] and report["backend"] == "postgres" and report["runs"] == 3
    assert report["checks"] == ["schema", "audit"] and report["skipped"] == ["file"]
    assert "healthy" in out and "3 runs" in out and "PostgreSQL" in out


def test_store_check_on_a_tampered_postgres_store(pg_target, capsys):
    import psycopg

    from planexec.store.postgres import split_schema

    dsn, schema = split_schema(pg_target)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("SET session_replication_role = replica")  # no triggers for this session
        conn.execute("UPDATE events SET body = replace(body, 'step', 'stop') WHERE run_id = 'run-01' AND seq = 4")
    out, report = _check(capsys, pg_target, 1)
    assert "TAMPERED" in out and "run run-01 · seq 4" in out
    assert report["tampered"] and [(p["run_id"], p["seq"]) for p in report["problems"]] == [("run-01", 4)]
