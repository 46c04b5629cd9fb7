"""Loading plans written in another JSON vocabulary.

Owns `PlanMapping`: renames of plan-level and step-level field names and
translations of values (for example ``failure_action: abort_deployment`` →
``abort``), applied to decoded JSON before it is validated as a `Plan`.
Plans from other tools, prompts or hand-written runbooks load this way
without loosening the `Plan` model itself. Imports `plan` and `errors`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planexec.errors import PlanParseError, Problem
from planexec.plan.model import Plan

__all__ = ["PlanMapping", "load_foreign_plan"]


class PlanMapping(BaseModel):
    """How to read a foreign plan: field renames and value translations.

    `plan_fields` and `step_fields` map foreign names to ours; `step_values`
    maps a (our) step field name to a table of foreign value → our value;
    `defaults` fills plan fields the foreign plan lacks (for example a goal).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan_fields: dict[str, str] = Field(default_factory=dict)
    step_fields: dict[str, str] = Field(default_factory=dict)
    step_values: dict[str, dict[str, Any]] = Field(default_factory=dict)
    defaults: dict[str, Any] = Field(default_factory=dict)

    def apply(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The foreign plan (decoded JSON) rewritten in planexec's vocabulary."""
        if not isinstance(data, Mapping):
            raise PlanParseError([Problem("not_an_object", f"a plan must be a JSON object, not {type(data).__name__}")])
        out = {self.plan_fields.get(k, k): v for k, v in data.items()}
        for key, value in self.defaults.items():
            out.setdefault(key, value)
        steps = out.get("steps")
        if isinstance(steps, list):
            out["steps"] = [self._step(s) for s in steps]
        rollback = out.get("rollback_plan")
        if isinstance(rollback, Mapping) and isinstance(rollback.get("steps"), list):
            out["rollback_plan"] = {**rollback, "steps": [self._step(s) for s in rollback["steps"]]}
        return out

    def _step(self, raw: Any) -> Any:
        if not isinstance(raw, Mapping):
            return raw
        step = {self.step_fields.get(k, k): v for k, v in raw.items()}
        for field, table in self.step_values.items():
            value = step.get(field)
            if isinstance(value, str) and value in table:
                step[field] = table[value]
        return step


def load_foreign_plan(source: str | bytes | Mapping[str, Any], mapping: PlanMapping) -> Plan:
    """Decode (if text), map and validate a foreign plan; `PlanParseError` lists every problem."""
    if isinstance(source, (str, bytes)):
        try:
            source = json.loads(source)
        except json.JSONDecodeError as exc:
            raise PlanParseError([Problem("malformed_json", f"{exc.msg} at line {exc.lineno} column {exc.colno}")]) from None
        except (ValueError, RecursionError) as exc:
            raise PlanParseError([Problem("malformed_json", f"{type(exc).__name__}: {exc}")]) from None
    return Plan.from_data(mapping.apply(source))  # type: ignore[arg-type]  # PlanMapping.apply accepts any decoded JSON; from_data reports what is wrong
