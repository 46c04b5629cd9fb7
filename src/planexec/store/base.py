"""The run store's contract: the `RunStore` protocol and the typed records it returns.

Owns the protocols, one per capability (`RunRecords`, the event log;
`ApprovalStore`; `TemplateStore`) and `RunStore`, all three (what every
backend does), `RunSummary` (one row of the
``runs`` snapshot), `Approval` with `ApprovalState`, and `Template` (a
saved, versioned plan). All are frozen `Record`s with a stable JSON form.
Backends live in `sqlite` and `postgres`; the SQL they share in `sql`.
Imports `plan`, `records`, `results` and `usage`; never the engine's
running parts. `Lease` (who holds a run) is here too, with the records.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from planexec.engine.results import PlanVersion, RunStatus
from planexec.plan.model import Plan
from planexec.records import Record
from planexec.usage import Usage

__all__ = ["Approval", "ApprovalState", "ApprovalStore", "Lease", "RunRecords", "RunStore", "RunSummary", "Template", "TemplateStore"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease(Record):
    """Who holds a run: the process (host, pid, command), when it took the lease, its last heartbeat, when it expires.

    `live` is False once the lease expired or its process is known to be
    gone (a process of this machine that no longer runs): such a run can be
    resumed by anyone.
    """

    run_id: str
    owner: str
    host: str
    pid: int
    command: str
    acquired_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    live: bool

    def describe(self) -> str:
        """The holder in a sentence: ``process 1234 on host h (planexec resume run-1), last heartbeat at ...``."""
        what = f" ({self.command})" if self.command else ""
        return (
            f"process {self.pid} on {self.host}{what}, holding it since {self.acquired_at:%Y-%m-%d %H:%M:%S} UTC, "
            f"last heartbeat {self.heartbeat_at:%H:%M:%S} UTC"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary(Record):
    """A run as the ``runs`` snapshot holds it: kept up to date in the transaction of the events that change it.

    `plan_version` and `content_hash` are the current plan's (a revision
    moves them); `usage` is what the run has used so far, and its total
    once it finished. A sub-run names its parent run and step. A run still
    ``running`` carries its `lease` (the process running it); without a
    live one it is `interrupted`: the process that ran it died. `mismatch`
    says what the row says that the run's own (chained) events do not, one
    line each: the row was changed in the database, and is not the truth.
    """

    run_id: str
    goal: str
    status: RunStatus
    plan_id: str
    plan_version: int
    content_hash: str
    step_count: int
    started_at: datetime
    finished_at: datetime | None = None
    wall_time: float | None = None
    usage: Usage = field(default_factory=Usage)
    reason: str | None = None
    parent_run_id: str | None = None
    parent_step_id: str | None = None
    lease: Lease | None = None
    mismatch: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        """True once the run ended (a `RunFinished` that is not a queued run's ``waiting``, nor ``scheduled``: a run whose
        next steps wait for their time goes on when a worker resumes it, so the console keeps following it)."""
        return self.status not in (RunStatus.RUNNING, RunStatus.WAITING, RunStatus.SCHEDULED)

    @property
    def interrupted(self) -> bool:
        """True for a run that never finished and that no live process holds: its process died (resume it)."""
        return self.status is RunStatus.RUNNING and (self.lease is None or not self.lease.live)

    @property
    def state(self) -> str:
        """The status to show: ``interrupted`` for an interrupted run, else the stored status."""
        return "interrupted" if self.interrupted else self.status.value

    @property
    def cost(self) -> float:
        """Dollars spent on priced calls (see `usage.describe_cost()` for unpriced ones)."""
        return self.usage.cost


class ApprovalState(str, Enum):
    """Where an approval is: waiting for a person or policy, or decided."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"


@dataclass(frozen=True, slots=True, kw_only=True)
class Approval(Record):
    """A request to approve a plan version (``step_id`` None) or one step of it, and its decision.

    `content_hash` freezes what was approved: the plan's (or the step's)
    content hash at the time of the request.
    """

    approval_id: int
    run_id: str
    step_id: str | None
    content_hash: str
    state: ApprovalState
    requested_at: datetime
    decided_at: datetime | None = None
    by: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Template(Record):
    """A saved plan: a name, an auto-incremented version, the plan's JSON and the parameters it declares."""

    name: str
    version: int
    plan: dict[str, Any]
    params: list[str]
    created_at: datetime
    description: str = ""
    source_run_id: str | None = None


@runtime_checkable
class RunRecords(Protocol):
    """The event log: each run's events (append-only), its summary and its plan versions.

    Every write is one transaction: when it returns it is durable, and when
    it raises nothing changed. `location` names the file or the server
    (never a password). Errors are `StoreError`s (see `errors`).
    """

    location: str

    def append(self, events: Iterable[Any], *, parent: tuple[str, str] | None = None) -> int:
        """Store events (of one or more runs) and update the snapshots; returns how many were new.

        Idempotent on (run_id, seq): an event stored before with the same
        content is skipped, with another content it is an
        `EventConflictError`, as is a gap in a run's sequence. `parent`
        (run id, step id) links a sub-run to its parent when its first event is stored.
        """
        ...

    def events(self, run_id: str, after_seq: int = -1, limit: int | None = None) -> list[Any]:
        """The run's events with seq > `after_seq`, in order (at most `limit`); `RunNotFoundError` for an unknown run."""
        ...

    def last_seq(self, run_id: str) -> int:
        """The seq of the run's last stored event; -1 when it has none (or is unknown)."""
        ...

    def runs(self, *, limit: int | None = 50, status: RunStatus | str | None = None) -> list[RunSummary]:
        """Runs, newest first, optionally only those with `status`."""
        ...

    def run(self, run_id: str) -> RunSummary:
        """One run's summary; `RunNotFoundError` naming the id when there is none."""
        ...

    def save_plan(self, run_id: str, plan: Plan, *, reason: str = "the first plan") -> None:
        """Store a version of the run's plan (the first: later ones come with `PlanRevised`); idempotent."""
        ...

    def plan_versions(self, run_id: str) -> list[PlanVersion]:
        """Every stored version of the run's plan, the first first; `RunNotFoundError` for an unknown run."""
        ...


@runtime_checkable
class ApprovalStore(Protocol):
    """Requests to approve a plan version or a step, and their decisions (a person's, a policy's, ``--yes``)."""

    location: str

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
        """Ask for approval of the plan (`step_id` None) or a step; asking again for the same hash returns the same request.

        With `approved` (and `by`, `reason`) it is decided in the same
        transaction, never seen pending elsewhere; a decision stored before stands.
        """
        ...

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
        ...

    def approvals(self, run_id: str | None = None, *, pending_only: bool = False) -> list[Approval]:
        """Approval requests, oldest first: of one run or of all, optionally only the pending ones."""
        ...

    def edit_plan(
        self, run_id: str, *, content_hash: str, plan: Plan, by: str, reason: str | None = None, approve: bool = False
    ) -> Approval:
        """Answer the pending plan version `content_hash` with a person's edit, its next version (approved by them too with `approve`); the denied request."""
        ...


@runtime_checkable
class TemplateStore(Protocol):
    """The plan library: named plans saved as numbered versions."""

    def save_template(
        self,
        name: str,
        plan: Plan | dict[str, Any],
        *,
        params: Sequence[str] = (),
        description: str = "",
        source_run_id: str | None = None,
    ) -> Template:
        """Save a plan under `name` as its next version (1 for a new name)."""
        ...

    def template(self, name: str, version: int | None = None) -> Template:
        """A template's latest (or given) version; `TemplateNotFoundError` when there is none."""
        ...

    def templates(self, name: str | None = None) -> list[Template]:
        """Every saved version (of one name, or of all), by name then version."""
        ...

    def delete_template(self, name: str, version: int | None = None) -> int:
        """Delete one version, or every version of `name`; returns how many; `TemplateNotFoundError` when none."""
        ...


@runtime_checkable
class RunStore(RunRecords, ApprovalStore, TemplateStore, Protocol):
    """Where runs live: the event log with its snapshots (`RunRecords`), approvals (`ApprovalStore`) and plan templates
    (`TemplateStore`); the SQL stores also keep leases (`leases.Holds`) and a run queue (`queue.QueueStore`).
    """

    location: str

    def close(self) -> None:
        """Release the connection (the store is unusable afterwards)."""
        ...
