"""Automated plan reviewers: what a policy is, what it reads, and how verdicts combine.

Owns the `Policy` protocol (``review(plan, context) -> PolicyVerdict``), the
`PolicyVerdict` and `Review` records (stable JSON), the `PolicyContext` a
policy reads (the registry for tool metadata, prices, the last approved
version), Python functions as policies (`policy`, `FunctionPolicy`), and
`review_plan`, which runs policies on a plan version: any reject rejects,
else any escalate asks a person, else the plan is approved. A policy that
fails, or answers with something that is not a verdict, rejects: a broken
reviewer never approves by accident.

The built-in policies live in `policy_rules`; which policies a project uses
(a `PolicySet`, Python modules, the YAML rule file) in `policy_sets`; the
review in the terminal in `review`. Imports `plan`, `plan_diff`, `pricing`,
`records` and `registry`; never the engine.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from planexec.models.pricing import PriceTable
from planexec.plan.capabilities import grant_label, widened_grants
from planexec.plan.diff import diff_plans
from planexec.plan.model import Plan
from planexec.records import Record
from planexec.workers.grants import effective_grants
from planexec.workers.registry import Registry

__all__ = [
    "Decision",
    "FunctionPolicy",
    "Policy",
    "PolicyContext",
    "PolicyVerdict",
    "Review",
    "Scope",
    "effective_grants",
    "narrow_plan",
    "policy",
    "review_plan",
]

Decision = Literal["approve", "reject", "escalate"]
# What a person must approve when a policy escalates: the whole plan, or only the
# steps added or changed since the last approved version.
Scope = Literal["plan", "changes"]


# --- records -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyVerdict(Record):
    """One policy's judgement of one plan version.

    `reasons` each name the step, field or rule they are about; `steps` are
    the steps the verdict concerns; `scope` says what a person must approve
    when the decision is ``escalate`` (``changes``: only new or changed
    steps, which needs a previously approved version).
    """

    decision: Decision
    policy: str
    reasons: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    scope: Scope = "plan"

    def render(self) -> str:
        """``order: reject · step 'deploy' uses ...`` on one line."""
        return f"{self.policy}: {self.decision}" + "".join(f" · {r}" for r in self.reasons)

    @classmethod
    def from_findings(
        cls, policy: str, findings: Sequence[tuple[Decision, str, str | None]], *, scope: Scope = "plan", ok: str = ""
    ) -> PolicyVerdict:
        """A verdict from (decision, reason, step id or None) findings: the strictest decision wins;
        no findings approve (with `ok` as the reason, when given)."""
        if not findings:
            return cls(decision="approve", policy=policy, reasons=[ok] if ok else [])
        decisions = {d for d, _, _ in findings}
        decision: Decision = "reject" if "reject" in decisions else "escalate" if "escalate" in decisions else "approve"
        steps = list(dict.fromkeys(s for _, _, s in findings if s is not None))
        return cls(decision=decision, policy=policy, reasons=[r for _, r, _ in findings], steps=steps, scope=scope)


@dataclass(frozen=True, slots=True, kw_only=True)
class Review(Record):
    """Every policy's verdict on one plan version, and what they add up to.

    `decision`: any reject rejects; else any escalate escalates to a person;
    else approve. `scope` is what the person must approve (``changes`` only
    when every escalation allows it and there is an approved version).
    """

    decision: Decision
    plan_hash: str
    plan_version: int
    verdicts: list[PolicyVerdict] = field(default_factory=list)
    scope: Scope = "plan"
    steps: list[str] = field(default_factory=list)

    def reasons(self, decision: Decision | None = None) -> list[str]:
        """The reasons of every verdict (of one decision), each prefixed by its policy."""
        return [f"{v.policy}: {r}" for v in self.verdicts if decision in (None, v.decision) for r in v.reasons]

    def render(self) -> str:
        """One line per verdict under a line with the decision."""
        return "\n".join([f"policies: {self.decision}"] + [f"  - {v.render()}" for v in self.verdicts])


# --- context -------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may read besides the plan.

    `registry` gives tool and worker metadata (None: the action is taken as
    the tool's name); `prices` the price table (default: the shipped one);
    `previous` the last approved version of this plan, if any, so a policy
    can ask for only the new or changed steps, or the whole plan again.
    """

    registry: Registry | None = None
    prices: PriceTable | None = None
    previous: Plan | None = None

    def changed_steps(self, plan: Plan) -> list[str]:
        """Steps added or changed since the approved version (every step when there is none)."""
        if self.previous is None:
            return plan.step_ids
        diff = diff_plans(self.previous, plan)
        return [sid for sid in plan.step_ids if sid in diff.changed or sid in diff.added]

    def price_table(self) -> PriceTable:
        """The prices to estimate with."""
        return self.prices if self.prices is not None else PriceTable.default()


@runtime_checkable
class Policy(Protocol):
    """An automated reviewer: judges each plan version; `name` identifies it in verdicts."""

    name: str

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict: ...


# --- Python functions as policies --------------------------------------------------


class FunctionPolicy:
    """A Python function as a policy: ``fn(plan, context)`` (or ``fn(plan)``) returns a `PolicyVerdict`,
    a decision (``"approve"``, ``"reject"``, ``"escalate"``) or ``(decision, reasons)``.

    Its verdicts carry its `name` (the function's name by default).
    """

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", type(fn).__name__))
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # no signature to read: pass both
            params = []
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.wants_context = not params or len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)

    def __repr__(self) -> str:
        return f"FunctionPolicy({self.name!r})"

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict:
        """Call the function and read its answer as a verdict (`TypeError` when it is none)."""
        answer = self.fn(plan, context) if self.wants_context else self.fn(plan)
        if isinstance(answer, PolicyVerdict):
            return answer if answer.policy == self.name else PolicyVerdict(**{**_fields(answer), "policy": self.name})
        if isinstance(answer, str) and answer in ("approve", "reject", "escalate"):
            return PolicyVerdict(decision=answer, policy=self.name)  # type: ignore[arg-type]  # `answer` is one of the three decisions, checked on this line
        if isinstance(answer, tuple) and len(answer) == 2 and answer[0] in ("approve", "reject", "escalate"):
            reasons = [answer[1]] if isinstance(answer[1], str) else [str(r) for r in answer[1]]
            return PolicyVerdict(decision=answer[0], policy=self.name, reasons=reasons)
        raise TypeError(f"returned {answer!r:.80}; return a PolicyVerdict, 'approve', 'reject', 'escalate' or (decision, reasons)")


def _fields(verdict: PolicyVerdict) -> dict[str, Any]:
    return {"decision": verdict.decision, "reasons": verdict.reasons, "steps": verdict.steps, "scope": verdict.scope}


def policy(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Make a function a `FunctionPolicy` (decorator, bare or with a name); a module's policies load with it."""

    def wrap(f: Callable[..., Any]) -> FunctionPolicy:
        return f if isinstance(f, FunctionPolicy) else FunctionPolicy(f, name=name)

    return wrap(fn) if fn is not None else wrap


# --- narrowing capabilities ---------------------------------------------------------------


def narrow_plan(plan: Plan, policies: Iterable[Any], context: PolicyContext | None = None) -> tuple[Plan, list[str]]:
    """The plan after every policy that narrows capabilities (``narrow(plan, context) -> Plan``) had its say, and what changed.

    A policy may only take away: a result that grants a step anything its
    plan did not (checked with `Grant.within`) is ignored, and the notes say
    so. Narrowing happens before the review, so people and the other
    policies judge the plan that will run.
    """
    context = context if context is not None else PolicyContext()
    notes: list[str] = []
    for p in policies:
        narrow = getattr(p, "narrow", None)
        if narrow is None:
            continue
        name = getattr(p, "name", type(p).__name__)
        try:
            narrowed = narrow(plan, context)
        except Exception as exc:  # a broken narrowing changes nothing; its review verdict can still reject
            notes.append(f"{name}: could not narrow the plan ({type(exc).__name__}: {exc})")
            continue
        widened = _widened(narrowed, plan, context.registry)
        if widened:
            notes.append(f"{name}: ignored, it would grant {', '.join(widened)}")
            continue
        for step in narrowed.steps:
            before = plan.step(step.step_id).capabilities
            if step.capabilities != before:
                labels = "; ".join(grant_label(g) for g in step.capabilities or []) or "no tools"
                notes.append(f"{name}: step {step.step_id!r} may now call {labels}")
        plan = narrowed
    return plan, notes


def _widened(new: Plan, old: Plan, registry: Registry | None) -> list[str]:
    if new.step_ids != old.step_ids or any(
        a.model_copy(update={"capabilities": None}) != b.model_copy(update={"capabilities": None}) for a, b in zip(new.steps, old.steps)
    ):
        return ["changes beyond capabilities"]
    out = []
    for a, b in zip(new.steps, old.steps):
        after, before = effective_grants(a, registry), effective_grants(b, registry)
        if after is None:
            continue
        for g in widened_grants(after, before or []):
            out.append(f"step {a.step_id!r} {grant_label(g)}")
    return out


# --- combining -----------------------------------------------------------------------


def review_plan(plan: Plan, policies: Iterable[Policy], context: PolicyContext | None = None) -> Review:
    """Every policy's verdict on `plan`: any reject rejects, else any escalate escalates, else approve.

    A policy that raises, or answers with something that is not a
    `PolicyVerdict`, rejects with the error as its reason.
    """
    context = context if context is not None else PolicyContext()
    verdicts = []
    for p in policies:
        name = getattr(p, "name", type(p).__name__)
        try:
            verdict = p.review(plan, context)
            if not isinstance(verdict, PolicyVerdict):
                raise TypeError(f"returned {type(verdict).__name__}, not a PolicyVerdict")
        except Exception as exc:
            verdict = PolicyVerdict(decision="reject", policy=name, reasons=[f"the policy failed: {type(exc).__name__}: {exc}"])
        verdicts.append(verdict)
    decisions = {v.decision for v in verdicts}
    decision: Decision = "reject" if "reject" in decisions else "escalate" if "escalate" in decisions else "approve"
    relevant = [v for v in verdicts if v.decision == decision and decision != "approve"]
    changes_only = context.previous is not None and all(v.scope == "changes" for v in relevant)
    return Review(
        decision=decision,
        plan_hash=plan.content_hash,
        plan_version=plan.version,
        verdicts=verdicts,
        scope="changes" if changes_only and relevant else "plan",
        steps=list(dict.fromkeys(s for v in relevant for s in v.steps)),
    )
