"""The review decision of a plan before it runs, and its record: policies first, then a person, ``--yes`` or nobody.

Owns `ReviewOutcome` (decision, the plan as approved, possibly edited, the
reason, who decided, the policies' verdicts) and `decide_review`, the one
decision taken when no person is asked: a policy's reject always wins; an
escalation is approved only by ``--yes`` (or `auto_approve`), else nobody
can approve it; a plan every policy approves runs unless a person is
required. `Team.review`, the CLI's terminal review (`cli.review_terminal`,
which asks the person) and the MCP server all take it from here. No
terminal I/O: showing a plan and asking a person are a face's. Imports
`plan`, `policies` and `records`; never the engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from planexec.governance.policies import PolicyVerdict, Review
from planexec.plan.model import Plan
from planexec.records import Record

__all__ = ["NO_ONE", "DecidedBy", "ReviewOutcome", "decide_review"]

DecidedBy = Literal["person", "policy", "--yes", "nobody"]
NO_ONE = "no one can be asked (stdin is not a terminal): approve it with --yes"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewOutcome(Record):
    """How a review ended: `decision`, the `plan` to run (edited when `edited`), why, and who decided.

    `by` is ``person`` (at the terminal), ``policy`` (a policy rejected, or
    every policy approved a plan that needs no person), ``--yes``, or
    ``nobody`` (a person was needed and none could be asked: not approved).
    A reviewer that cannot ask a person here but knows one can decide later
    answers ``wait``: the run starts and its plan waits for that person's
    decision in the store (the engine's plan approver), never running before.
    `verdicts` are the policies' verdicts on the final plan.
    """

    decision: Literal["approve", "reject", "wait"]  # wait: no person here; the run starts and waits for one in the store
    by: DecidedBy
    reason: str
    plan: Plan
    verdicts: list[PolicyVerdict] = field(default_factory=list)
    edited: bool = False

    @property
    def approved(self) -> bool:
        """True when the plan may run."""
        return self.decision == "approve"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data; the plan in its own JSON form (``id``, not ``step_id``)."""
        return {**Record.to_dict(self), "plan": self.plan.model_dump(mode="json", by_alias=True)}

    def to_json(self, *, indent: int | None = None) -> str:
        """The JSON form as text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


def decide_review(
    plan: Plan, review: Review, *, policies_configured: bool, yes: str | None = None, person_required: bool = True
) -> ReviewOutcome:
    """The outcome of `review` (the policies' verdicts on `plan`) when no person is asked.

    `yes` names who stands in for the person (``"--yes"``, ``"auto_approve"``;
    None: nobody does). A reject is the policies'; with `yes` everything
    else is approved by ``--yes`` (an escalation saying so); an escalation
    without it is refused (nobody can approve it); a plan the policies
    approve runs when no person is required, else nobody approved it.
    """

    def outcome(decision: Literal["approve", "reject"], by: DecidedBy, reason: str) -> ReviewOutcome:
        return ReviewOutcome(decision=decision, by=by, reason=reason, plan=plan, verdicts=review.verdicts)

    if review.decision == "reject":
        return outcome("reject", "policy", "rejected by policy: " + "; ".join(review.reasons("reject")))
    if yes is not None:
        if review.decision == "escalate":
            return outcome("approve", "--yes", f"escalation approved by {yes}: " + "; ".join(review.reasons("escalate")))
        return outcome("approve", "--yes", f"approved with {yes}")
    if review.decision == "escalate":
        return outcome("reject", "nobody", "a policy asks for a person (" + "; ".join(review.reasons("escalate")) + ") and " + NO_ONE)
    if not person_required:
        return outcome("approve", "policy", "every policy approved" if policies_configured else "no policy objected (none configured)")
    return outcome("reject", "nobody", NO_ONE)
