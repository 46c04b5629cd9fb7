"""The audit log: a real run verifies, and every edit of its stored records made behind the store's back is caught.

Each test runs on SQLite and on a real PostgreSQL (the `postgres_url`
fixture). The attacker edits the database directly, as someone with access
to the file or the server would: with the store's triggers dropped (SQLite)
or switched off for the session (PostgreSQL's ``session_replication_role``).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path

import pytest

from planexec import Engine, Plan, Registry
from planexec.cli.main import main
from planexec.engine.recording import record_run
from planexec.events import parse_event
from planexec.store import AuditReport, ProblemKind, open_store, verify_run
from planexec.store.audit import GENESIS, canonical, link_hash
from planexec.store.schema import MIGRATIONS, SQLITE_APPLICATION_ID, migrate
from planexec.testing import scripted_tool

PLAN = {
    "plan_id": "audited",
    "goal": "fetch, then summarise twice",
    "steps": [
        {"id": "fetch", "action": "fetch", "worker": "tool", "parameters": {"args": {"url": "https://example.org"}}},
        {"id": "left", "action": "summarise", "worker": "tool", "parameters": {"args": {"text": "${fetch}"}}, "depends_on": ["fetch"]},
        {"id": "right", "action": "summarise", "worker": "tool", "parameters": {"args": {"text": "${fetch}"}}, "depends_on": ["fetch"]},
    ],
}


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    url = request.getfixturevalue("postgres_url")
    return f"{url}?schema=a_{uuid.uuid4().hex[:12]}"


def record(target, run_id="run-1"):
    """A real run of three steps through the engine with scripted tools, recorded, plus an approval asked and decided."""
    reg = Registry()
    reg.add_tool(scripted_tool("fetch", ["<html>the page</html>"]))
    reg.add_tool(scripted_tool("summarise", ["a page", "a short page"]))

    async def go():
        with open_store(target) as store:
            run = Engine(reg).start(Plan.from_data(PLAN), run_id=run_id)
            record_run(run, store)
            result = await run.result()
            store.request_approval(run_id, "sha256:release", step_id="left")
            store.decide_approval(run_id, step_id="left", approved=True, by="ada", reason="looks right")
            return result

    assert asyncio.run(go()).ok
    return run_id


def verify(target, run_id="run-1") -> AuditReport:
    with open_store(target, create=False) as store:
        return verify_run(store, run_id)


def found(report):
    return [(p.kind, p.seq) for p in report.problems]


def cli(target, run_id="run-1", *extra):
    return main(["audit", "verify", run_id, "--store", target, *extra])


class Attacker:
    """A raw connection to the store's database with the append-only triggers out of the way."""

    def __init__(self, target):
        if "://" not in target:
            self.conn = sqlite3.connect(target, isolation_level=None)
            self.ph = "?"
            for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                self.conn.execute(f"DROP TRIGGER {name}")
        else:
            import psycopg

            from planexec.store.postgres import split_schema

            dsn, schema = split_schema(target)
            self.conn = psycopg.connect(dsn, autocommit=True)
            self.conn.execute(f'SET search_path TO "{schema}"')
            self.conn.execute("SET session_replication_role = replica")  # no triggers for this session
            self.ph = "%s"

    def sql(self, statement, params=()):
        cur = self.conn.execute(statement.replace("?", self.ph), params)
        return cur.fetchall() if cur.description else None

    def events(self, run_id="run-1"):
        return self.sql("SELECT seq, type, body, link, prev_hash, hash FROM events WHERE run_id = ? ORDER BY seq", (run_id,))

    def close(self):
        self.conn.close()


@pytest.fixture
def attacker(target):
    record(target)
    a = Attacker(target)
    yield a
    a.close()


def flip(text: str) -> str:
    """`text` with one byte changed: the middle letter or digit, its lowest bit flipped."""
    i = len(text) // 2
    while not text[i].isalnum():
        i += 1
    return text[:i] + chr(ord(text[i]) ^ 1) + text[i + 1 :]


# --- an untouched run ------------------------------------------------------------------------


def test_a_recorded_run_verifies_intact_with_every_record_chained(target):
    record(target)
    report = verify(target)
    assert report.ok and report.chained and report.problems == []
    with open_store(target) as store:
        events = store.events("run-1")
        versions = store.plan_versions("run-1")
    assert report.checked == len(events) + len(versions) + 2  # the events, the plan, the approval's request and decision
    assert report.head_seq == events[-1].seq and report.head_link == report.checked - 1
    assert report.head_hash.startswith("sha256:") and report.head_hash != GENESIS
    assert cli(target) == 0


def test_the_cli_prints_the_verdict_and_the_head_hash(target, capsys):
    record(target)
    assert cli(target) == 0
    out = capsys.readouterr().out
    report = verify(target)
    assert "run run-1: intact" in out and report.head_hash in out and f"seq {report.head_seq}" in out
    assert cli(target, "run-1", "--json") == 0
    assert AuditReport.from_json(capsys.readouterr().out) == report


def test_stored_events_are_their_own_compact_json_and_the_hash_covers_the_bytes_stored(attacker):
    rows = attacker.events()
    (first,) = attacker.sql("SELECT prev_hash FROM plans WHERE run_id = ? AND link = 0", ("run-1",))[0]
    assert first == GENESIS  # the first plan version is saved before RunStarted: the chain's first record
    for seq, kind, body, link, prev_hash, digest in rows:
        assert body == parse_event(body).to_json()  # the text the event's own encoder writes, read back the same
        assert digest == link_hash(prev_hash, "run-1", link, kind, seq, body)
    assert [row[3] for row in rows] == list(range(1, len(rows) + 1))


def test_a_batch_of_events_is_chained_as_each_would_be_alone():
    """`Chain.event_rows` (the store's hot path) gives every event the hash `link_hash` defines, for any run id."""
    from planexec.engine.events import StepStarted, utcnow
    from planexec.store.audit import Chain, ChainHead

    run_id = 'run "é" \\ 1'  # a run id JSON must escape
    events = [StepStarted(run_id=run_id, seq=s, at=utcnow(), step_id=f"s{s}", worker="tool", action="t", attempt=1) for s in (4, 5, 6)]
    bodies = [ev.to_json() for ev in events]
    head = ChainHead(link=9, seq=3, hash="sha256:" + "ab" * 32)
    chain = Chain(run_id, head)
    params = chain.event_rows(events, bodies)
    rows = [params[i : i + 7] for i in range(0, len(params), 7)]
    prev, link = head.hash, 9
    for ev, body, row in zip(events, bodies, rows, strict=True):
        link += 1
        assert row == [run_id, ev.seq, "step_started", body, link, prev, link_hash(prev, run_id, link, "step_started", ev.seq, body)]
        prev = row[6]
    assert (chain.link, chain.seq, chain.hash, chain.changed) == (12, 6, prev, True)
    legacy = Chain(run_id, ChainHead(link=None, seq=None, hash=None))  # a run recorded before the audit log
    assert legacy.event_rows(events, bodies)[4:7] == [None, None, None] and legacy.seq == 6 and not legacy.changed


# --- tampering, caught ------------------------------------------------------------------------


def test_a_one_byte_change_to_any_event_is_caught_at_its_seq(attacker, target):
    rows = attacker.events()
    assert len(rows) >= 8  # every kind the run has: started, ready (a step waited for approval), approvals, steps, finished
    for seq, _, body, *_ in rows:
        attacker.sql("UPDATE events SET body = ? WHERE run_id = ? AND seq = ?", (flip(body), "run-1", seq))
        report = verify(target)
        assert found(report) == [(ProblemKind.CHANGED, seq)], seq
        attacker.sql("UPDATE events SET body = ? WHERE run_id = ? AND seq = ?", (body, "run-1", seq))
    assert verify(target).ok


def test_a_one_byte_change_to_a_plan_version_or_an_approval_is_caught(attacker, target):
    (plan,) = attacker.sql("SELECT plan FROM plans WHERE run_id = ?", ("run-1",))[0]
    attacker.sql("UPDATE plans SET plan = ? WHERE run_id = ?", (flip(plan), "run-1"))
    report = verify(target)
    assert [(p.kind, p.record) for p in report.problems] == [(ProblemKind.CHANGED, "plan version 1")]
    attacker.sql("UPDATE plans SET plan = ? WHERE run_id = ?", (plan, "run-1"))

    attacker.sql("UPDATE approvals SET decided_by = ? WHERE run_id = ?", ("mallory", "run-1"))
    report = verify(target)
    assert [p.kind for p in report.problems] == [ProblemKind.CHANGED] and "approval decision for step left" in report.problems[0].record
    attacker.sql("UPDATE approvals SET decided_by = ? WHERE run_id = ?", ("ada", "run-1"))

    attacker.sql("UPDATE approvals SET content_hash = ? WHERE run_id = ?", ("sha256:other", "run-1"))
    assert {p.kind for p in verify(target).problems} == {ProblemKind.CHANGED}
    assert cli(target) == 1


def test_a_record_removed_from_the_middle_is_reported_at_its_seq(attacker, target):
    attacker.sql("DELETE FROM events WHERE run_id = ? AND seq = ?", ("run-1", 4))
    report = verify(target)
    assert found(report) == [(ProblemKind.REMOVED, 4)]
    assert cli(target) == 1


def test_a_removed_tail_is_caught_by_the_head(attacker, target):
    last = attacker.events()[-1][0]
    attacker.sql("DELETE FROM events WHERE run_id = ? AND seq >= ?", ("run-1", last - 2))
    attacker.sql("DELETE FROM approvals WHERE run_id = ?", ("run-1",))
    report = verify(target)
    assert found(report) == [(ProblemKind.TAIL_REMOVED, last - 2)]
    assert "the run's head is link" in report.problems[0].detail
    assert cli(target) == 1


def test_two_swapped_records_are_reported_as_reordered(attacker, target):
    rows = {seq: row for seq, *row in attacker.events()}
    for a, b in ((2, 5), (5, 2)):
        kind, body = rows[b][0], rows[b][1]
        attacker.sql("UPDATE events SET type = ?, body = ? WHERE run_id = ? AND seq = ?", (kind, body, "run-1", a))
    report = verify(target)
    assert found(report) == [(ProblemKind.REORDERED, 2), (ProblemKind.REORDERED, 5)]
    assert "holds event 5" in report.problems[0].detail
    assert cli(target) == 1


def test_swapped_records_with_their_hashes_are_reported_as_reordered(attacker, target):
    rows = {seq: row for seq, *row in attacker.events()}
    for a, b in ((3, 6), (6, 3)):
        kind, body, link, prev, digest = rows[b]
        attacker.sql(
            "UPDATE events SET type = ?, body = ?, link = ?, prev_hash = ?, hash = ? WHERE run_id = ? AND seq = ?",
            (kind, body, link, prev, digest, "run-1", a),
        )
    assert sorted(found(verify(target))) == [(ProblemKind.REORDERED, 3), (ProblemKind.REORDERED, 6)]


def test_an_inserted_record_is_reported_even_with_a_well_forged_hash(attacker, target):
    seq, _, body, *_ = attacker.events()[-1]
    (link, digest) = attacker.sql("SELECT link, hash FROM audit_heads WHERE run_id = ?", ("run-1",))[0]
    forged = body.replace(f'"seq":{seq}', f'"seq":{seq + 1}')  # a copy of the last event, one seq later
    forged_hash = link_hash(digest, "run-1", link + 1, "run_finished", seq + 1, forged)
    attacker.sql(
        "INSERT INTO events (run_id, seq, type, body, link, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
        ("run-1", seq + 1, "run_finished", forged, link + 1, digest, forged_hash),
    )
    report = verify(target)
    assert found(report) == [(ProblemKind.INSERTED, seq + 1)] and "after the run's head" in report.problems[0].detail
    assert cli(target) == 1

    attacker.sql("DELETE FROM events WHERE run_id = ? AND seq = ?", ("run-1", seq + 1))
    attacker.sql("INSERT INTO events (run_id, seq, type, body) VALUES (?, ?, ?, ?)", ("run-1", seq + 1, "run_finished", forged))
    assert found(verify(target)) == [(ProblemKind.INSERTED, seq + 1)]


def test_a_record_inserted_in_the_middle_is_reported(attacker, target):
    """The attacker shifts every later record up by one link (events by one seq), the head too, and forges one into the hole."""
    rows = attacker.events()
    for seq, _, _, link, *_ in reversed(rows[5:]):
        attacker.sql("UPDATE events SET seq = ?, link = ? WHERE run_id = ? AND seq = ?", (seq + 1, link + 1, "run-1", seq))
    for table in ("plans", "approvals"):
        attacker.sql(f"UPDATE {table} SET link = link + 1 WHERE run_id = ? AND link >= ?", ("run-1", rows[5][3]))
    attacker.sql("UPDATE approvals SET decision_link = decision_link + 1 WHERE run_id = ?", ("run-1",))
    attacker.sql("UPDATE audit_heads SET link = link + 1, seq = seq + 1 WHERE run_id = ?", ("run-1",))
    seq, kind, body, link, _, _ = rows[5]
    body = canonical({**json.loads(body), "at": "2020-01-01T00:00:00Z"})  # a forged event where event 5 was
    prev = rows[4][5]
    attacker.sql(
        "INSERT INTO events (run_id, seq, type, body, link, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
        ("run-1", seq, kind, body, link, prev, link_hash(prev, "run-1", link, kind, seq, body)),
    )
    report = verify(target)
    kinds = found(report)
    assert kinds[0] == (ProblemKind.INSERTED, seq)
    moved = [(ProblemKind.REORDERED, s + 1) for s, *_ in rows[5:]] + [(ProblemKind.REORDERED, None)] * 2  # the approval's too
    assert kinds[1:] == moved
    assert cli(target) == 1


def test_the_head_of_a_chained_run_cannot_be_cleared_to_pass_it_off_as_unchained(attacker, target):
    attacker.sql("UPDATE audit_heads SET link = NULL, seq = NULL, hash = NULL WHERE run_id = ?", ("run-1",))
    report = verify(target)
    assert not report.ok and report.problems[0].record == "the run's head"


# --- the database itself refuses edits -----------------------------------------------------------


def test_triggers_refuse_updates_and_deletes_of_audited_rows_through_a_normal_connection(target):
    record(target)
    if "://" not in target:
        conn, ph, error = sqlite3.connect(target, isolation_level=None), "?", sqlite3.IntegrityError
    else:
        import psycopg

        from planexec.store.postgres import split_schema

        dsn, schema = split_schema(target)
        conn, ph, error = psycopg.connect(dsn, autocommit=True), "%s", psycopg.errors.RaiseException
        conn.execute(f'SET search_path TO "{schema}"')
    refused = {
        "UPDATE events SET body = '{}'": "append-only",
        "DELETE FROM events": "append-only",
        "UPDATE plans SET reason = 'other'": "plan versions are append-only",
        "DELETE FROM plans": "plan versions are append-only",
        "UPDATE approvals SET reason = 'other'": "decided once",
        "DELETE FROM approvals": "approvals are append-only",
        "UPDATE audit_heads SET link = 0": "only moves forward",
        "DELETE FROM audit_heads": "never deleted",
    }
    try:
        for statement, message in refused.items():
            with pytest.raises(error, match=message):
                conn.execute(statement)
        if ph == "%s":
            with pytest.raises(error, match="append-only"):
                conn.execute("TRUNCATE events")
    finally:
        conn.close()
    assert verify(target).ok


def test_the_stores_own_updates_keep_working_and_stay_chained(target):
    """Deciding an approval, a run's status moving: the audited content never changes, the decision is a new record."""
    record(target)
    before = verify(target).checked
    with open_store(target) as store:
        store.request_approval("run-1", "sha256:second", step_id="right")
        store.decide_approval("run-1", step_id="right", approved=False, by="bob", reason="not yet")
        assert store.run("run-1").finished
    report = verify(target)
    assert report.ok and report.checked == before + 2 and report.head_link == before + 1


# --- runs recorded before the audit log ----------------------------------------------------------


def _old_store(target):
    """A store at schema version 2 (before the audit log) holding run 'old'; the events of a real run copied in."""
    record(target, run_id="donor")
    with open_store(target) as store:
        events = store.events("donor")
    if "://" not in target:
        path = Path(target).with_name("old.db")
        conn, ph, dialect = sqlite3.connect(path, isolation_level=None), "?", "sqlite"
        conn.execute(f"PRAGMA application_id = {SQLITE_APPLICATION_ID}")
        where = str(path)
    else:
        import psycopg

        from planexec.store.postgres import split_schema

        dsn, schema = split_schema(target)
        schema += "_old"
        conn, ph, dialect = psycopg.connect(dsn, autocommit=True), "%s", "postgres"
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path TO "{schema}"')
        where = f"{dsn}?schema={schema}"
    cur = conn.cursor()
    assert migrate(cur, dialect, 0, "2026-01-01T00:00:00.000000Z", target=2, placeholder=ph) == [1, 2]
    goal = next(ev.goal for ev in events if ev.type == "run_started")  # the row as its events make it: it is not changed
    cur.execute(
        f"INSERT INTO runs (run_id, status, started_at, goal) VALUES ({ph}, {ph}, {ph}, {ph})",
        ("old", "running", "2026-01-01T00:00:00.000000Z", goal),
    )
    for ev in events[:-1]:
        body = ev.to_json().replace('"donor"', '"old"')
        cur.execute(f"INSERT INTO events (run_id, seq, type, body) VALUES ({ph}, {ph}, {ph}, {ph})", ("old", ev.seq, ev.type, body))
    conn.close()
    return where, events[-1]


def test_a_run_recorded_before_the_audit_log_is_reported_as_not_chained(target, capsys):
    where, last = _old_store(target)
    report = verify(where, "old")
    assert report.ok and not report.chained and report.note == "not chained (recorded before the audit log)"
    assert report.problems == [] and report.checked == last.seq
    with open_store(where) as store:  # it goes on (a resume): still outside the log, still not tampered
        store.append([type(last).from_dict({**last.to_dict(), "run_id": "old"})])
        store.request_approval("old", "sha256:x")
        assert store.decide_approval("old", approved=True, by="ada").state.value == "approved"
    report = verify(where, "old")
    assert report.ok and not report.chained
    capsys.readouterr()
    assert cli(where, "old") == 0
    assert "not chained (recorded before the audit log)" in capsys.readouterr().out
    record(where, run_id="new")  # a new run in the migrated store is chained
    assert verify(where, "new").chained and verify(where, "new").ok


def test_migration_3_is_recorded(target):
    record(target)
    conn = Attacker(target)
    versions = [v for (v,) in conn.sql("SELECT version FROM schema_migrations ORDER BY version")]
    conn.close()
    assert versions == [m.version for m in MIGRATIONS] and 3 in versions


# --- usage errors ---------------------------------------------------------------------------------


def test_an_unknown_run_or_a_missing_store_is_a_usage_error_without_a_traceback(target, tmp_path, capsys):
    record(target)
    assert cli(target, "nope") == 2
    err = capsys.readouterr().err
    assert "no run 'nope'" in err and "Traceback" not in err
    assert main(["audit", "verify", "run-1", "--store", str(tmp_path / "absent.db")]) == 2
    err = capsys.readouterr().err
    assert "no run store at" in err and "Traceback" not in err
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 10)
    assert main(["audit", "verify", "run-1", "--store", str(tmp_path / "junk.db")]) == 2
    assert "not a planexec run store" in capsys.readouterr().err


def test_garbage_in_the_chain_columns_is_reported_not_raised(attacker, target, capsys):
    if "://" in target:
        pytest.skip("PostgreSQL keeps its columns' types: only SQLite stores any value in any column")
    attacker.sql("UPDATE events SET link = 'not a number', hash = x'ff00' WHERE run_id = ? AND seq = 3", ("run-1",))
    attacker.sql("UPDATE events SET seq = 'three' WHERE run_id = ? AND seq = 4", ("run-1",))
    report = verify(target)
    assert not report.ok and (ProblemKind.INSERTED, 3) in found(report)
    assert cli(target) == 1 and "Traceback" not in capsys.readouterr().err


def test_a_large_record_is_hashed_in_parts_to_the_same_hash():
    import hashlib

    for content in ("small", "x" * (2 << 20) + "é\udcff"):  # a 2 MB plan version, with text that is not UTF-8 at the end
        whole = f'["sha256:prev","run",3,"plan",1]\n{content}'.encode("utf-8", "surrogateescape")
        assert link_hash("sha256:prev", "run", 3, "plan", 1, content) == "sha256:" + hashlib.sha256(whole).hexdigest()
