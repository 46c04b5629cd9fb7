"""The run queue: runs submitted to the store without being run, and how a worker of a fleet claims one.

Owns `QueueState`, `QueuedRun` (a row of ``run_queue``: the run, its
state, what it needs to run, who took it), `Claim` (a run a worker took,
with its lease), `QueueStore` (the protocol of a store with a queue) and
`RunQueue`, the store's queue over its `database.Database`, its event log,
its approvals and its leases: `enqueue`, `claim_run`, `settle_queued`,
`queued_run` and `queued_runs` (and, inside an approval's transaction,
`refuse_denied` and `follow_edit`).

A queued run is stored as the engine would leave a run stopped before its
first step: `enqueue` writes, in one transaction, its first plan version
and its `RunStarted` (with the setup it runs with: the tools modules,
which ``planexec resume`` reads too) and `RunFinished` (``waiting``,
reason `QUEUED_REASON`), both in the run's audit chain, and its queue row
(whether the submitter approved the steps that require approval, who
submitted it). So ``planexec runs``, ``show`` and ``approve`` know it as
any run, in the state ``waiting``, and a worker goes on with it through
`Engine.resume`, as with any stopped run. Approving the plan is the
submitter's (see `fleet.worker.submit_plan`): the version's approval
request is kept with the run's other approvals, and ``planexec approve
RUN_ID`` decides it. A person who denies it ends the run at once
(``cancelled``, ``refused: its plan was denied by NAME``, a `RunFinished`
in its chain); a person who answers it with an edit (`Approvals.edit_plan`)
leaves the run waiting for the edit's approval instead (`follow_edit`).

`claim_run` takes, in one write transaction, the oldest run (by
submission) that is either ``queued`` with its plan version decided (and,
for a run its worker stopped as ``scheduled``, its ``due_at`` passed), or
``taken`` by a worker that is gone (its lease expired, or its process of
this machine no longer runs), and takes the run's lease for this process
in the same transaction, so a run is never claimed without its lease nor
leased without its claim. On PostgreSQL the candidate rows are read with
``FOR UPDATE OF q SKIP LOCKED``: workers claiming at once take different
runs without waiting for each other. On SQLite the write transaction
(``BEGIN IMMEDIATE``) makes claims take turns: one machine. A run whose
plan version was denied is ``refused`` and never taken (a worker never
runs a plan nobody approved); a run found finished is ``done``; a run left
``taken`` by workers that stopped without handing it back more than
`max_takeovers` times is ``refused`` (a run that kills its worker does not
go round the fleet for ever; a lease given back, not expired, is no
takeover). `Claim.fresh` says nothing of the run ran yet. `settle_queued`
records how the worker left it: ``done``, ``refused``, or ``queued`` again
(a released run: the next claim resumes it at once), only while the
worker's lease token still names it. Times are the database's clock, as
the leases'. Imports `errors`, `records`, `plan`, `usage`, the engine's
event and result records and the store's `approvals`, `database`,
`leases` and `log`; never the engine's
running parts.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from planexec.engine.events import PlanDrafted, RunFinished, RunStarted
from planexec.engine.results import RunStatus
from planexec.errors import LeaseHeldError, RunNotFoundError, StoreError
from planexec.plan.model import Plan
from planexec.records import Record
from planexec.store.approvals import ApprovalBook
from planexec.store.database import Database
from planexec.store.leases import Holder, Lease, LeaseBook
from planexec.store.log import EventLog
from planexec.usage import Usage

__all__ = ["QUEUED_REASON", "Claim", "QueueState", "QueueStore", "QueuedRun", "RunQueue"]

QUEUED_REASON = "waiting: not started; it runs once its plan is approved and a worker takes it (planexec queue)"
MAX_TAKEOVERS = 3  # a run left behind by this many workers in a row is refused (see the module docstring)

_COLUMNS = (
    "q.run_id, q.state, q.content_hash, q.setup, q.approve_steps, q.submitted_by, q.submitted_at, q.owner, q.taken_by, "
    "q.taken_at, q.claims, q.takeovers, q.ended_at, q.reason, q.due_at"
)
_WIDTH = 15  # the columns above
_APPROVAL = "(SELECT a.state FROM approvals a WHERE a.run_id = q.run_id AND a.step_id = '' AND a.content_hash = q.content_hash)"
# the candidates of a claim: a queued run whose plan version was decided, or a run its worker left behind; oldest first
_CANDIDATES = (
    f"SELECT {_COLUMNS}, {_APPROVAL}, r.status, r.reason"
    " FROM run_queue q LEFT JOIN leases l ON l.run_id = q.run_id LEFT JOIN runs r ON r.run_id = q.run_id"
    f" WHERE (q.state = 'taken' OR (q.state = 'queued' AND {_APPROVAL} IN ('approved', 'denied') AND (q.due_at IS NULL OR q.due_at <= ?)))"
    " AND (l.run_id IS NULL OR l.expires_at < ?{gone})"
    " ORDER BY q.submitted_at, q.run_id LIMIT ?{lock}"
)
_SKIP_LOCKED = {"sqlite": "", "postgres": " FOR UPDATE OF q SKIP LOCKED"}
_SCAN = 16  # candidate rows read per claim (a few may turn out to be done, refused or taken meanwhile)
# how a run it takes may stand
_GOING_ON = (RunStatus.RUNNING.value, RunStatus.CANCELLED.value, RunStatus.WAITING.value, RunStatus.SCHEDULED.value)


class QueueState(str, Enum):
    """Where a queued run is: waiting, taken by a worker, done (its status is the run's), or refused (never run, or no more)."""

    QUEUED = "queued"
    TAKEN = "taken"
    DONE = "done"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedRun(Record):
    """A run in the queue: its state, the plan version to approve, the setup it runs with, who submitted and who took it.

    `approval` is the state of its plan version's approval (``approved``,
    ``pending``, ``denied``, or ``none`` when none was asked for);
    `approve_steps` says the submitter approved the steps that require
    approval (``--yes``). `claims` counts the workers that took it and
    `takeovers` those that took it from a worker that was gone. A taken
    run carries the `lease` of its worker (`Lease.live` says whether that
    worker still runs it). `due`: a queued run stopped as scheduled is not
    taken before then.
    """

    run_id: str
    state: QueueState
    content_hash: str
    setup: dict[str, Any] = field(default_factory=dict)
    approve_steps: bool = False
    submitted_by: str = ""
    submitted_at: datetime
    approval: str = "none"
    taken_by: str | None = None
    taken_at: datetime | None = None
    claims: int = 0
    takeovers: int = 0
    ended_at: datetime | None = None
    reason: str | None = None
    due: datetime | None = None
    lease: Lease | None = None

    @property
    def tools(self) -> list[str]:
        """The tools modules it runs with (its setup's)."""
        return [str(t) for t in self.setup.get("tools", [])]


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim(Record):
    """A run a worker took: the queue row as taken, whether it `fresh`ly starts (else it resumes), and the lease token it holds."""

    run: QueuedRun
    fresh: bool
    owner: str
    takeover: bool = False

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run.run_id


class RunQueue:
    """The run queue of a store (see the module docstring), over its `database.Database`: queued runs are written into
    its event log (`log`), their plan's approval kept in its `approvals`, and a claim takes the run's lease (`leases`)."""

    def __init__(self, db: Database, log: EventLog, approvals: ApprovalBook, leases: LeaseBook) -> None:
        self.db = db
        self.log = log
        self.approvals = approvals
        self.leases = leases

    def enqueue(
        self,
        run_id: str,
        plan: Plan,
        *,
        setup: Mapping[str, Any] | None = None,
        submitted_by: str = "",
        approve_steps: bool = False,
        drafts: Iterable[Mapping[str, Any]] = (),
        decided: tuple[bool, str, str | None] | None = None,
    ) -> QueuedRun:
        """Store `plan` as the run `run_id`, queued (see the module docstring); `StoreError` when the store has that run already.

        `drafts` are the planner's drafts that wrote it (`PlanDrafted`'s fields
        but the run's): they are the run's first events, and their usage its
        usage. The plan version's approval is asked for in the same
        transaction, so no process ever sees the run without it: pending, or
        decided when `decided` (approved, by whom, why) says so; a denial
        refuses the run at once.
        """
        setup = dict(setup or {})
        at = datetime.now(UTC)
        # the run as the engine would leave it, stopped before its first step: `Engine.resume` goes on from there
        events: list[Any] = [
            RunStarted(
                run_id=run_id, seq=0, at=at, plan_id=plan.plan_id, plan_version=plan.version, content_hash=plan.content_hash,
                goal=plan.goal, step_ids=plan.step_ids, setup=setup,
            )
        ]  # fmt: skip
        spent = Usage()
        for draft in drafts:
            events.append(PlanDrafted(run_id=run_id, seq=len(events), at=at, **draft))
            spent = spent + draft["usage"]
        events.append(
            RunFinished(run_id=run_id, seq=len(events), at=at, status=RunStatus.WAITING, reason=QUEUED_REASON, wall_time=0.0, usage=spent)
        )
        with self.db.tx(write=True) as cur:
            taken = self.db.one(
                cur, "SELECT 1 FROM runs WHERE run_id = ? UNION SELECT 1 FROM audit_heads WHERE run_id = ?", (run_id, run_id)
            )
            if taken is not None:
                raise StoreError(f"run {run_id!r} is already in {self.db.location}: choose another run id", location=self.db.location)
            chain = self.db.chain(cur, run_id)
            self.log.insert_plan(cur, run_id, plan, "the first plan", None, Usage(), at, chain)
            self.db.save_chain(cur, chain)
            self.log.append_run(cur, run_id, events, None)
            cur.execute(
                self.db.q(
                    "INSERT INTO run_queue (run_id, state, content_hash, setup, approve_steps, submitted_by, submitted_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                (run_id, QueueState.QUEUED.value, plan.content_hash, json.dumps(setup, ensure_ascii=False, sort_keys=True),
                 int(approve_steps), submitted_by, self.db.now(cur)),
            )  # fmt: skip
            if decided is None:
                self.approvals.ask(cur, run_id, plan.content_hash)
            else:
                approved, by, why = decided
                self.approvals.ask(cur, run_id, plan.content_hash, approved=approved, by=by, reason=why)
                if not approved:
                    self.refuse_denied(cur, run_id, plan.content_hash, f"its plan was denied by {by}" + (f": {why}" if why else ""))
        return self.queued_run(run_id)

    def queued_run(self, run_id: str) -> QueuedRun:
        """The run's queue row; `RunNotFoundError` when it was never queued."""
        with self.db.tx(write=False) as cur:
            row = self.db.one(cur, f"SELECT {_COLUMNS}, {_APPROVAL} FROM run_queue q WHERE q.run_id = ?", (run_id,))
            if row is None:
                raise RunNotFoundError(run_id, location=self.db.location)
            leases = self.leases.leases_of(cur, [run_id])
        return _queued(row, leases.get(run_id))

    def queued_runs(self, states: Iterable[QueueState | str] | None = None, *, limit: int | None = 100) -> list[QueuedRun]:
        """Queued runs, oldest first: those in `states` (default: waiting and taken), at most `limit`."""
        wanted = [QueueState(s).value for s in (states if states is not None else (QueueState.QUEUED, QueueState.TAKEN))]
        if not wanted:
            return []
        sql = f"SELECT {_COLUMNS}, {_APPROVAL} FROM run_queue q WHERE q.state IN ({', '.join('?' * len(wanted))})"
        sql += " ORDER BY q.submitted_at, q.run_id"
        params: list[Any] = list(wanted)
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, int(limit)))
        with self.db.tx(write=False) as cur:
            rows = self.db.all(cur, sql, params)
            leases = self.leases.leases_of(cur, [row[0] for row in rows if row[1] == QueueState.TAKEN.value])
        return [_queued(row, leases.get(row[0])) for row in rows]

    def claim_run(self, *, max_takeovers: int = MAX_TAKEOVERS) -> Claim | None:
        """Take the next run for this process, with its lease kept renewed until `let_go`; None when none can be taken now.

        See the module docstring for which run, and what is settled on the
        way (a denied plan refused, a finished run done).
        """
        holder = Holder.me()
        claim: Claim | None = None
        with self.db.tx(write=True) as cur:
            now = self.db.now(cur)
            gone = self._gone_here(cur, holder, now)
            sql = _CANDIDATES.format(
                gone=f" OR q.run_id IN ({', '.join('?' * len(gone))})" if gone else "", lock=_SKIP_LOCKED[self.db.dialect]
            )
            rows = self.db.all(cur, sql, (now, now, *gone, _SCAN))
            leases = self.leases.leases_of(cur, [row[0] for row in rows])
            for row in rows:
                claim = self._claim_one(cur, row, leases.get(row[0]), holder, now, max_takeovers)
                if claim is not None:
                    break
        if claim is not None:
            self.leases.keep(claim.run_id, holder)
        return claim

    def _claim_one(self, cur: Any, row: Any, lease: Lease | None, holder: Holder, now: float, max_takeovers: int) -> Claim | None:
        """Inside the claim's transaction: take this candidate, or settle it (refused, done) and return None."""
        queued = _queued(row[: _WIDTH + 1], lease)
        status, fresh = row[_WIDTH + 1], row[_WIDTH + 1] == RunStatus.WAITING.value
        if lease is not None and lease.live:  # taken meanwhile (a person's planexec resume)
            return None
        if queued.state is QueueState.QUEUED and queued.approval == "denied":
            self._settle(cur, queued.run_id, QueueState.REFUSED, self._denial(cur, queued), now)
            return None
        if status not in _GOING_ON:  # it ended (its worker stopped before saying so, or a person resumed it)
            self._settle(cur, queued.run_id, QueueState.DONE, f"the run ended {status}", now)
            return None
        # taken from a worker that is gone (its lease expired, or its process here ended); a lease given back is not
        takeover = queued.state is QueueState.TAKEN and lease is not None
        if takeover and queued.takeovers >= max_takeovers:
            why = f"taken over {queued.takeovers} times, its workers stopped each time: resume it by hand (planexec resume {queued.run_id})"
            self._settle(cur, queued.run_id, QueueState.REFUSED, why, now)
            return None
        try:
            self.leases.take(cur, queued.run_id, holder, self.leases.lease_ttl)
        except LeaseHeldError:  # a process took its lease just now: it is not ours to run
            return None
        taken_by = f"process {holder.pid} on {holder.host}"
        cur.execute(
            self.db.q(
                "UPDATE run_queue SET state = ?, owner = ?, taken_by = ?, taken_at = ?, claims = claims + 1, takeovers = takeovers + ?,"
                " reason = NULL, due_at = NULL WHERE run_id = ?"
            ),
            (QueueState.TAKEN.value, holder.owner, taken_by, now, int(takeover), queued.run_id),
        )
        taken = dataclasses.replace(
            queued,
            state=QueueState.TAKEN,
            taken_by=taken_by,
            taken_at=_time(now),
            claims=queued.claims + 1,
            takeovers=queued.takeovers + int(takeover),
            reason=None,
            due=None,
            lease=None,
        )
        return Claim(run=taken, fresh=fresh, owner=holder.owner, takeover=takeover)

    def _gone_here(self, cur: Any, holder: Holder, now: float) -> list[str]:
        """The runs leased, unexpired, to processes of this machine that are gone: taken over at once, as `planexec resume` would."""
        if not holder.machine:
            return []
        rows = self.db.all(cur, "SELECT run_id FROM leases WHERE machine = ? AND expires_at >= ?", (holder.machine, now))
        leases = self.leases.leases_of(cur, [run_id for (run_id,) in rows])
        return sorted(run_id for run_id, lease in leases.items() if not lease.live)

    def _denial(self, cur: Any, queued: QueuedRun) -> str:
        row = self.db.one(
            cur,
            "SELECT decided_by, reason FROM approvals WHERE run_id = ? AND step_id = '' AND content_hash = ?",
            (queued.run_id, queued.content_hash),
        )
        by, why = (row[0], row[1]) if row is not None else (None, None)
        return "its plan was denied" + (f" by {by}" if by else "") + (f": {why}" if why else "")

    def settle_queued(
        self, run_id: str, owner: str, state: QueueState | str, reason: str | None = None, *, due: datetime | None = None
    ) -> bool:
        """Record how the worker holding lease token `owner` left the run: done, refused, or queued again (claimable at
        `due`, when given: a run stopped as scheduled; else at once); False when it no longer holds it."""
        state = QueueState(state)
        with self.db.tx(write=True) as cur:
            row = self.db.one(cur, "SELECT state, owner FROM run_queue WHERE run_id = ?" + self.db.for_update, (run_id,))
            if row is None or row[0] != QueueState.TAKEN.value or row[1] != owner:
                return False
            self._settle(cur, run_id, state, reason, self.db.now(cur), due=due)
        return True

    def _settle(self, cur: Any, run_id: str, state: QueueState, reason: str | None, now: float, *, due: datetime | None = None) -> None:
        if state is QueueState.QUEUED:  # handed back: claimable at once, or when due
            cur.execute(
                self.db.q("UPDATE run_queue SET state = ?, owner = NULL, reason = ?, due_at = ? WHERE run_id = ?"),
                (state.value, reason, due.timestamp() if due is not None else None, run_id),
            )
            return
        cur.execute(
            self.db.q("UPDATE run_queue SET state = ?, ended_at = ?, reason = ? WHERE run_id = ?"), (state.value, now, reason, run_id)
        )
        if state is QueueState.REFUSED:  # a run that never started ends, and says why
            self._end_waiting(cur, run_id, f"refused: {reason}")

    def _end_waiting(self, cur: Any, run_id: str, reason: str) -> None:
        """Inside a write transaction: end a run that is still waiting (never started) as ``cancelled`` with `reason`."""
        row = self.db.one(cur, "SELECT status FROM runs WHERE run_id = ?", (run_id,))
        if row is None or row[0] != RunStatus.WAITING.value:
            return
        chain = self.db.chain(cur, run_id)
        ended = RunFinished(
            run_id=run_id, seq=chain.seq + 1, at=datetime.now(UTC), status=RunStatus.CANCELLED, reason=reason, wall_time=0.0, usage=Usage()
        )
        self.log.append_run(cur, run_id, [ended], None)

    def refuse_denied(self, cur: Any, run_id: str, content_hash: str, denial: str) -> None:
        """Inside the transaction that denied a plan version: a queued run waiting for that version is refused at once."""
        row = self.db.one(cur, "SELECT state, content_hash FROM run_queue WHERE run_id = ?" + self.db.for_update, (run_id,))
        if row is not None and row[0] == QueueState.QUEUED.value and row[1] == content_hash:
            self._settle(cur, run_id, QueueState.REFUSED, denial, self.db.now(cur))

    def follow_edit(self, cur: Any, run_id: str, old_hash: str, plan: Plan) -> None:
        """Inside the transaction that stored a person's edit of `old_hash`: a queued run now waits for the edit's approval."""
        row = self.db.one(cur, "SELECT state, content_hash FROM run_queue WHERE run_id = ?" + self.db.for_update, (run_id,))
        if row is None or row[0] != QueueState.QUEUED.value or row[1] != old_hash:
            return
        cur.execute(self.db.q("UPDATE run_queue SET content_hash = ? WHERE run_id = ?"), (plan.content_hash, run_id))
        self.approvals.ask(cur, run_id, plan.content_hash)


@runtime_checkable
class QueueStore(Protocol):
    """A store with a run queue (the SQL stores): what `planexec submit`, `planexec worker` and the faces' workers use."""

    location: str

    def enqueue(
        self,
        run_id: str,
        plan: Plan,
        *,
        setup: Mapping[str, Any] | None = None,
        submitted_by: str = "",
        approve_steps: bool = False,
        drafts: Iterable[Mapping[str, Any]] = (),
        decided: tuple[bool, str, str | None] | None = None,
    ) -> QueuedRun:
        """Store `plan` as the run `run_id`, queued, with its plan version's approval asked for (or decided)."""
        ...

    def queued_run(self, run_id: str) -> QueuedRun:
        """The run's queue row."""
        ...

    def queued_runs(self, states: Iterable[QueueState | str] | None = None, *, limit: int | None = 100) -> list[QueuedRun]:
        """Queued runs, oldest first."""
        ...

    def claim_run(self, *, max_takeovers: int = MAX_TAKEOVERS) -> Claim | None:
        """Take the next run for this process, with its lease."""
        ...

    def settle_queued(
        self, run_id: str, owner: str, state: QueueState | str, reason: str | None = None, *, due: datetime | None = None
    ) -> bool:
        """Record how the worker holding lease token `owner` left the run (queued again: claimable at `due`)."""
        ...


def _time(epoch: Any) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(float(epoch), UTC)


def _queued(row: Any, lease: Lease | None) -> QueuedRun:
    (
        run_id,
        state,
        content_hash,
        setup,
        approve_steps,
        by,
        submitted,
        _owner,
        taken_by,
        taken_at,
        claims,
        takeovers,
        ended,
        reason,
        due,
    ) = row[:_WIDTH]
    approval = row[_WIDTH] if len(row) > _WIDTH and row[_WIDTH] is not None else "none"
    return QueuedRun(
        run_id=run_id,
        state=QueueState(state),
        content_hash=content_hash,
        setup=json.loads(setup) if setup else {},
        approve_steps=bool(approve_steps),
        submitted_by=by,
        submitted_at=_time(submitted),  # type: ignore[arg-type]  # the column is NOT NULL
        approval=str(approval),
        taken_by=taken_by,
        taken_at=_time(taken_at),
        claims=int(claims),
        takeovers=int(takeovers),
        ended_at=_time(ended),
        reason=reason,
        due=_time(due),
        lease=lease if state == QueueState.TAKEN.value else None,
    )
