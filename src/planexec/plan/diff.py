"""What changed between two versions of a plan, and a fingerprint of the work still to do.

Owns `PlanDiff` (steps added, removed, changed with the fields that
changed, and kept) with `diff_plans` and a readable `render`, and
`remaining_hash`: the content hash of a set of steps that ignores their
ids, so a replanner that writes the same failing steps under new names is
recognised as repeating itself. Imports `plan` and `records`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from planexec.plan.model import Plan, Step
from planexec.plan.references import find_references
from planexec.records import Record

__all__ = ["PlanDiff", "diff_plans", "remaining_hash"]

_FIELDS = (
    "action",
    "worker",
    "instruction",
    "parameters",
    "depends_on",
    "success_criteria",
    "failure_action",
    "timeout",
    "requires_approval",
    "accepts_failed_inputs",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanDiff(Record):
    """Steps of `new` not in `old` (added), of `old` not in `new` (removed), in both but different (changed: id -> fields)."""

    old_version: int
    new_version: int
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when no step was added, removed or changed."""
        return not (self.added or self.removed or self.changed)

    def render(self) -> str:
        """A short text: ``+ s6``, ``- s3``, ``~ s4 (parameters)``, one per line."""
        lines = [f"plan v{self.old_version} -> v{self.new_version}"]
        lines += [f"+ {sid}" for sid in self.added]
        lines += [f"- {sid}" for sid in self.removed]
        lines += [f"~ {sid} ({', '.join(fields)})" for sid, fields in self.changed.items()]
        lines.append(f"= {len(self.kept)} step(s) unchanged")
        return "\n".join(lines)


def _dump(step: Step) -> dict[str, Any]:
    return step.model_dump(mode="json", by_alias=True)


def diff_plans(old: Plan, new: Plan) -> PlanDiff:
    """The step-level difference from `old` to `new` (steps matched by id)."""
    before = {s.step_id: _dump(s) for s in old.steps}
    after = {s.step_id: _dump(s) for s in new.steps}
    changed = {}
    kept = []
    for sid, data in after.items():
        if sid in before:
            fields = [f for f in _FIELDS if before[sid].get(f) != data.get(f)]
            if fields:
                changed[sid] = fields
            else:
                kept.append(sid)
    return PlanDiff(
        old_version=old.version,
        new_version=new.version,
        added=[sid for sid in after if sid not in before],
        removed=[sid for sid in before if sid not in after],
        changed=changed,
        kept=kept,
    )


def remaining_hash(steps: Iterable[Step], done: Iterable[str] = ()) -> str:
    """sha256 of what `steps` do, with their own ids replaced by their positions.

    References and dependencies on `done` steps keep their names (they are
    fixed points); those among `steps` become ``#1``, ``#2``, ... So the
    same work under other ids has the same hash.
    """
    steps = list(steps)
    names = {s.step_id: f"#{i}" for i, s in enumerate(steps, 1)}
    fixed = set(done)

    def rename(value: Any) -> Any:
        if isinstance(value, str):
            for ref, _ in find_references(value):
                if ref in names and ref not in fixed:
                    for end in ("}", "."):
                        value = value.replace("${" + ref + end, "${" + names[ref] + end)
            return value
        if isinstance(value, list):
            return [rename(v) for v in value]
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        return value

    content = []
    for s in steps:
        data = _dump(s)
        data.pop("id", None)
        data["depends_on"] = [names.get(d, d) if d not in fixed else d for d in s.depends_on]
        data["parameters"] = rename(data["parameters"])
        data["instruction"] = rename(data["instruction"])
        content.append(data)
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
