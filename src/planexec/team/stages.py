"""The stages of a goal's path, as `Team.iter` yields them: routed, planned, waiting for a person, reviewed, started (or
queued), each event, finished.

Owns the stage records (`Routed`, `Planned`, `WaitingForPerson`,
`Reviewed`, `Started`, `Queued`, `EventSeen`, `HandedOff`, `Finished`;
`Stage` is any of them). A single agent that the contract stopped hands the
goal to a plan (`HandedOff`), and a second run follows. A goal submitted to the store's queue (`Team.submit`) ends with
`Queued` instead of `Started`: a worker runs it, and its events are the
store's.
Each is frozen, says its `kind`, and has a JSON form (`to_dict`) a face can
send as it is: a web page, an MCP client, a log. `Started` and `Finished`
carry the live `Run` and the `RunResult` besides. A face shows each stage
as it comes; decisions go back in through the reviewer and approver
protocols, never through the stages. Imports `engine`, `governance`,
`plan`, `planning` and `records`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from planexec.engine.engine import Run
from planexec.engine.results import RunResult
from planexec.governance.policies import Review
from planexec.governance.review import ReviewOutcome
from planexec.plan.drafts import Planning
from planexec.plan.model import Plan
from planexec.planning.router import Route

__all__ = ["EventSeen", "Finished", "HandedOff", "Planned", "Queued", "Reviewed", "Routed", "Stage", "Started", "WaitingForPerson"]


@dataclass(frozen=True, slots=True)
class Routed:
    """``auto`` mode decided how the goal is worked (`route`: the mode, why, who decided, the router's usage)."""

    kind: ClassVar[str] = "routed"
    route: Route

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data."""
        return {"kind": self.kind, **self.route.to_dict()}


@dataclass(frozen=True, slots=True)
class Planned:
    """The planner wrote a valid plan (or a saved template was filled in): the plan, every draft and their usage."""

    kind: ClassVar[str] = "planned"
    planning: Planning

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data: the plan, how many drafts and repairs, the usage."""
        plan = self.planning.plan
        return {
            "kind": self.kind,
            "plan": plan.model_dump(mode="json", by_alias=True),
            "drafts": len(self.planning.drafts),
            "repairs": self.planning.repairs,
            "usage": self.planning.usage.model_dump(mode="json"),
        }


@dataclass(frozen=True, slots=True)
class WaitingForPerson:
    """The policies have judged the plan and the reviewer (a person, a page, a program) is asked now."""

    kind: ClassVar[str] = "waiting_for_person"
    plan: Plan
    review: Review

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data: the plan's id and hash, the policies' decision and reasons."""
        return {
            "kind": self.kind,
            "plan_id": self.plan.plan_id,
            "content_hash": self.plan.content_hash,
            "policies": self.review.decision,
            "reasons": self.review.reasons("reject") + self.review.reasons("escalate"),
        }


@dataclass(frozen=True, slots=True)
class Reviewed:
    """The review ended (`outcome`: approve or reject, who decided, why, the plan to run, edited or not)."""

    kind: ClassVar[str] = "reviewed"
    outcome: ReviewOutcome

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data."""
        return {"kind": self.kind, **self.outcome.to_dict()}


@dataclass(frozen=True, slots=True)
class Started:
    """The run started: its handle, how the goal is worked (``plan``, ``single``, ``stream``) and why."""

    kind: ClassVar[str] = "started"
    run: Run
    mode: Literal["plan", "single", "stream"]
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data."""
        return {"kind": self.kind, "run_id": self.run.run_id, "mode": self.mode, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Queued:
    """The run was stored for a worker instead of started here (`Team.submit`).

    `state` is ``waiting`` (its plan waits for a person's approval in the
    store), ``queued`` (approved: the next free worker takes it) or
    ``refused`` (a policy rejected the plan: it ended at once, and `reason`
    says why). `mode` is how the goal is worked (``plan``, ``single``).
    """

    kind: ClassVar[str] = "queued"
    run_id: str
    plan: Plan
    state: Literal["waiting", "queued", "refused"]
    mode: Literal["plan", "single"] = "plan"
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data: the run id, the plan's id and hash, the state and why."""
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "plan_id": self.plan.plan_id,
            "content_hash": self.plan.content_hash,
            "state": self.state,
            "mode": self.mode,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class EventSeen:
    """One event of the run, as it happened (`planexec.events`)."""

    kind: ClassVar[str] = "event"
    event: Any

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data: the event's own."""
        return {"kind": self.kind, "event": self.event.to_dict()}


@dataclass(frozen=True, slots=True)
class Finished:
    """The run ended: its `RunResult` (status, answer, every step, every plan version, the usage)."""

    kind: ClassVar[str] = "finished"
    result: RunResult

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data: the status, the answer and the run id."""
        return {"kind": self.kind, "run_id": self.result.run_id, "status": self.result.status.value, "answer": self.result.answer}


@dataclass(frozen=True, slots=True)
class HandedOff:
    """The single agent's run ended `incomplete`: it read untrusted text, then the contract refused a call it needed.

    `result` is that run's; `note` what the planner is told (trusted context
    only). The stages go on with the plan's: planned, reviewed, started, finished.
    """

    kind: ClassVar[str] = "handed_off"
    result: RunResult
    note: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data: the agent's run, why it stopped."""
        return {"kind": self.kind, "run_id": self.result.run_id, "status": self.result.status.value, "reason": self.result.reason}


Stage = Routed | Planned | WaitingForPerson | Reviewed | Started | Queued | EventSeen | HandedOff | Finished
"""Any stage of a goal's path."""
