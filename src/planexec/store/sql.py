"""The run store in SQL, both backends': one database, and one part per capability, composed.

Owns `SqlRunStore`, the `RunStore` written once in plain SQL with ``?``
placeholders: a `database.Database` (the connection, its transactions,
dialect and clock) that a backend (`sqlite`, `postgres`) subclasses with
its connection, and the parts it is made of, each over that database and
each owning its tables: `log.EventLog` (events, snapshots, plan versions,
the audit trail), `approvals.ApprovalBook`, `templates.TemplateBook`,
`leases.LeaseBook` and `queue.RunQueue`. The store offers each part's
public methods as its own, so it is every protocol at once (`RunRecords`,
`ApprovalStore`, `TemplateStore`, `leases.Holds`, `queue.QueueStore`);
a caller that needs one capability types it by that protocol. Each public
write is one transaction, so a failed call changes nothing. Imports the
store's `base`, `audit`, `database`, `log`, `approvals`, `templates`,
`leases` and `queue`, and the records they return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Self

from planexec.engine.results import PlanVersion, RunStatus
from planexec.errors import LeaseLostError
from planexec.plan.model import Plan
from planexec.store.approvals import ApprovalBook
from planexec.store.audit import AuditReport, AuditTrail
from planexec.store.base import Approval, RunSummary, Template
from planexec.store.database import Database
from planexec.store.leases import Holder, Lease, LeaseBook
from planexec.store.log import EventLog
from planexec.store.queue import MAX_TAKEOVERS, Claim, QueuedRun, QueueState, RunQueue
from planexec.store.templates import TemplateBook

__all__ = ["SqlRunStore"]


class SqlRunStore(Database):
    """A `RunStore` in SQL, composed of its parts (see the module docstring); backends subclass it with a connection."""

    def __init__(self) -> None:
        super().__init__()
        self.lease_book = LeaseBook(self)
        self.log = EventLog(self, self.lease_book)
        self.approval_book = ApprovalBook(self, self.log)
        self.template_book = TemplateBook(self)
        self.queue = RunQueue(self, self.log, self.approval_book, self.lease_book)
        self.approval_book.queue = self.queue  # a denial or an edit of a queued run's plan moves its queue row

    @property
    def lease_ttl(self) -> float:
        """How long a lease outlives its holder's last heartbeat (see `leases.lease_ttl`)."""
        return self.lease_book.lease_ttl

    @lease_ttl.setter
    def lease_ttl(self, seconds: float) -> None:
        self.lease_book.lease_ttl = seconds

    def close(self) -> None:
        """Give up the runs this store holds, then release the connection; later calls raise `StoreError`."""
        if not self.closed:
            self.lease_book.stop_heartbeat()  # outside the lock: a heartbeat may be waiting on it
        self.close_database()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    # --- EventLog (log) ------------------------------------------------------------
    def append(self, events: Iterable[Any], *, parent: tuple[str, str] | None = None) -> int:
        """Store events and update the snapshots in one transaction; returns how many were new (see `RunStore.append`)."""
        return self.log.append(events, parent=parent)

    def events(self, run_id: str, after_seq: int = -1, limit: int | None = None) -> list[Any]:
        """The run's events after `after_seq`, in order, at most `limit`; `RunNotFoundError` for an unknown run."""
        return self.log.events(run_id, after_seq, limit)

    def last_seq(self, run_id: str) -> int:
        """The seq of the run's last stored event; -1 when there is none."""
        return self.log.last_seq(run_id)

    def runs(self, *, limit: int | None = 50, status: RunStatus | str | None = None) -> list[RunSummary]:
        """Runs, newest first (only those with `status`, when given), at most `limit`."""
        return self.log.runs(limit=limit, status=status)

    def run(self, run_id: str) -> RunSummary:
        """The run's summary; `RunNotFoundError` naming the id when there is none."""
        return self.log.run(run_id)

    def save_plan(self, run_id: str, plan: Plan, *, reason: str = "the first plan") -> None:
        """Store a version of the run's plan (normally the first, before its `RunStarted`); the same again is a no-op."""
        return self.log.save_plan(run_id, plan, reason=reason)

    def plan_versions(self, run_id: str) -> list[PlanVersion]:
        """Every stored version of the run's plan, the first first; `RunNotFoundError` for an unknown run."""
        return self.log.plan_versions(run_id)

    def audit_trail(self, run_id: str) -> AuditTrail:
        """The run's head and every record with its chain columns, read as stored (see `audit.verify_run`)."""
        return self.log.audit_trail(run_id)

    def require_intact(self, run_id: str) -> AuditReport:
        """The run's audit report when every record matches its chain; `TamperedError` naming what changed when not."""
        return self.log.require_intact(run_id)

    # --- ApprovalBook (approval_book) ------------------------------------------------------------
    def request_approval(
        self,
        run_id: str,
        content_hash: str,
        *,
        step_id: str | None = None,
        approved: bool | None = None,
        by: str | None = None,
        reason: str | None = None,
    ) -> Approval:
        """Ask for approval of the plan (`step_id` None) or a step; the same request again returns the stored one."""
        return self.approval_book.request_approval(run_id, content_hash, step_id=step_id, approved=approved, by=by, reason=reason)

    def decide_approval(
        self,
        run_id: str,
        *,
        step_id: str | None = None,
        approved: bool,
        by: str,
        reason: str | None = None,
        content_hash: str | None = None,
    ) -> Approval:
        """Approve or deny the pending request (the latest, or the one for `content_hash`); `ApprovalError` when none is pending."""
        return self.approval_book.decide_approval(
            run_id, step_id=step_id, approved=approved, by=by, reason=reason, content_hash=content_hash
        )

    def edit_plan(
        self, run_id: str, *, content_hash: str, plan: Plan, by: str, reason: str | None = None, approve: bool = False
    ) -> Approval:
        """Answer the pending plan version `content_hash` with the edit `plan` (its next version; approved too with `approve`); the denied request."""
        return self.approval_book.edit_plan(run_id, content_hash=content_hash, plan=plan, by=by, reason=reason, approve=approve)

    def approvals(self, run_id: str | None = None, *, pending_only: bool = False) -> list[Approval]:
        """Approval requests, oldest first, of one run or all; only the pending ones with `pending_only`."""
        return self.approval_book.approvals(run_id, pending_only=pending_only)

    # --- TemplateBook (template_book) ------------------------------------------------------------
    def save_template(
        self,
        name: str,
        plan: Plan | dict[str, Any],
        *,
        params: Sequence[str] = (),
        description: str = "",
        source_run_id: str | None = None,
    ) -> Template:
        """Save `plan` as the next version of template `name` (1 for a new name)."""
        return self.template_book.save_template(name, plan, params=params, description=description, source_run_id=source_run_id)

    def template(self, name: str, version: int | None = None) -> Template:
        """The latest (or the given) version of template `name`; `TemplateNotFoundError` when there is none."""
        return self.template_book.template(name, version)

    def templates(self, name: str | None = None) -> list[Template]:
        """Every saved version, of one name or all, by name then version."""
        return self.template_book.templates(name)

    def template_problems(self) -> tuple[int, list[str]]:
        """How many template versions the store holds, and what changed in each that does not match its hash."""
        return self.template_book.problems()

    def delete_template(self, name: str, version: int | None = None) -> int:
        """Delete one version of template `name`, or all of them; how many; `TemplateNotFoundError` when none."""
        return self.template_book.delete_template(name, version)

    # --- LeaseBook (lease_book) ------------------------------------------------------------
    def acquire_lease(self, run_id: str, holder: Holder | None = None, *, ttl: float | None = None) -> Lease:
        """Take run `run_id` for `holder` (this process by default); `LeaseHeldError` naming the holder when another live process has it."""
        return self.lease_book.acquire_lease(run_id, holder, ttl=ttl)

    def renew_lease(self, run_id: str, holder: Holder, *, ttl: float | None = None) -> None:
        """Move the lease's expiry forward; `LeaseLostError` when `holder` no longer holds it."""
        return self.lease_book.renew_lease(run_id, holder, ttl=ttl)

    def release_lease(self, run_id: str, holder: Holder) -> bool:
        """Give the run up (only if `holder` still holds it); True when a lease was released."""
        return self.lease_book.release_lease(run_id, holder)

    def lease(self, run_id: str) -> Lease | None:
        """The run's lease as it stands (None when nobody holds it); `live` says whether it still binds."""
        return self.lease_book.lease(run_id)

    def leases(self) -> dict[str, Lease]:
        """Every lease in the store, by run id (a released lease is gone; an expired one stays until taken)."""
        return self.lease_book.leases()

    def hold(self, run_id: str, *, on_lost: Callable[[LeaseLostError], None] | None = None) -> Lease:
        """Take the run's lease and keep it renewed (every third of the lease's life) until `let_go`; `LeaseHeldError` when another process has it."""
        return self.lease_book.hold(run_id, on_lost=on_lost)

    def let_go(self, run_id: str) -> None:
        """Release the run's lease held with `hold` (a no-op when it is not held)."""
        return self.lease_book.let_go(run_id)

    def holding(self) -> list[str]:
        """The runs this store holds with `hold`."""
        return self.lease_book.holding()

    # --- RunQueue (queue) ------------------------------------------------------------
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
        """Store `plan` as the run `run_id`, queued, its approval asked for (or decided) in the same transaction."""
        return self.queue.enqueue(
            run_id, plan, setup=setup, submitted_by=submitted_by, approve_steps=approve_steps, drafts=drafts, decided=decided
        )

    def queued_run(self, run_id: str) -> QueuedRun:
        """The run's queue row; `RunNotFoundError` when it was never queued."""
        return self.queue.queued_run(run_id)

    def queued_runs(self, states: Iterable[QueueState | str] | None = None, *, limit: int | None = 100) -> list[QueuedRun]:
        """Queued runs, oldest first: those in `states` (default: waiting and taken), at most `limit`."""
        return self.queue.queued_runs(states, limit=limit)

    def claim_run(self, *, max_takeovers: int = MAX_TAKEOVERS) -> Claim | None:
        """Take the next run for this process, with its lease kept renewed until `let_go`; None when none can be taken now."""
        return self.queue.claim_run(max_takeovers=max_takeovers)

    def settle_queued(
        self, run_id: str, owner: str, state: QueueState | str, reason: str | None = None, *, due: datetime | None = None
    ) -> bool:
        """Record how the worker holding lease token `owner` left the run: done, refused, or queued again; False when it no longer holds it."""
        return self.queue.settle_queued(run_id, owner, state, reason, due=due)
