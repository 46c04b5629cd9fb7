"""How a plan was reached: each draft a planner wrote, and the plan with all of them.

Owns `PlanDraft` (one attempt: the text, its problems, its usage and time)
and `Planning` (the accepted plan, every draft, their usage). The planner
makes them; the engine records them as events and counts their usage, so
they live with the plan, below both. Imports `plan.model`, `records` and `usage`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planexec.plan.model import Plan
from planexec.records import Record
from planexec.usage import Usage

__all__ = ["PlanDraft", "Planning"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanDraft(Record):
    """One attempt of the planner: the text the model wrote and what was wrong with it (nothing, if accepted)."""

    attempt: int
    model: str
    text: str
    problems: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    wall_time: float = 0.0

    @property
    def valid(self) -> bool:
        """True when this draft became the plan."""
        return not self.problems


@dataclass(frozen=True, slots=True, kw_only=True)
class Planning(Record):
    """A plan and how it was reached: every draft, and the usage of all of them."""

    plan: Plan
    drafts: list[PlanDraft]
    usage: Usage

    @property
    def repairs(self) -> int:
        """Drafts sent back for repair."""
        return len(self.drafts) - 1

    def draft_events(self) -> list[dict[str, Any]]:
        """What a run records of each draft (a `PlanDrafted` event's own fields): attempt, model, problems, usage, wall time."""
        return [
            {"attempt": d.attempt, "model": d.model, "problems": d.problems, "usage": d.usage, "wall_time": d.wall_time}
            for d in self.drafts
        ]
