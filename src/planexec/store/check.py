"""The full check of a run store: its file, its schema and every run's audit chain, as one typed report.

Owns `check_store` (what ``planexec store check`` runs) and the records it
answers with: `StoreCheck` (the verdict, the figures, each check's time)
and `StoreProblem` (one thing wrong: which check found it, the run and
event when there is one). Three checks, in order:

* ``file`` (SQLite only): the header (`integrity.inspect_header`) and
  ``PRAGMA integrity_check`` (every page, every index against its table)
  on a read-only connection that leaves nothing behind. A damaged file is
  not opened further: the other two checks are skipped, and the report
  carries the repair hint. PostgreSQL keeps its own pages (its
  ``amcheck`` extension checks them); this check is skipped there.
* ``schema``: the store opened as every command opens it (an older schema
  is migrated first), then its schema version, every migration recorded,
  and every table, index and trigger the migrations create (the triggers
  keep the audited rows append-only) present.
* ``audit``: `audit.verify_run` on every run the store holds a record of;
  each problem names its run and event (a ``runs`` row that disagrees
  with its events, and a run recorded after the audit log began that has
  no chain, are problems too). Runs recorded before the audit log are
  counted, not failed. Then every template version against its hash.

Reading the schema uses the backend's own transaction (`SqlRunStore._tx`):
this module belongs to the store. Imports `errors`, `records` and the
store's `audit`, `integrity`, `location`, `schema` and `sql`.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from planexec.errors import StoreError
from planexec.records import Record
from planexec.store.audit import verify_run
from planexec.store.integrity import file_check, inspect_header, read_only, repair_hint
from planexec.store.location import open_store, sqlite_path, store_target
from planexec.store.schema import MIGRATIONS, SCHEMA_VERSION, SQLITE_APPLICATION_ID, statements
from planexec.store.sql import SqlRunStore

__all__ = ["CheckName", "StoreCheck", "StoreProblem", "check_store"]

CheckName = Literal["file", "schema", "audit"]

_CREATED = re.compile(r"^CREATE (?:UNIQUE )?(TABLE|INDEX|TRIGGER) (\w+)", re.IGNORECASE)
_RUN_IDS = (
    "SELECT run_id FROM runs UNION SELECT run_id FROM audit_heads UNION SELECT run_id FROM events"
    " UNION SELECT run_id FROM plans UNION SELECT run_id FROM approvals"
)
_PG_OBJECTS = {
    "table": "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
    "index": "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()",
    "trigger": (
        "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND NOT t.tgisinternal"
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreProblem(Record):
    """One thing wrong with a store: the check that found it, what, and the run (and event seq) when it is a record."""

    check: CheckName
    detail: str
    run_id: str | None = None
    seq: int | None = None

    def render(self) -> str:
        """One line: ``run run-1 · seq 5 · event 5 (step_started): changed: ...`` (the check is said around it)."""
        where = [f"run {self.run_id}"] if self.run_id else []
        where += [f"seq {self.seq}"] if self.seq is not None else []
        return " · ".join([*where, self.detail])


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreCheck(Record):
    """The verdict on a whole store (`check_store`): `ok` when every check that ran found nothing.

    `damaged`: the file or the schema is broken (repair the file, see
    `repair`); `tampered`: the file is sound but a run's records do not
    match their audit chain: edited after they were written, or bytes
    damaged inside a record (SQLite's checks see the structure of pages,
    not the text in them). `checks` are the checks that ran, `skipped`
    those that did not (with why in `notes`), `seconds` each one's time.
    """

    location: str
    backend: Literal["sqlite", "postgres"]
    ok: bool
    damaged: bool = False
    tampered: bool = False
    checks: list[CheckName]
    skipped: list[CheckName] = field(default_factory=list)
    size_bytes: int | None = None
    pages: int | None = None
    page_size: int | None = None
    free_pages: int | None = None
    schema_version: int | None = None
    tables: int | None = None
    runs: int = 0
    runs_not_chained: int = 0  # recorded before the audit log: nothing to verify
    events: int = 0
    records: int = 0  # records whose hashes were verified (events, plan versions, approvals)
    templates: int = 0  # template versions whose hashes were verified
    seconds: dict[str, float] = field(default_factory=dict)
    problems: list[StoreProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    repair: str | None = None


def check_store(target: str | os.PathLike[str] | None = None) -> StoreCheck:
    """Check the store `target` names (as `open_store` reads it; None: `store_target()`): file, schema, audit.

    Never creates a store and never writes to a damaged one. A `StoreError`
    when there is no store there, or it cannot be opened for a reason the
    report cannot hold (unreachable, another application's database,
    written by a newer planexec).
    """
    spec = os.fspath(target) if target is not None else store_target()
    path = sqlite_path(spec)
    report = _Report()
    if path is not None:
        report.backend = "sqlite"
        report.location = str(path)
        if not _file(path, report):
            return report.done(skip="the file is damaged: repair it first")
    store = open_store(spec, create=False)
    try:
        if not isinstance(store, SqlRunStore):  # pragma: no cover - every backend is one today
            raise StoreError(f"{store.location}: cannot check this kind of run store", location=store.location)
        report.location = store.location
        report.backend = "sqlite" if path is not None else "postgres"
        if path is None:
            report.skipped.append("file")
            report.notes.append("file: PostgreSQL keeps its own pages (its amcheck extension checks them)")
        _schema(store, report)
        _audit(store, report)
    finally:
        store.close()
    return report.done()


class _Report:
    """The figures and problems gathered while the checks run; `done` freezes them into a `StoreCheck`."""

    def __init__(self) -> None:
        self.location = ""
        self.backend: Literal["sqlite", "postgres"] = "sqlite"
        self.started = time.perf_counter()
        self.checks: list[CheckName] = []
        self.skipped: list[CheckName] = []
        self.figures: dict[str, Any] = {}
        self.seconds: dict[str, float] = {}
        self.problems: list[StoreProblem] = []
        self.notes: list[str] = []
        self.repair: str | None = None

    def timed(self, name: CheckName, since: float) -> None:
        self.checks.append(name)
        self.seconds[name] = round(time.perf_counter() - since, 4)

    def done(self, skip: str | None = None) -> StoreCheck:
        if skip is not None:
            rest: tuple[CheckName, ...] = ("schema", "audit")
            for name in rest:
                self.skipped.append(name)
                self.notes.append(f"{name}: not checked ({skip})")
        self.seconds["total"] = round(time.perf_counter() - self.started, 4)
        damaged = any(p.check != "audit" for p in self.problems)
        tampered = any(p.check == "audit" for p in self.problems)
        return StoreCheck(
            location=self.location, backend=self.backend, ok=not self.problems, damaged=damaged, tampered=tampered,
            checks=self.checks, skipped=self.skipped,
            seconds=self.seconds, problems=self.problems, notes=self.notes, repair=self.repair, **self.figures,
        )  # fmt: skip


def _file(path: Path, report: _Report) -> bool:
    """The ``file`` check of a SQLite store; False when the file is damaged (the rest is then skipped)."""
    t0 = time.perf_counter()
    if not path.is_file():
        raise StoreError(f"no run store at {path}" + (" (it is a folder)" if path.is_dir() else ""), location=str(path))
    header, problem = inspect_header(path)
    report.figures["size_bytes"] = path.stat().st_size
    if header is None and problem is None:
        raise StoreError(f"no run store at {path} (the file is empty)", location=str(path))
    if header is not None and header.application_id not in (0, SQLITE_APPLICATION_ID) and problem is None:
        raise StoreError(
            f"{path} is not a planexec run store: it is the SQLite database of another application "
            f"(application_id {header.application_id:#x})",
            location=str(path),
        )
    if problem is None:
        try:
            with read_only(path) as conn:
                result = file_check(conn)
        except sqlite3.Error as exc:  # a file SQLite cannot even read as a database
            problem = str(exc)
        else:
            report.figures.update(pages=result.pages, page_size=result.page_size, free_pages=result.free_pages)
            report.problems += [StoreProblem(check="file", detail=line) for line in result.problems]
    if problem is not None:
        report.problems.append(StoreProblem(check="file", detail=problem))
    report.timed("file", t0)
    if report.problems:
        report.repair = repair_hint(path)
        return False
    return True


def _schema(store: SqlRunStore, report: _Report) -> None:
    """The ``schema`` check: the version, every migration recorded, every table, index and trigger present."""
    t0 = time.perf_counter()
    dialect = store.dialect
    with store.tx(write=False) as cur:
        present = {kind: _names(cur, dialect, kind) for kind in ("table", "index", "trigger")}
        cur.execute("SELECT version FROM schema_migrations ORDER BY version")
        versions = [int(v) for (v,) in cur.fetchall()]
    version = max(versions, default=0)
    report.figures.update(schema_version=version, tables=len(present["table"]))
    expected = [m.version for m in MIGRATIONS]
    if versions != expected:
        report.problems.append(
            StoreProblem(
                check="schema", detail=f"schema_migrations holds versions {versions}, expected {expected} (version {SCHEMA_VERSION})"
            )
        )
    for kind, names in _expected(dialect).items():
        missing = sorted(names - present[kind])
        if missing:
            report.problems.append(StoreProblem(check="schema", detail=f"{kind}s missing: {', '.join(missing)}"))
    report.timed("schema", t0)


def _names(cur: Any, dialect: str, kind: str) -> set[str]:
    if dialect == "sqlite":
        cur.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))
    else:
        cur.execute(_PG_OBJECTS[kind])
    return {str(name) for (name,) in cur.fetchall()}


def _expected(dialect: str) -> dict[str, set[str]]:
    """The tables, indexes and triggers the migrations create in `dialect`."""
    found: dict[str, set[str]] = {"table": {"schema_migrations"}, "index": set(), "trigger": set()}
    for migration in MIGRATIONS:
        for sql in statements(migration, dialect):
            match = _CREATED.match(sql)
            if match:
                found[match.group(1).lower()].add(match.group(2))
    return found


def _audit(store: SqlRunStore, report: _Report) -> None:
    """The ``audit`` check: every run's records against its hash chain."""
    t0 = time.perf_counter()
    with store.tx(write=False) as cur:
        cur.execute(_RUN_IDS)
        run_ids = sorted(str(r) for (r,) in cur.fetchall())
        cur.execute("SELECT COUNT(*) FROM events")
        events = int(cur.fetchone()[0])
    records = not_chained = 0
    for run_id in run_ids:
        try:
            audit = verify_run(store, run_id)
        except StoreError as exc:  # a record SQLite cannot even hand back (text that is not UTF-8 in a chain column)
            report.problems.append(StoreProblem(check="audit", run_id=run_id, detail=f"its records cannot be read: {exc}"))
            continue
        records += audit.checked
        not_chained += not audit.chained and bool(audit.note)  # an old run, not one whose chain was removed
        report.problems += [
            StoreProblem(check="audit", run_id=run_id, seq=p.seq, detail=f"{p.record}: {p.kind.value}: {p.detail}") for p in audit.problems
        ]
    templates, changed = store.template_problems()
    report.problems += [StoreProblem(check="audit", detail=line) for line in changed]
    report.figures.update(runs=len(run_ids), runs_not_chained=not_chained, events=events, records=records, templates=templates)
    report.timed("audit", t0)
