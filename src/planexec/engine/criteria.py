"""Success criteria: judging a step's output before it counts as done.

Owns the `Checker` protocol, `Judgement` (the critics' verdicts on one
output and what they cost) and `CriteriaChecker`, which applies a step's
criteria: not empty, a regex, a JSON Schema, a named predicate from the
registry, or a critic worker that must check with a tool before it
approves. A failed criterion raises `CheckFailedError` (carrying the
judgement so far), and the step's failure action applies; a critic that
crashes fails the check the same way. Regexes and JSON Schemas run in a
thread, so the step's deadline bounds them.
Imports `plan`, `registry`, `tools`, `calls`, `usage`, `workers` and `errors`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jsonschema

from planexec.errors import CheckFailedError
from planexec.plan.model import (
    CriticCriterion,
    JsonSchemaCriterion,
    NotEmptyCriterion,
    PredicateCriterion,
    RegexCriterion,
    Step,
    criterion_label,
)
from planexec.plan.references import lookup
from planexec.usage import Usage
from planexec.workers.io import Output, Provenance, Source, StepCall, WorkResult
from planexec.workers.registry import Registry
from planexec.workers.tools import in_thread
from planexec.workers.worker import WorkerError

__all__ = ["Checker", "CriteriaChecker", "Judgement"]


@dataclass
class Judgement:
    """The critics' verdicts on one output, as ``(critic, verdict JSON)`` pairs, and their usage."""

    verdicts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


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

    async def check(self, step: Step, output: Any, *, call: StepCall | None = None, sources: list[Source] | None = None) -> Judgement:
        """The critics' judgement; `CheckFailedError` naming the step and the criterion that rejected the output.

        `call` (the attempt that produced the output) gives a critic the run's context; `sources` are where the
        output came from: a critic judging an output that derives from untrusted text reads it quarantined.
        """
        judgement = Judgement()
        for crit in step.success_criteria:
            if isinstance(crit, CriticCriterion):
                ok, reason = await self._critic(crit, step, output, call, judgement, sources or [])
            else:
                ok, reason = await self._one(crit, output)
            if not ok:
                raise CheckFailedError(step.step_id, criterion_label(crit), reason, judgement=judgement)
        return judgement

    async def _critic(
        self, crit: CriticCriterion, step: Step, output: Any, call: StepCall | None, judgement: Judgement, sources: list[Source]
    ) -> tuple[bool, str]:
        """Ask the critic worker to review the output; only a judged approval passes."""
        critic = self.registry.workers.get(crit.worker)
        if critic is None:
            return False, f"no critic worker {crit.worker!r} is registered"
        criteria = crit.criteria or step.instruction or f"the result of {step.action} is correct"
        review = Step.model_validate(
            {
                "id": f"{step.step_id}-review",
                "action": "review",
                "worker": crit.worker,
                "instruction": f"Check this result against: {criteria}",
                # the output is a reference, so the critic's gate knows where it came from
                "parameters": {"output": f"${{{step.step_id}}}"},
            }
        )
        parameters = {"step": step.step_id, "task": step.instruction or step.action, "criteria": criteria, "output": output}
        judged = Output(
            value=output,
            provenance=Provenance(
                run_id=call.run_id if call else "",
                plan_id=call.plan_id if call else "",
                step_id=step.step_id,
                worker=call.worker if call else "",
                action=step.action,
                plan_version=call.plan_version if call else 1,
                sources=sources,
            ),
        )
        request = StepCall(
            run_id=call.run_id if call else "",
            plan_id=call.plan_id if call else "",
            plan_version=call.plan_version if call else 1,
            goal=call.goal if call else "",
            step=review,
            worker=crit.worker,
            instruction=review.instruction,
            parameters=parameters,
            context={step.step_id: judged},
            attempt=call.attempt if call else 1,
        )
        try:
            result = await critic.perform(request)
        except WorkerError as exc:
            judgement.usage = judgement.usage + exc.usage
            return False, f"the critic failed: {exc}"
        except Exception as exc:  # a crashing critic is a failed check, never a crashed run
            return False, f"the critic failed: {type(exc).__name__}: {exc}"
        if not isinstance(result, WorkResult):
            return False, f"the critic returned {type(result).__name__}, not a WorkResult"
        judgement.usage = judgement.usage + result.usage
        verdict = result.output
        if not (isinstance(verdict, dict) and isinstance(verdict.get("approved"), bool)):
            return False, f"the critic gave no verdict: {str(verdict)[:120]!r}"
        judgement.verdicts.append((crit.worker, verdict))
        reasons = "; ".join(str(r) for r in verdict.get("reasons", [])) or "no reasons given"
        return verdict["approved"], reasons

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
