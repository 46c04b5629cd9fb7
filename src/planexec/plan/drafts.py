"""How a plan was reached: each draft a planner wrote, and the plan with all of them.

Owns `PlanDraft` (one attempt: the text, its problems, its usage and time,
and the content hash of the plan it became when accepted) and `Planning`
(the accepted plan, every draft, their usage, and the opening conversation
the planner sent, `prompt`, in the format it asked for). The planner
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
    content_hash: str = ""  # the plan it became, when accepted ("" for a draft sent back)

    @property
    def valid(self) -> bool:
        """True when this draft became the plan."""
        return not self.problems

    def event_fields(self) -> dict[str, Any]:
        """A `PlanDrafted` event's own fields (the version it drafts aside)."""
        fields = {"attempt": self.attempt, "model": self.model, "problems": self.problems, "usage": self.usage, "wall_time": self.wall_time}
        return {**fields, "text": self.text, "content_hash": self.content_hash}


@dataclass(frozen=True, slots=True, kw_only=True)
class Planning(Record):
    """A plan and how it was reached: every draft, and the usage of all of them."""

    plan: Plan
    drafts: list[PlanDraft]
    usage: Usage
    # the planner's opening conversation (system prompt with the catalogue, example turns, the goal): role/content pairs
    prompt: list[dict[str, str]] = field(default_factory=list)
    plan_format: str = "json"  # what the prompt asked the model to write: "json" (the draft schema) or "compact"

    @property
    def repairs(self) -> int:
        """Drafts sent back for repair."""
        return len(self.drafts) - 1

    def draft_events(self) -> list[dict[str, Any]]:
        """What a run records of each draft (a `PlanDrafted` event's own fields): attempt, model, problems, usage, wall time,
        what the model wrote and the plan it became."""
        return [d.event_fields() for d in self.drafts]
