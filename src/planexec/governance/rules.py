"""The built-in policies, and the facts about a plan they judge by.

Owns `MaxSteps`, `MaxEstimatedCost` (with `estimate_cost` and its
`CostEstimate` record), `ToolsNeedPerson`, `ForbidTools`, `LimitGrants`
(which narrows what role steps may call), `RequiresOrder` and
`RiskEscalation`, `RequireWindows` (tools that run only in maintenance
windows), and `step_tools`: the tools a step surely calls (its
action is a tool) and those it may call (a role's task, through the role's
model). A sure breach of a rule rejects; a possible one (a role that may
call the tool) escalates to a person. Each reason names the step and the
rule. Imports `policies`, `plan`, `dag`, `records`, `registry` and `workers`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planexec.governance.policies import Decision, PolicyContext, PolicyVerdict, Scope
from planexec.plan.capabilities import Constraint, Grant, grant_label
from planexec.plan.model import CriticCriterion, Plan, Step
from planexec.plan.scheduler import upstream
from planexec.plan.windows import Window, WindowError, parse_windows
from planexec.records import Record
from planexec.workers.grants import effective_grants
from planexec.workers.registry import TOOL_WORKER, Registry
from planexec.workers.worker import ToolWorker

__all__ = [
    "CostEstimate",
    "ForbidTools",
    "LimitGrants",
    "MaxEstimatedCost",
    "MaxSteps",
    "RequireWindows",
    "RequiresOrder",
    "RiskEscalation",
    "ToolsNeedPerson",
    "estimate_cost",
    "step_tools",
]

RISK_ORDER = ("low", "medium", "high", "critical")
Finding = tuple[Decision, str, "str | None"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CostEstimate(Record):
    """What a plan may cost before it runs; `dollars` is None when some step's price is unknown.

    `per_step` holds the priced steps, `unpriced` the others with why;
    `assumptions` says how the estimate was made.
    """

    dollars: float | None
    priced: float = 0.0
    per_step: dict[str, float] = field(default_factory=dict)
    unpriced: dict[str, str] = field(default_factory=dict)
    model_steps: int = 0
    assumptions: str = ""


# --- tools a step uses -----------------------------------------------------------


def step_tools(step: Step, registry: Registry | None) -> tuple[set[str], set[str]]:
    """The tools a step surely calls, and those it may call through a role's model.

    A step whose action is a tool calls it; a role's task (``coder.code``)
    may call any of the role's tools, a sub-team's task any tool of its
    team. Without a registry, or for a worker
    of another kind, the action is taken as the tool's name.
    """
    worker = registry.workers.get(step.worker) if registry is not None else None
    tools = getattr(worker, "tools", None)
    tasks = getattr(worker, "tasks", None)
    if isinstance(tools, Mapping) and isinstance(tasks, set) and step.action in tasks:
        if step.capabilities is not None:  # the plan grants the role only these
            return set(), {g.tool for g in step.capabilities if g.tool in tools}
        return set(), set(tools)
    if worker is not None and isinstance(tasks, set) and step.action in tasks:
        inner = getattr(getattr(worker, "planner", None), "registry", None)  # a sub-team plans over tools of its own
        return set(), set(getattr(inner, "tools", None) or ())
    return {step.action}, set()


def _first_match(names: Iterable[str], patterns: Sequence[str]) -> tuple[str, str] | None:
    for name in sorted(names):
        for pattern in patterns:
            if fnmatch.fnmatchcase(name, pattern):
                return name, pattern
    return None


def _patterns(value: str | Iterable[str], what: str) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value)
    if not items or not all(isinstance(p, str) and p for p in items):
        raise ValueError(f"{what} needs one or more tool names or glob patterns, got {value!r}")
    return items


# --- built-in policies -----------------------------------------------------------


class MaxSteps:
    """Rejects a plan of more than `limit` steps."""

    def __init__(self, limit: int, *, name: str = "max_steps") -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"max_steps must be a whole number of at least 1, got {limit!r}")
        self.limit = limit
        self.name = name

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict:
        """Reject when the plan is longer than the limit."""
        n = len(plan.steps)
        if n <= self.limit:
            return PolicyVerdict.from_findings(self.name, [], ok=f"{n} step(s), at most {self.limit}")
        over = plan.step_ids[self.limit :]
        reason = f"the plan has {n} steps, more than max_steps {self.limit} (over the limit: {', '.join(over)})"
        return PolicyVerdict(decision="reject", policy=self.name, reasons=[reason], steps=over)


def _direct_tool_call(worker_name: str, worker: Any, action: str) -> bool:
    """True when the step calls a tool with no model in the loop."""
    if worker_name == TOOL_WORKER or isinstance(worker, ToolWorker):
        return True
    tasks, tools = getattr(worker, "tasks", None), getattr(worker, "tools", None)
    return isinstance(tasks, set) and action not in tasks and isinstance(tools, Mapping) and action in tools


def estimate_cost(plan: Plan, context: PolicyContext, *, input_tokens: int = 4000, output_tokens: int = 1000) -> CostEstimate:
    """The plan's cost if each model-backed step (and each critic check) makes calls worth
    `input_tokens` in and `output_tokens` out once, at its worker's model's price.

    Steps that call a tool directly cost nothing. A step whose worker's model
    has no price, or whose worker may call a model planexec cannot see (a
    sub-team, a custom worker), is unpriced: then `dollars` is None.
    """
    prices = context.price_table()
    per_step: dict[str, float] = {}
    unpriced: dict[str, str] = {}
    model_steps = 0
    for step in plan.steps:
        calls = [(step.worker, step.action)] + [(c.worker, "review") for c in step.success_criteria if isinstance(c, CriticCriterion)]
        for worker_name, action in calls:
            worker = context.registry.workers.get(worker_name) if context.registry is not None else None
            if _direct_tool_call(worker_name, worker, action):
                continue
            model = getattr(getattr(worker, "model", None), "name", None)
            if not isinstance(model, str):
                why = "no registry to tell" if context.registry is None else "it is not a single-model role"
                unpriced[step.step_id] = f"worker {worker_name!r} may call models whose cost cannot be estimated ({why})"
                continue
            model_steps += 1
            price = prices.lookup(model)
            if price is None:
                unpriced[step.step_id] = f"worker {worker_name!r} uses {model}, which has no price"
                continue
            per_step[step.step_id] = per_step.get(step.step_id, 0.0) + price.of(input_tokens, output_tokens)
    priced = sum(per_step.values())
    assumptions = (
        f"{model_steps} model-backed step(s) (critic checks included) × {input_tokens} tokens in + {output_tokens} out each, "
        "one attempt, no retries or replans, at each worker's model's price; tool steps cost $0"
    )
    return CostEstimate(
        dollars=None if unpriced else priced,
        priced=priced,
        per_step=per_step,
        unpriced=unpriced,
        model_steps=model_steps,
        assumptions=assumptions,
    )


class MaxEstimatedCost:
    """Rejects a plan whose estimated cost is over `dollars`; escalates when a price is unknown.

    The estimate (see `estimate_cost`) and its assumptions are in the reasons.
    """

    def __init__(self, dollars: float, *, input_tokens: int = 4000, output_tokens: int = 1000, name: str = "max_cost") -> None:
        if isinstance(dollars, bool) or not isinstance(dollars, (int, float)) or dollars < 0:
            raise ValueError(f"max_cost must be a number of dollars of at least 0, got {dollars!r}")
        for label, n in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"{label} must be a whole number of at least 0, got {n!r}")
        self.dollars = float(dollars)
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.name = name

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict:
        """Approve under the limit, reject over it, escalate when the cost cannot be known."""
        est = estimate_cost(plan, context, input_tokens=self.input_tokens, output_tokens=self.output_tokens)
        assumed = f"assumed: {est.assumptions}"
        if est.priced > self.dollars:
            top = sorted(est.per_step.items(), key=lambda kv: -kv[1])[:3]
            costly = ", ".join(f"{sid} ${c:.4f}" for sid, c in top)
            reason = f"estimated cost ${est.priced:.4f} is over max_cost ${self.dollars:.4f} (most: {costly})"
            return PolicyVerdict(decision="reject", policy=self.name, reasons=[reason, assumed], steps=[s for s, _ in top])
        if est.dollars is None:
            reasons = [f"step {sid!r}: cost unknown: {why}" for sid, why in est.unpriced.items()]
            reasons += [f"priced steps come to ${est.priced:.4f} of max_cost ${self.dollars:.4f}", assumed]
            return PolicyVerdict(decision="escalate", policy=self.name, reasons=reasons, steps=list(est.unpriced))
        return PolicyVerdict.from_findings(
            self.name, [], ok=f"estimated cost ${est.dollars:.4f}, within max_cost ${self.dollars:.4f}; {assumed}"
        )


class _ToolRule:
    """A rule about steps that use tools matching glob patterns."""

    rule = ""

    def __init__(self, patterns: str | Iterable[str], *, on_revision: Scope = "changes", name: str | None = None) -> None:
        self.patterns = _patterns(patterns, self.rule)
        if on_revision not in ("changes", "plan"):
            raise ValueError(f"on_revision must be 'changes' or 'plan', got {on_revision!r}")
        self.on_revision = on_revision
        self.name = name or self.rule

    def _uses(self, plan: Plan, context: PolicyContext) -> list[tuple[Step, str, str, bool]]:
        """(step, tool, pattern, surely) for each step that uses a matching tool."""
        found = []
        for step in plan.steps:
            surely, maybe = step_tools(step, context.registry)
            hit = _first_match(surely, self.patterns)
            if hit is not None:
                found.append((step, *hit, True))
            elif (hit := _first_match(maybe, self.patterns)) is not None:
                found.append((step, *hit, False))
        return found


def _use(step: Step, tool: str, pattern: str, surely: bool) -> str:
    how = f"calls {tool!r}" if surely else f"may call {tool!r} through role {step.worker!r}"
    return f"step {step.step_id!r} {how} (matches {pattern!r})"


class ToolsNeedPerson(_ToolRule):
    """Escalates to a person when a step uses (or its role may use) a tool matching a pattern.

    After a replan (an approved version in the context) only new or changed
    steps escalate, unless `on_revision` is ``plan``.
    """

    rule = "needs_person"

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict:
        """Escalate naming each (new or changed) step that uses a listed tool."""
        changed = set(context.changed_steps(plan)) if self.on_revision == "changes" else set(plan.step_ids)
        findings: list[Finding] = []
        for step, tool, pattern, surely in self._uses(plan, context):
            if step.step_id in changed:
                findings.append(("escalate", f"{_use(step, tool, pattern, surely)}: a person must approve it", step.step_id))
        scope: Scope = "changes" if context.previous is not None and self.on_revision == "changes" else "plan"
        which = "new or changed step" if context.previous is not None and self.on_revision == "changes" else "step"
        return PolicyVerdict.from_findings(self.name, findings, scope=scope, ok=f"no {which} uses {' or '.join(self.patterns)}")


class ForbidTools(_ToolRule):
    """Rejects a plan with a step that calls a forbidden tool; escalates when only its role may call one."""

    rule = "forbid"

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict:
        """Reject naming each step that calls a forbidden tool."""
        findings: list[Finding] = []
        for step, tool, pattern, surely in self._uses(plan, context):
            what = "is forbidden" if surely else "is forbidden: a person must check the step will not use it"
            findings.append(("reject" if surely else "escalate", f"{_use(step, tool, pattern, surely)}, which {what}", step.step_id))
        return PolicyVerdict.from_findings(self.name, findings, ok=f"no step uses {' or '.join(self.patterns)}")


class LimitGrants:
    """Narrows what role steps may call: tools taken away, arguments bounded, side effects left out.

    `bounds` maps a tool to bounds on its arguments (``{"write_file":
    {"path": {"paths": ["out/*"]}}}``): a grant of that tool gets the bound
    unless its own is already narrower. `forbid` (names or glob patterns)
    removes grants; `read_only` keeps only read-only tools. A step without
    capabilities is first given all its role's tools, explicitly, so the
    reviewed plan shows what it may call. Applied by `narrow_plan` before
    the review; its verdict approves, listing what it narrowed.
    """

    def __init__(
        self,
        bounds: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        forbid: Iterable[str] = (),
        read_only: bool = False,
        name: str = "grants",
    ) -> None:
        self.bounds = {tool: {arg: Constraint.model_validate(c) for arg, c in args.items()} for tool, args in (bounds or {}).items()}
        self.forbid = tuple(forbid)
        self.read_only = read_only
        self.name = name

    def narrow(self, plan: Plan, context: PolicyContext) -> Plan:
        """The plan with every role step's grants narrowed."""
        steps = []
        for step in plan.steps:
            grants = effective_grants(step, context.registry)
            if grants is None:
                steps.append(step)
                continue
            worker = context.registry.workers.get(step.worker) if context.registry is not None else None
            tools: Mapping[str, Any] = getattr(worker, "tools", None) or {}
            kept = [self._narrowed(g) for g in grants if self._keeps(g, tools)]
            steps.append(step.model_copy(update={"capabilities": kept}))
        narrowed: Plan = plan.model_copy(update={"steps": steps})
        return narrowed

    def _keeps(self, grant: Grant, tools: Mapping[str, Any]) -> bool:
        if any(fnmatch.fnmatchcase(grant.tool, p) for p in self.forbid):
            return False
        return not (self.read_only and not getattr(tools.get(grant.tool), "read_only", False))

    def _narrowed(self, grant: Grant) -> Grant:
        bounds = self.bounds.get(grant.tool)
        if not bounds:
            return grant
        arguments = dict(grant.arguments)
        for arg, bound in bounds.items():
            mine = arguments.get(arg)
            if mine is None or not mine.within(bound):
                arguments[arg] = bound
        return grant.model_copy(update={"arguments": arguments})

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict:
        """Approve: the narrowing already happened; say what each role step may call."""
        notes = []
        for step in plan.steps:
            if step.capabilities is not None and effective_grants(step, context.registry) is not None and step.worker != TOOL_WORKER:
                notes.append(f"step {step.step_id!r} may call " + ("; ".join(grant_label(g) for g in step.capabilities) or "no tools"))
        return PolicyVerdict(decision="approve", policy=self.name, reasons=notes)


class RequiresOrder:
    """A step using a `then` tool must depend, directly or through other steps, on a step using a `before` tool.

    ``RequiresOrder(before="backup_*", then="deploy_*")``: a deploy without a
    backup upstream is rejected, naming the step. A step whose role only may
    call a `then` tool escalates; only a step that surely calls a `before`
    tool counts as one.
    """

    def __init__(self, *, before: str | Iterable[str], then: str | Iterable[str], name: str | None = None) -> None:
        self.before = _patterns(before, "order 'before'")
        self.then = _patterns(then, "order 'then'")
        self.name = name or f"order({'|'.join(self.before)} before {'|'.join(self.then)})"

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict:
        """Reject (or escalate) naming each `then` step without a `before` step upstream."""
        before_steps = {s.step_id for s in plan.steps if _first_match(step_tools(s, context.registry)[0], self.before)}
        rule = f"{' or '.join(self.before)} must come before {' or '.join(self.then)}"
        graph = {s.step_id: s.dependencies for s in plan.steps}
        findings: list[Finding] = []
        for step in plan.steps:
            surely, maybe = step_tools(step, context.registry)
            hit = _first_match(surely, self.then) or _first_match(maybe, self.then)
            if hit is None or before_steps & upstream(graph, step.step_id):
                continue
            sure = hit[0] in surely
            where = (
                "no step of the plan does"
                if not before_steps
                else f"steps that do ({', '.join(sorted(before_steps))}) are not upstream of it"
            )
            reason = f"{_use(step, *hit, sure)} but does not depend, directly or through other steps, on a step using {' or '.join(self.before)}: {where} (rule: {rule})"
            findings.append(("reject" if sure else "escalate", reason, step.step_id))
        return PolicyVerdict.from_findings(self.name, findings, ok=f"kept: {rule}")


class RequireWindows:
    """Tools matching a pattern run only inside its maintenance windows: a plan that uses one must keep them.

    ``RequireWindows({"deploy_*": "Sat 02:00-04:00 America/New_York"})``. A
    step that calls such a tool is kept when the plan's ``windows`` give
    that tool windows that all lie inside the rule's (the engine then starts
    the step only inside them); otherwise the plan is rejected, the reason
    naming the step, the tool, the window and the line to add. A step whose
    role only may call the tool escalates to a person unless its grants name
    the tool and the plan keeps the window for it (then it waits too).
    """

    def __init__(self, windows: Mapping[str, str | Iterable[str]], *, name: str = "windows") -> None:
        if not windows:
            raise ValueError("windows needs at least one tool pattern and its window")
        self.windows: dict[str, list[Window]] = {}
        for pattern, spec in windows.items():
            try:
                self.windows[str(pattern)] = parse_windows(spec)
            except WindowError as exc:
                raise ValueError(f"{pattern!r}: {exc}") from None
        self.name = name

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict:
        """Reject (or escalate) naming each step that may run a windowed tool outside its window."""
        findings: list[Finding] = []
        kept = plan.parsed_windows
        for step in plan.steps:
            surely, maybe = step_tools(step, context.registry)
            granted = {g.tool for g in step.capabilities or ()}
            for tool in sorted(surely | maybe):
                hit = _first_match([tool], list(self.windows))
                if hit is None:
                    continue
                required = self.windows[hit[1]]
                want = " or ".join(w.text for w in required)
                planned = kept.get(tool)
                keeps = planned is not None and all(any(w.within(r) for r in required) for w in planned)
                if keeps and (tool in surely or tool in granted):
                    continue
                sure = tool in surely
                if planned is None:
                    why = f'the plan gives it no window: add "windows": {{"{tool}": "{required[0].text}"}}'
                elif not keeps:
                    why = f"the plan's window ({' or '.join(w.text for w in planned)}) is not inside it"
                else:
                    why = f"its grants do not name {tool!r}, so the step would not wait for the window"
                reason = f"{_use(step, tool, hit[1], sure)}, which runs only in {want}: {why}"
                findings.append(("reject" if sure else "escalate", reason, step.step_id))
        rules = "; ".join(f"{p} only in {' or '.join(w.text for w in ws)}" for p, ws in self.windows.items())
        return PolicyVerdict.from_findings(self.name, findings, ok=f"kept: {rules}")


class RiskEscalation:
    """Escalates a plan whose `risk_level` is in `levels`, a step marked `requires_approval`, or a
    step that calls a tool declared `requires_approval`.

    After a replan only new or changed steps escalate (the plan's risk too,
    unless it went up since the approved version), unless `on_revision` is
    ``plan``.
    """

    def __init__(self, levels: Iterable[str] = ("high", "critical"), *, on_revision: Scope = "changes", name: str = "risk") -> None:
        self.levels = tuple(levels)
        bad = [lv for lv in self.levels if lv not in RISK_ORDER]
        if bad:
            raise ValueError(f"unknown risk level(s) {', '.join(map(repr, bad))}; known: {', '.join(RISK_ORDER)}")
        if on_revision not in ("changes", "plan"):
            raise ValueError(f"on_revision must be 'changes' or 'plan', got {on_revision!r}")
        self.on_revision = on_revision
        self.name = name

    def review(self, plan: Plan, context: PolicyContext) -> PolicyVerdict:
        """Escalate naming the risk level and each step that needs approval."""
        previous = context.previous if self.on_revision == "changes" else None
        changed = context.changed_steps(plan) if previous is not None else plan.step_ids
        findings: list[Finding] = []
        scope: Scope = "changes" if previous is not None else "plan"
        if plan.risk_level in self.levels:
            if previous is None or RISK_ORDER.index(plan.risk_level) > RISK_ORDER.index(previous.risk_level):
                was = f" (was {previous.risk_level!r} in approved v{previous.version})" if previous is not None else ""
                findings.append(("escalate", f"risk_level is {plan.risk_level!r}{was}: a person must approve the plan", None))
                scope = "plan"
            elif changed:
                findings.append(("escalate", f"risk_level is {plan.risk_level!r}: a person must approve the new or changed steps", None))
                findings += [("escalate", f"step {sid!r} is new or changed", sid) for sid in changed]
        for step in plan.steps:
            if step.step_id not in changed:
                continue
            if step.requires_approval:
                findings.append(("escalate", f"step {step.step_id!r} is marked requires_approval", step.step_id))
                continue
            for tool in sorted(step_tools(step, context.registry)[0]):
                if _declares_approval(context.registry, step, tool):
                    findings.append(("escalate", f"step {step.step_id!r} calls {tool!r}, a tool declared requires_approval", step.step_id))
        ok = f"risk_level {plan.risk_level!r}; no {'new or changed ' if previous is not None else ''}step needs approval"
        return PolicyVerdict.from_findings(self.name, findings, scope=scope, ok=ok)


def _declares_approval(registry: Registry | None, step: Step, tool: str) -> bool:
    """True when the tool the step calls (its worker's own, else the registry's) is declared `requires_approval`."""
    if registry is None:
        return False
    tools = getattr(registry.workers.get(step.worker), "tools", None)
    found = tools.get(tool) if isinstance(tools, Mapping) else registry.tools.get(tool)
    return bool(getattr(found, "requires_approval", False))
