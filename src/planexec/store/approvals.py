"""Approvals in the run store: requests to approve a plan version or a step, and their decisions.

Owns `ApprovalBook`, the store's part that keeps the ``approvals`` table,
over its `database.Database`: a request is keyed by run, step (none for the whole
plan) and content hash, so asking again after a restart finds the same
request; deciding takes the latest pending one (or the one for a given
hash) and refuses, naming the run and step, when nothing is pending.

Both join the run's audit chain (see `audit`): a request is one record, its
decision another, written once into the request's row (the store's
triggers refuse any other change to an approval, and its deletion). Who
decided and why are redacted (`secrets.redact`) before they are stored.
An approval or an edit of a run whose records changed after they were
written is refused (`TamperedError`, in the transaction that would write
it): it would vouch for what changed. A denial is recorded all the same.

A pending plan version may be answered with an edit instead (`edit_plan`,
``planexec approve --edit``, the web console): in one transaction the edit
is stored as the run's next plan version (revising the waiting one, with
its diff, and ``edited by NAME: why`` as its reason) and the waiting
version is denied, its reason naming the edit; with ``approve`` the edit's
own approval is decided (approved, by the editor) in the same transaction
(``planexec approve RUN --step ID --at TIME``: the person moves a step's
time and approves the moved plan at once). An edit of a version that
no longer waits (approved, denied, or replaced by another edit first), or
that is not the next version, is an `ApprovalError` that stores nothing.
The process that waited finds the edit by its shape (`engine.approval.find_edit`).
`pending_version` is the stored version an edit may replace, and
`run_setup` the tools modules it is checked against (the run's own).
Imports `errors`, `secrets`, `plan`, `usage` and the store's `audit`, `base`, `database`, `log` and `rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from planexec.errors import ApprovalError, StoreError
from planexec.plan.diff import diff_plans
from planexec.plan.model import Plan
from planexec.secrets import redact
from planexec.store.audit import approval_ref, decision_content, request_content
from planexec.store.base import Approval, ApprovalState, ApprovalStore, RunStore
from planexec.store.database import Database
from planexec.store.log import EventLog
from planexec.store.rows import from_timestamp, now
from planexec.usage import Usage

__all__ = ["ApprovalBook", "QueueHooks", "edit_plan", "pending_version", "run_setup"]


class QueueHooks(Protocol):
    """What the run queue does inside an approval's transaction (`queue.RunQueue`)."""

    def refuse_denied(self, cur: Any, run_id: str, content_hash: str, denial: str) -> None:
        """A queued run waiting for the denied version is refused."""
        ...

    def follow_edit(self, cur: Any, run_id: str, old_hash: str, plan: Plan) -> None:
        """A queued run waiting for the edited version waits for the edit's approval."""
        ...


_APPROVAL_COLUMNS = "approval_id, run_id, step_id, content_hash, state, requested_at, decided_at, decided_by, reason"


class ApprovalBook:
    """The approvals of a store (see the module docstring), over its `database.Database`; plan edits are stored in its
    event log (`log`), and a queued run follows its plan's denial or edit (`queue`, set by the store)."""

    def __init__(self, db: Database, log: EventLog) -> None:
        self.db = db
        self.log = log
        self.queue: QueueHooks | None = None

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
        """Ask for approval of the plan (`step_id` None) or a step; the same request again returns the stored one.

        With `approved` (and `by`, `reason`) the request is decided in the
        same transaction, so no other process ever finds it pending (a
        ``planexec approve RUN_ID`` there would decide it instead of the
        version that waits); a decision stored before stands.
        """
        if not content_hash:
            raise ValueError("an approval needs the content hash of what is approved")
        if approved is not None and not by:
            raise ValueError("a decision needs who made it (`by`)")
        with self.db.tx(write=True) as cur:
            self.db.require_run(cur, run_id)
            row = self.ask(cur, run_id, content_hash, step_id=step_id, approved=approved, by=by, reason=reason)
        return _approval(row)

    def ask(
        self,
        cur: Any,
        run_id: str,
        content_hash: str,
        *,
        step_id: str | None = None,
        approved: bool | None = None,
        by: str | None = None,
        reason: str | None = None,
    ) -> Any:
        """Inside a write transaction: the request's row, stored (and decided, with `approved`) when it was not yet."""
        key = (run_id, step_id or "", content_hash)
        where = "run_id = ? AND step_id = ? AND content_hash = ?"
        pending = ApprovalState.PENDING.value
        row = self.db.one(cur, f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE {where}", key)
        if row is None or (approved is not None and row[4] == pending):
            chain = self.db.chain(cur, run_id)  # the run's head, locked first: a decision elsewhere takes turns with this one
            row = self.db.one(cur, f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE {where}", key)
            if row is None:
                requested_at = now()
                link = chain.add("approval_request", approval_ref(*key[1:]), request_content(key[1], key[2], requested_at))
                cur.execute(
                    self.db.q(
                        "INSERT INTO approvals (run_id, step_id, content_hash, state, requested_at, link, prev_hash, hash) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                    ),
                    (*key, pending, requested_at, *link),
                )
                row = self.db.one(cur, f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE {where}", key)
            if approved is not None and row[4] == pending:  # still pending: decided before anyone else sees it
                state = ApprovalState.APPROVED if approved else ApprovalState.DENIED
                self._write_decision(cur, chain, _approval(row), state, str(by), reason)
                row = self.db.one(cur, f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE {where}", key)
            self.db.save_chain(cur, chain)
        return row

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
        what = f"step {step_id!r} of run {run_id!r}" if step_id else f"the plan of run {run_id!r}"
        sql = f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE run_id = ? AND step_id = ?"
        params: tuple[Any, ...] = (run_id, step_id or "")
        if content_hash is not None:
            sql += " AND content_hash = ?"
            params += (content_hash,)
        with self.db.tx(write=True) as cur:
            self.db.require_run(cur, run_id)
            if approved:  # what is approved must be what was recorded (a denial runs nothing: it is recorded whatever changed)
                self.log.intact(cur, run_id)
            rows = [_approval(r) for r in self.db.all(cur, sql + " ORDER BY approval_id", params)]
            pending = [a for a in rows if a.state is ApprovalState.PENDING]
            if not pending:
                if not rows:
                    why = "no approval was asked for" + (f" with content hash {content_hash}" if content_hash else "")
                else:
                    last = rows[-1]
                    why = f"it was already {last.state.value}" + (f" by {last.by}" if last.by else "")
                raise ApprovalError(f"{what} is not pending approval: {why}", run_id=run_id, step_id=step_id, location=self.db.location)
            target = pending[-1]
            state = ApprovalState.APPROVED if approved else ApprovalState.DENIED
            chain = self.db.chain(cur, run_id)
            self._write_decision(cur, chain, target, state, by, reason)
            self.db.save_chain(cur, chain)
            if not approved and step_id is None and self.queue is not None:  # a queued run that waited for this version never starts
                self.queue.refuse_denied(
                    cur, run_id, target.content_hash, f"its plan was denied by {by}" + (f": {reason}" if reason else "")
                )
            row = self.db.one(cur, f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE approval_id = ?", (target.approval_id,))
        return _approval(row)

    def _write_decision(self, cur: Any, chain: Any, target: Approval, state: ApprovalState, by: str, reason: str | None) -> None:
        """Write the decision into the pending request's row, as the chain's next record (redacted)."""
        decided_at, by, reason = now(), redact(by), redact(reason)
        link = chain.add(
            "approval_decision",
            approval_ref(target.step_id, target.content_hash),
            decision_content(state.value, decided_at, by, reason),
        )
        cur.execute(
            self.db.q(
                "UPDATE approvals SET state = ?, decided_at = ?, decided_by = ?, reason = ?, "
                "decision_link = ?, decision_prev_hash = ?, decision_hash = ? WHERE approval_id = ? AND state = ?"
            ),
            (state.value, decided_at, by, reason, *link, target.approval_id, ApprovalState.PENDING.value),
        )

    def edit_plan(
        self, run_id: str, *, content_hash: str, plan: Plan, by: str, reason: str | None = None, approve: bool = False
    ) -> Approval:
        """Answer the pending plan version `content_hash` with the edit `plan` (its next version); the denied request.

        See the module docstring; `ApprovalError` (nothing stored) when the
        version no longer waits, another edit came first, or `plan` is not
        the next version revising it.
        """
        with self.db.tx(write=True) as cur:
            self.db.require_run(cur, run_id)
            chain = self.db.chain(cur, run_id)  # the run's head, locked first: two edits at once take turns
            self.log.intact(cur, run_id)  # an edit of a changed run would vouch for what changed
            rows = self.db.all(
                cur, f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE run_id = ? AND step_id = '' ORDER BY approval_id", (run_id,)
            )
            asked = [_approval(r) for r in rows if r[3] == content_hash]
            stored = [(int(v), Plan.from_json(text), why) for v, text, why in self.db.all(
                cur, "SELECT version, plan, reason FROM plans WHERE run_id = ? ORDER BY version", (run_id,))]  # fmt: skip
            old = next((p for _, p, _ in stored if p.content_hash == content_hash), None)
            refusal = _edit_refusal(run_id, content_hash, asked, old, stored, plan)
            if refusal is not None:
                raise ApprovalError(refusal, run_id=run_id, step_id=None, location=self.db.location)
            assert old is not None  # `_edit_refusal` says why otherwise
            diff = diff_plans(old, plan)
            why = f"edited by {by}" + (f": {reason}" if reason else "")
            self.log.insert_plan(cur, run_id, plan, why, diff.to_json(), Usage(), datetime.now(UTC), chain)
            said = f"replaced by the edit v{plan.version} ({plan.content_hash[:19]}) by {by}; nothing of v{old.version} ran"
            self._write_decision(cur, chain, asked[-1], ApprovalState.DENIED, by, said + (f": {reason}" if reason else ""))
            self.db.save_chain(cur, chain)
            if approve:  # the person who made the edit approves it in the same transaction (planexec approve --at)
                self.ask(
                    cur,
                    run_id,
                    plan.content_hash,
                    approved=True,
                    by=by,
                    reason=f"approved with the edit v{plan.version}" + (f": {reason}" if reason else ""),
                )
            if self.queue is not None:  # a queued run waits for the edit's approval now (none, when it came approved)
                self.queue.follow_edit(cur, run_id, content_hash, plan)
            row = self.db.one(cur, f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE approval_id = ?", (asked[-1].approval_id,))
        return _approval(row)

    def approvals(self, run_id: str | None = None, *, pending_only: bool = False) -> list[Approval]:
        """Approval requests, oldest first, of one run or all; only the pending ones with `pending_only`."""
        clauses, params = [], []
        if run_id is not None:
            clauses.append("run_id = ?")
            params.append(run_id)
        if pending_only:
            clauses.append("state = ?")
            params.append(ApprovalState.PENDING.value)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self.db.tx(write=False) as cur:
            if run_id is not None:
                self.db.require_run(cur, run_id)
            rows = self.db.all(cur, f"SELECT {_APPROVAL_COLUMNS} FROM approvals{where} ORDER BY approval_id", params)
        return [_approval(r) for r in rows]


def edit_plan(
    store: RunStore, run_id: str, *, content_hash: str, plan: Plan, by: str, reason: str | None = None, approve: bool = False
) -> Approval:
    """`Approvals.edit_plan` on `store`; `StoreError` for a store that keeps no edits (not one of the SQL stores)."""
    if not isinstance(store, ApprovalStore):
        raise StoreError(f"the run store {store.location} cannot keep plan edits", location=store.location)
    return store.edit_plan(run_id, content_hash=content_hash, plan=plan, by=by, reason=reason, approve=approve)


def pending_version(store: RunStore, run_id: str) -> tuple[Approval, Plan] | None:
    """The run's pending plan approval and the stored version it is about (the one an edit replaces); None when none waits."""
    pending = [a for a in store.approvals(run_id, pending_only=True) if a.step_id is None]
    versions = store.plan_versions(run_id)
    for a in reversed(pending):
        for v in versions:
            if v.plan.content_hash == a.content_hash:
                return a, v.plan
    return None


def run_setup(store: RunStore, run_id: str) -> dict[str, Any]:
    """How the run was set up (its `RunStarted` setup: the tools modules a resume, and an edit's check, load again)."""
    for e in store.events(run_id, limit=20):
        if e.type == "run_started":
            setup: dict[str, Any] = dict(e.setup)
            return setup
    return {}


def _edit_refusal(
    run_id: str, content_hash: str, asked: list[Approval], old: Plan | None, stored: list[tuple[int, Plan, str]], plan: Plan
) -> str | None:
    """Why the edit `plan` of the version `old` (`content_hash`) may not be stored (see `Approvals.edit_plan`), or None."""
    what = f"the plan of run {run_id!r}"
    if old is None or not asked:
        return f"{what} has no stored version with content hash {content_hash[:19]}… waiting for approval"
    latest = stored[-1][0]
    if asked[-1].state is not ApprovalState.PENDING:
        last = asked[-1]
        if any(v == old.version + 1 and p.revises == old.version for v, p, _ in stored):
            edited_by = last.by or "someone"
            return f"{what}: v{old.version} was already replaced by the edit v{old.version + 1} by {edited_by}; edit v{latest} instead"
        return f"{what}: v{old.version} no longer waits for approval: it was {last.state.value}" + (f" by {last.by}" if last.by else "")
    if latest != old.version:
        return f"{what}: v{old.version} is not the latest version (v{latest} is)"
    if plan.version != old.version + 1 or plan.revises != old.version:
        return f"an edit of v{old.version} is v{old.version + 1} revising v{old.version}, not v{plan.version} revising v{plan.revises}"
    if plan.content_hash == old.content_hash:
        return f"the edit changes nothing v{old.version} does"
    return None


def _approval(row: Sequence[Any]) -> Approval:
    approval_id, run_id, step_id, content_hash, state, requested, decided, by, reason = row
    return Approval(
        approval_id=int(approval_id),
        run_id=run_id,
        step_id=step_id or None,
        content_hash=content_hash,
        state=ApprovalState(state),
        requested_at=from_timestamp(requested),  # type: ignore[arg-type]  # the column is NOT NULL
        decided_at=from_timestamp(decided),
        by=by,
        reason=reason,
    )
