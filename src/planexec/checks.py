"""Success criteria: judging a step's output before it counts as done.

Owns the `Checker` protocol (the seam an LLM critic will plug into) and
`CriteriaChecker`, which applies a step's programmatic criteria: not empty,
a regex, a JSON Schema, or a named predicate from the registry. A failed
criterion raises `CheckFailedError`, and the step's failure action applies.
Regexes and JSON Schemas run in a thread, so the step's deadline bounds them.
Imports `plan`, `registry`, `tools` and `errors`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol, runtime_checkable

import jsonschema

from .errors import CheckFailedError
from .plan import (
    JsonSchemaCriterion,
    NotEmptyCriterion,
    PredicateCriterion,
    RegexCriterion,
    Step,
    criterion_label,
    lookup,
)
from .registry import Registry
from .tools import in_thread

__all__ = ["Checker", "CriteriaChecker"]


@runtime_checkable
class Checker(Protocol):
    """Judges a step's output; raises `CheckFailedError` to reject it."""

    async def check(self, step: Step, output: Any) -> None:
        """Return when the output is acceptable."""
        ...


class CriteriaChecker:
    """Applies a step's `success_criteria` in order; the first that fails rejects the output."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._validators: dict[str, Any] = {}

    async def check(self, step: Step, output: Any) -> None:
        """Raise `CheckFailedError` naming the step and the criterion that rejected the output."""
        for crit in step.success_criteria:
            ok, reason = await self._one(crit, output)
            if not ok:
                raise CheckFailedError(step.step_id, criterion_label(crit), reason)

    async def _one(self, crit: Any, output: Any) -> tuple[bool, str]:
        if isinstance(crit, NotEmptyCriterion):
            empty = output is None or (isinstance(output, (str, list, dict, tuple)) and len(output) == 0)
            return not empty, "the output is empty"
        if isinstance(crit, RegexCriterion):
            try:
                value = lookup(output, crit.path) if crit.path else output
            except LookupError as exc:
                return False, f"path {crit.path!r}: {exc}"
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
            # in a thread: a pathological pattern is then bounded by the step's deadline, not the event loop
            found = await in_thread(re.search, crit.pattern, text)
            return found is not None, f"{text[:80]!r} does not match"
        if isinstance(crit, JsonSchemaCriterion):
            key = json.dumps(crit.json_schema, sort_keys=True)
            validator = self._validators.get(key)
            if validator is None:
                cls = jsonschema.validators.validator_for(crit.json_schema)
                validator = self._validators[key] = cls(crit.json_schema)
            error = await in_thread(lambda: jsonschema.exceptions.best_match(validator.iter_errors(output)))
            if error is None:
                return True, ""
            where = "/".join(str(p) for p in error.absolute_path)
            return False, f"{error.message}" + (f" at {where}" if where else "")
        if isinstance(crit, PredicateCriterion):
            pred = self.registry.predicates.get(crit.name)
            if pred is None:
                return False, f"no predicate {crit.name!r} is registered"
            return await pred.check(output, crit.args)
        return False, f"unknown criterion {crit!r}"
