"""The run store's event log: each run's events with the snapshots that make reads fast, its plan versions and its audit trail.

Owns `EventLog`, one per store, over the store's `database.Database`:
`append` (the hot path: one transaction per batch of events while a run
goes on: one query for the run's last seq, one multi-row INSERT, and
snapshot updates only for the events that change the ``runs`` row),
`events`, `last_seq`, `runs` and `run` (summaries, with the lease of a
running run), `save_plan`, `insert_plan` and `plan_versions`, and
`audit_trail`. An append to a run this store holds checks its lease in the
same transaction (`leases.LeaseBook.check_lease`).

Every record of a run joins its hash chain as it is written (see `audit`):
the run's head is read (locked, on PostgreSQL, so two writers never take
the same link) and written back in the same transaction, and `audit_trail`
reads it all back for `audit.verify_run`. The run's last event seq is the
head's, so chaining adds one statement to an append (the head's update),
not two. Secrets never reach the database: every event and plan version
is redacted (`secrets.redact`) on its way in, before it is hashed, and the
run summaries are made from the redacted events. Events are stored as the
compact JSON their record writes, the very text their hash covers.
Imports `events`, `plan`, `results`, `records`, `usage`, `secrets`,
`errors` and the store's `audit`, `base`, `database`, `leases` and `rows`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from planexec.engine.events import parse_event
from planexec.engine.results import PlanVersion, RunStatus
from planexec.errors import EventConflictError, RunNotFoundError, StoreError
from planexec.plan.diff import PlanDiff
from planexec.plan.model import Plan
from planexec.records import json_encoder
from planexec.secrets import redact, secrets
from planexec.store.audit import (
    AuditReport,
    AuditTrail,
    Chain,
    ChainHead,
    ChainRecord,
    approval_ref,
    canonical,
    decision_content,
    plan_content,
    request_content,
    tampered_run,
    verify_trail,
)
from planexec.store.base import RunSummary
from planexec.store.database import Database
from planexec.store.leases import Lease, LeaseBook
from planexec.store.rows import from_timestamp, timestamp
from planexec.store.schema import AUDIT_SINCE, STATE_EVENTS
from planexec.usage import Usage

__all__ = ["EventLog"]

_CHUNK = 100  # rows per INSERT statement (well under every backend's limit on bound parameters)
_USAGE_EVENTS = frozenset({"step_succeeded", "step_failed", "plan_drafted", "plan_revised", "joiner_decided"})
_SNAPSHOT_EVENTS = frozenset({"run_started", "run_resumed", "plan_revised", "plan_completed", "run_finished"})
_RUN_COLUMNS = (
    "run_id, goal, status, plan_id, plan_version, content_hash, step_count, started_at, "
    "finished_at, wall_time, usage, reason, parent_run_id, parent_step_id"
)


class EventLog:
    """The event log of a store (see the module docstring): its runs' events, snapshots, plan versions and audit trail."""

    def __init__(self, db: Database, leases: LeaseBook) -> None:
        self.db = db
        self.leases = leases
        self._insert_sql: dict[int, str] = {}

    # --- the event log -----------------------------------------------------------

    def append(self, events: Iterable[Any], *, parent: tuple[str, str] | None = None) -> int:
        """Store events and update the snapshots in one transaction; returns how many were new (see `RunStore.append`)."""
        batch = events if isinstance(events, list) else list(events)
        if not batch:
            return 0
        first, last = batch[0].run_id, batch[-1].run_id
        groups: dict[str, list[Any]] = {first: batch}
        if last != first or len({ev.run_id for ev in batch}) > 1:
            groups = {}
            for ev in batch:
                groups.setdefault(ev.run_id, []).append(ev)
        stored = 0
        with self.db.tx(write=True) as cur:
            for run_id in sorted(groups):  # the heads are locked in one order: two writers never wait on each other
                stored += self.append_run(cur, run_id, groups[run_id], parent)
        return stored

    def append_run(self, cur: Any, run_id: str, evs: list[Any], parent: tuple[str, str] | None) -> int:
        self.leases.check_lease(cur, run_id)
        chain = self.db.chain(cur, run_id)
        if chain.legacy:  # recorded before the audit log: its head has no seq
            row = self.db.one(cur, "SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,))
            last = -1 if row[0] is None else int(row[0])
        else:
            last = chain.seq
        found = _stored_all(evs, last + 1) if evs[0].seq == last + 1 else None  # the usual case: the next events, in order
        if found is not None:
            fresh, bodies, changes = found
        else:
            fresh, bodies = self._sort_out(cur, run_id, evs, last)
            changes = any(_changes_run(ev) for ev in fresh)
        if not fresh:
            return 0
        if last == -1:
            self._create_run(cur, run_id, fresh[0], parent)
        params = chain.event_rows(fresh, bodies)
        width = 7 * _CHUNK  # the parameters of one INSERT: 7 a row
        for start in range(0, len(params), width):
            chunk = params[start : start + width]
            cur.execute(self._insert(len(chunk) // 7), chunk)
        if changes:
            self._update_snapshot(cur, run_id, fresh, chain)
        self.db.save_chain(cur, chain)
        return len(fresh)

    def _insert(self, rows: int) -> str:
        sql = self._insert_sql.get(rows)
        if sql is None:
            sql = self._insert_sql[rows] = self.db.q(
                "INSERT INTO events (run_id, seq, type, body, link, prev_hash, hash) VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * rows)
            )
        return sql

    def _sort_out(self, cur: Any, run_id: str, evs: list[Any], last: int) -> tuple[list[Any], list[str]]:
        """The slow path: drop events stored before (same content), refuse conflicts and gaps; the new ones in order."""
        by_seq: dict[int, tuple[Any, str]] = {}
        for ev in evs:
            ev, body = _stored(ev)
            if ev.seq < 0:
                raise EventConflictError(
                    f"event of run {run_id!r} has a negative seq {ev.seq}", run_id=run_id, seq=ev.seq, location=self.db.location
                )
            seen = by_seq.get(ev.seq)
            if seen is not None and json.loads(seen[1]) != json.loads(body):
                raise EventConflictError(
                    f"two different events of run {run_id!r} have seq {ev.seq}", run_id=run_id, seq=ev.seq, location=self.db.location
                )
            by_seq[ev.seq] = (ev, body)
        old = sorted(s for s in by_seq if s <= last)
        if old:
            stored = self.db.all(cur, "SELECT seq, body FROM events WHERE run_id = ? AND seq >= ? AND seq <= ?", (run_id, old[0], old[-1]))
            bodies = {int(seq): body for seq, body in stored}
            for seq in old:
                if seq not in bodies:
                    raise EventConflictError(
                        f"event {seq} of run {run_id!r} is missing from {self.db.location} (removed from the log?)",
                        run_id=run_id,
                        seq=seq,
                        location=self.db.location,
                    )
                if json.loads(bodies[seq]) != json.loads(by_seq[seq][1]):
                    raise EventConflictError(
                        f"event {seq} of run {run_id!r} is already stored with another content ({by_seq[seq][0].type} now, "
                        f"{json.loads(bodies[seq]).get('type')} stored)",
                        run_id=run_id,
                        seq=seq,
                        location=self.db.location,
                    )
        fresh = sorted(s for s in by_seq if s > last)
        for expected, seq in enumerate(fresh, start=last + 1):
            if seq != expected:
                raise EventConflictError(
                    f"event {seq} of run {run_id!r} would leave a gap: the next event to store is {expected}",
                    run_id=run_id,
                    seq=seq,
                    location=self.db.location,
                )
        return [by_seq[s][0] for s in fresh], [by_seq[s][1] for s in fresh]

    def _create_run(self, cur: Any, run_id: str, first: Any, parent: tuple[str, str] | None) -> None:
        parent_run, parent_step = parent if parent is not None else (None, None)
        cur.execute(
            self.db.q(
                "INSERT INTO runs (run_id, status, started_at, parent_run_id, parent_step_id) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO NOTHING"
            ),
            (run_id, RunStatus.RUNNING.value, timestamp(first.at), parent_run, parent_step),
        )

    def _update_snapshot(self, cur: Any, run_id: str, evs: list[Any], chain: Chain) -> None:
        """Apply what these new events change in the run's row (and the plan versions); same transaction."""
        used = Usage()
        finished = False
        for ev in evs:
            kind = ev.type
            if kind in _USAGE_EVENTS:
                used = used + ev.usage
            if kind == "run_started":
                cur.execute(
                    self.db.q(
                        "UPDATE runs SET goal = ?, plan_id = ?, plan_version = ?, content_hash = ?, step_count = ?, "
                        "status = ?, finished_at = NULL, wall_time = NULL WHERE run_id = ?"
                    ),
                    (ev.goal, ev.plan_id, ev.plan_version, ev.content_hash, len(ev.step_ids), RunStatus.RUNNING.value, run_id),
                )
            elif kind == "run_resumed":  # a stopped run goes on: it is running again until its next RunFinished
                cur.execute(
                    self.db.q("UPDATE runs SET status = ?, finished_at = NULL, wall_time = NULL, reason = NULL WHERE run_id = ?"),
                    (RunStatus.RUNNING.value, run_id),
                )
                self._resumed_version(cur, run_id, ev.plan_version)
            elif kind == "plan_revised":
                cur.execute(
                    self.db.q("UPDATE runs SET plan_version = ?, content_hash = ?, step_count = ? WHERE run_id = ?"),
                    (ev.version, ev.content_hash, len(ev.step_ids), run_id),
                )
                plan = ev.plan.model_copy(update={"version": ev.version})
                self.insert_plan(cur, run_id, plan, ev.reason, ev.diff.to_json(), ev.usage, ev.at, chain)
            elif kind == "plan_completed":
                cur.execute(
                    self.db.q("UPDATE runs SET content_hash = ?, step_count = ? WHERE run_id = ?"),
                    (ev.content_hash, len(ev.step_ids), run_id),
                )
            elif kind == "run_finished":
                finished = True
                cur.execute(
                    self.db.q("UPDATE runs SET status = ?, finished_at = ?, wall_time = ?, usage = ?, reason = ? WHERE run_id = ?"),
                    (ev.status.value, timestamp(ev.at), ev.wall_time, ev.usage.model_dump_json(), ev.reason, run_id),
                )
        if not finished and not used.is_zero():  # so far: the total arrives with RunFinished
            row = self.db.one(cur, "SELECT usage FROM runs WHERE run_id = ?", (run_id,))
            total = Usage.model_validate_json(row[0]) + used
            cur.execute(self.db.q("UPDATE runs SET usage = ? WHERE run_id = ?"), (total.model_dump_json(), run_id))

    def _resumed_version(self, cur: Any, run_id: str, version: int) -> None:
        """A run resumed on a stored version its row does not name (a person's edit of a queued run's plan): the row names it."""
        row = self.db.one(cur, "SELECT r.plan_version, p.plan FROM runs r JOIN plans p ON p.run_id = r.run_id AND p.version = ? WHERE r.run_id = ?",
                        (version, run_id))  # fmt: skip
        if row is not None and row[0] != version:
            plan = Plan.from_json(row[1])
            cur.execute(
                self.db.q("UPDATE runs SET plan_version = ?, content_hash = ?, step_count = ? WHERE run_id = ?"),
                (version, plan.content_hash, len(plan.steps), run_id),
            )

    def events(self, run_id: str, after_seq: int = -1, limit: int | None = None) -> list[Any]:
        """The run's events after `after_seq`, in order, at most `limit`; `RunNotFoundError` for an unknown run."""
        sql = "SELECT body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq"
        params: tuple[Any, ...] = (run_id, after_seq)
        if limit is not None:
            sql += " LIMIT ?"
            params += (max(0, int(limit)),)
        with self.db.tx(write=False) as cur:
            self.db.require_run(cur, run_id)
            rows = self.db.all(cur, sql, params)
        return [parse_event(body) for (body,) in rows]

    def last_seq(self, run_id: str) -> int:
        """The seq of the run's last stored event; -1 when there is none."""
        with self.db.tx(write=False) as cur:
            row = self.db.one(cur, "SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,))
        return -1 if row[0] is None else int(row[0])

    # --- runs and plans ----------------------------------------------------------

    def runs(self, *, limit: int | None = 50, status: RunStatus | str | None = None) -> list[RunSummary]:
        """Runs, newest first (only those with `status`, when given), at most `limit`."""
        sql = f"SELECT {_RUN_COLUMNS} FROM runs"
        params: tuple[Any, ...] = ()
        if status is not None:
            sql += " WHERE status = ?"
            params += (RunStatus(status).value,)
        sql += " ORDER BY started_at DESC, run_id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params += (max(0, int(limit)),)
        with self.db.tx(write=False) as cur:
            rows = self.db.all(cur, sql, params)
            leases = self.leases.leases_of(cur, [row[0] for row in rows if row[2] == RunStatus.RUNNING.value])
            made = self.made(cur, [row[0] for row in rows])
        return [_summary(row, leases.get(row[0]), made[row[0]]) for row in rows]

    def run(self, run_id: str) -> RunSummary:
        """The run's summary; `RunNotFoundError` naming the id when there is none."""
        with self.db.tx(write=False) as cur:
            row = self.db.one(cur, f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
            if row is None:
                raise RunNotFoundError(run_id, location=self.db.location)
            leases = self.leases.leases_of(cur, [run_id] if row[2] == RunStatus.RUNNING.value else [])
            made = self.made(cur, [run_id])
        return _summary(row, leases.get(run_id), made[run_id])

    def mismatches(self, cur: Any, rows: Sequence[Any]) -> dict[str, list[str]]:
        """What each ``runs`` row (as `_RUN_COLUMNS` reads it) says that its run's events do not, by run id (none: absent)."""
        made = self.made(cur, [row[0] for row in rows])
        found = {row[0]: _disagree(row, made[row[0]]) for row in rows}
        return {run_id: lines for run_id, lines in found.items() if lines}

    def made(self, cur: Any, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Each run's goal, status and reason as its events make them, by run id.

        The ``runs`` row is a summary made from the events (`_update_snapshot`):
        made again here from the events that set them (an index finds them),
        a row changed in the database is told apart from the chained events
        it stands for.
        """
        made: dict[str, dict[str, Any]] = {run_id: {"goal": "", "status": RunStatus.RUNNING.value, "reason": None} for run_id in run_ids}
        ids = list(made)
        kinds = ", ".join(f"'{kind}'" for kind in STATE_EVENTS)  # written as the index's condition is, so it is used
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            sql = f"SELECT run_id, body FROM events WHERE run_id IN ({marks}) AND type IN ({kinds}) ORDER BY run_id, seq"
            for run_id, body in self.db.all(cur, sql, chunk):
                _made_by(made[run_id], body)
        return made

    def save_plan(self, run_id: str, plan: Plan, *, reason: str = "the first plan") -> None:
        """Store a version of the run's plan (normally the first, before its `RunStarted`); the same again is a no-op."""
        with self.db.tx(write=True) as cur:
            chain = self.db.chain(cur, run_id)
            self.insert_plan(cur, run_id, plan, reason, None, Usage(), datetime.now(UTC), chain)
            self.db.save_chain(cur, chain)

    def insert_plan(
        self, cur: Any, run_id: str, plan: Plan, reason: str, diff: str | None, usage: Usage, at: datetime, chain: Chain
    ) -> None:
        text = _plan_text(plan)
        row = self.db.one(cur, "SELECT plan FROM plans WHERE run_id = ? AND version = ?", (run_id, plan.version))
        if row is not None:
            if json.loads(row[0]) != json.loads(text):
                raise StoreError(
                    f"run {run_id!r} already has a different plan version {plan.version} in {self.db.location}", location=self.db.location
                )
            return
        reason = redact(reason)
        diff = None if diff is None else canonical(redact(json.loads(diff)))
        columns = (text, reason, diff, usage.model_dump_json(), timestamp(at))
        cur.execute(
            self.db.q(
                "INSERT INTO plans (run_id, version, plan, reason, diff, usage, created_at, link, prev_hash, hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (run_id, plan.version, *columns, *chain.add("plan", plan.version, plan_content(*columns))),
        )

    def plan_versions(self, run_id: str) -> list[PlanVersion]:
        """Every stored version of the run's plan, the first first; `RunNotFoundError` for an unknown run."""
        with self.db.tx(write=False) as cur:
            rows = self.db.all(cur, "SELECT version, plan, reason, diff, usage FROM plans WHERE run_id = ? ORDER BY version", (run_id,))
            if not rows:
                self.db.require_run(cur, run_id)
        return [
            PlanVersion(
                version=int(version),
                plan=Plan.from_json(plan),
                reason=reason,
                diff=PlanDiff.from_json(diff) if diff else None,
                usage=Usage.model_validate_json(usage),
            )
            for version, plan, reason, diff, usage in rows
        ]

    # --- the audit log -------------------------------------------------------------

    def audit_trail(self, run_id: str) -> AuditTrail:
        """The run's head and every record with its chain columns, read as stored (see `audit.verify_run`)."""
        with self.db.tx(write=False) as cur:
            return self.trail(cur, run_id)

    def require_intact(self, run_id: str) -> AuditReport:
        """The run's audit report when every record matches its chain; `TamperedError` naming what changed when not."""
        with self.db.tx(write=False) as cur:
            return self.intact(cur, run_id)

    def intact(self, cur: Any, run_id: str) -> AuditReport:
        """`require_intact` inside the caller's transaction (a decision is refused in the one that would write it)."""
        report = verify_trail(self.trail(cur, run_id))
        if not report.ok:
            raise tampered_run(report, self.db.location)
        return report

    def trail(self, cur: Any, run_id: str) -> AuditTrail:
        """`audit_trail` inside the caller's transaction."""
        r = self.db.raw
        head = self.db.one(cur, "SELECT link, seq, hash FROM audit_heads WHERE run_id = ?", (run_id,))
        if head is None:
            self.db.require_run(cur, run_id)
        events = self.db.all(
            cur, f"SELECT seq, {r('type')}, {r('body')}, link, prev_hash, hash FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        plans = self.db.all(
            cur,
            f"SELECT version, {r('plan')}, {r('reason')}, {r('diff')}, {r('usage')}, {r('created_at')}, link, prev_hash, hash "
            "FROM plans WHERE run_id = ? ORDER BY version",
            (run_id,),
        )
        approvals = self.db.all(
            cur,
            f"SELECT {r('step_id')}, {r('content_hash')}, {r('requested_at')}, link, prev_hash, hash, {r('state')}, "
            f"{r('decided_at')}, {r('decided_by')}, {r('reason')}, decision_link, decision_prev_hash, decision_hash "
            "FROM approvals WHERE run_id = ? ORDER BY approval_id",
            (run_id,),
        )
        row = self.db.one(cur, f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        records = [
            ChainRecord(table="event", kind=_text(kind), ref=_key(seq), content=_text(body), **_chained(link, prev, digest))
            for seq, kind, body, link, prev, digest in events
        ]
        for version, plan, reason, diff, usage, created, link, prev, digest in plans:
            content = plan_content(_text(plan), _text(reason), _maybe_text(diff), _text(usage), _text(created))
            records.append(ChainRecord(table="plan", kind="plan", ref=_key(version), content=content, **_chained(link, prev, digest)))
        for step, content_hash, requested, link, prev, digest, state, decided, by, reason, d_link, d_prev, d_hash in approvals:
            ref = approval_ref(_text(step), _text(content_hash))
            content = request_content(_text(step), _text(content_hash), _text(requested))
            records.append(
                ChainRecord(table="approval_request", kind="approval_request", ref=ref, content=content, **_chained(link, prev, digest))
            )
            if _text(state) != "pending" or d_hash is not None:
                content = decision_content(_text(state), _maybe_text(decided), _maybe_text(by), _maybe_text(reason))
                chained = _chained(d_link, d_prev, d_hash)
                records.append(ChainRecord(table="approval_decision", kind="approval_decision", ref=ref, content=content, **chained))
        chain_head = None if head is None else ChainHead(link=_int(head[0]), seq=_int(head[1]), hash=_maybe_text(head[2]))
        # when its first records were written, by the latest of its own words for it: one edit cannot make it look old
        times = [_when(row[7]) if row else None, _when(plans[0][5]) if plans else None]
        times.append(_event_time(events[0][2]) if events else None)
        known = [t for t in times if t is not None]
        return AuditTrail(
            run_id=run_id, head=chain_head, records=records, recorded_at=max(known) if known else None,
            audit_since=audit_since(self.db, cur), summary=self.mismatches(cur, [row]).get(run_id, []) if row else [],
        )  # fmt: skip


def audit_since(db: Database, cur: Any) -> datetime | None:
    """When the store's audit log began: ``planexec_meta``'s word for it, else the time migration 3 was applied."""
    row = db.one(cur, "SELECT value FROM planexec_meta WHERE key = ?", (AUDIT_SINCE,))
    if row is None:
        row = db.one(cur, "SELECT applied_at FROM schema_migrations WHERE version = 3")
    return _when(row[0]) if row is not None else None


def _when(value: Any) -> datetime | None:
    """A stored time as an aware datetime; None when the column holds something else."""
    try:
        at = datetime.fromisoformat(_text(value))
    except (TypeError, ValueError):
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _event_time(body: Any) -> datetime | None:
    """The time an event's stored JSON says it happened; None when it does not say."""
    try:
        data = json.loads(_text(body))
    except ValueError:
        return None
    return _when(data.get("at")) if isinstance(data, dict) else None


def _plan_text(plan: Plan) -> str:
    """A plan version as the store keeps it: its own compact JSON, read back and written canonically (redacted)
    only when a secret may be in it (one substring search instead of a walk over a 10,000-step plan)."""
    text = plan.model_dump_json(by_alias=True)
    if not secrets.may_be_in(text):
        return text
    return canonical(redact(json.loads(text)))


def _stored_all(evs: list[Any], seq: int) -> tuple[list[Any], list[str], bool] | None:
    """The store's hot path, one pass over a batch numbered on from `seq` without a gap: each event as stored
    (`_stored`), its JSON, and whether any changes the run's row (`_changes_run`); None for any other batch
    (`SqlRunStore._sort_out` takes it)."""
    redacting = bool(secrets)  # no secret known: no event needs a look
    stored: list[Any] = []
    bodies: list[str] = []
    changes = False
    encoders: dict[type[Any], Callable[[Any], bytes]] = {}
    for ev in evs:
        if ev.seq != seq:
            return None
        seq += 1
        cls = type(ev)
        encode = encoders.get(cls)
        if encode is None:
            encode = encoders[cls] = json_encoder(cls)
        body = encode(ev).decode()  # `ev.to_json()`, without a call a record
        if redacting and secrets.may_be_in(body):
            ev, body = _stored(ev)
        stored.append(ev)
        bodies.append(body)
        if not changes:
            changes = _changes_run(ev)
    return stored, bodies, changes


def _changes_run(ev: Any) -> bool:
    """Whether the event changes the run's row (`SqlRunStore._update_snapshot`)."""
    kind = ev.type
    return kind in _SNAPSHOT_EVENTS or (kind in _USAGE_EVENTS and not ev.usage.is_zero())


def _stored(ev: Any) -> tuple[Any, str]:
    """The event as the store keeps it, redacted, and its JSON: the compact text the record's own encoder writes
    (fields in their declared order), which is the text stored and hashed; redacted when it holds a secret."""
    body = ev.to_json()
    if not secrets.may_be_in(body):  # one substring search over the text instead of a walk over the data
        return ev, body
    data = json.loads(body)
    hidden = redact(data)
    if hidden == data:
        return ev, body
    body = canonical(hidden)
    return parse_event(body), body


def _text(value: Any) -> str:
    """A column read by `_raw`: text as it is, bytes decoded so that encoding them again gives the same bytes."""
    if isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", "surrogateescape")


def _maybe_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _int(value: Any) -> int | None:
    """An integer column as stored; None when it holds something else (SQLite keeps whatever was written)."""
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _key(value: Any) -> int | str:
    """A record's key (seq, version): the number, or the text it holds instead (which then does not verify)."""
    number = _int(value)
    return number if number is not None else str(value)


def _chained(link: Any, prev: Any, digest: Any) -> dict[str, Any]:
    """A record's chain columns as the verifier reads them."""
    return {"link": _int(link), "prev_hash": _maybe_text(prev), "hash": _maybe_text(digest)}


def _made_by(summary: dict[str, Any], body: str) -> None:
    """Apply one of `STATE_EVENTS` (its stored JSON) to the goal, status and reason it sets, as `_update_snapshot` does."""
    try:
        ev = json.loads(body)
    except ValueError:
        return
    kind = ev.get("type") if isinstance(ev, dict) else None
    if kind == "run_started":
        summary.update(goal=ev.get("goal", ""), status=RunStatus.RUNNING.value)
    elif kind == "run_resumed":
        summary.update(status=RunStatus.RUNNING.value, reason=None)
    elif kind == "run_finished":
        summary.update(status=ev.get("status"), reason=ev.get("reason"))


def _disagree(row: Sequence[Any], made: dict[str, Any]) -> list[str]:
    """What a ``runs`` row says that its events (`made`) do not, one line each."""
    says = {"goal": row[1], "status": row[2], "reason": row[11]}
    return [f"its runs row says {name} {says[name]!r}, its events say {value!r}" for name, value in made.items() if says[name] != value]


def _status(*values: Any) -> RunStatus:
    """The first of `values` that is a status (a changed row may hold anything)."""
    for value in values:
        try:
            return RunStatus(value)
        except ValueError:
            continue
    return RunStatus.FAILED


def _summary(row: Sequence[Any], lease: Lease | None = None, made: dict[str, Any] | None = None) -> RunSummary:
    (run_id, goal, status, plan_id, version, content_hash, steps, started, finished, wall, usage, reason, parent_run, parent_step) = row
    return RunSummary(
        run_id=run_id,
        goal=goal,
        status=_status(status, (made or {}).get("status")),
        plan_id=plan_id,
        plan_version=int(version),
        content_hash=content_hash,
        step_count=int(steps),
        started_at=from_timestamp(started),  # type: ignore[arg-type]  # the column is NOT NULL
        finished_at=from_timestamp(finished),
        wall_time=None if wall is None else float(wall),
        usage=Usage.model_validate_json(usage),
        reason=reason,
        parent_run_id=parent_run,
        parent_step_id=parent_step,
        lease=lease,
        mismatch=_disagree(row, made) if made is not None else [],
    )
