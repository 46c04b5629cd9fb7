"""The gate every tool call inside a role worker passes: the plan's grants, the contract's rules, then approval.

Owns `Gate` (one per attempt of a role step), the records a decision
crosses boundaries as (`CallRequest`, what a person approving a call sees;
`CallRecord`, what the run records of every call, run or refused), the
`GateHooks` protocol through which the engine answers approvals and records
calls, and `GATE_HOOKS`, the context variable it sets around an attempt.

The rules, in order (the first that refuses decides; its name is the rule):

1. ``unknown_tool``: the worker has no such tool.
2. ``not_granted``: the step's capabilities do not grant it (a step without
   capabilities is granted its worker's tools, unbounded, none pre-approved).
3. ``outside_grant``: an argument breaks its grant's constraint.
4. ``call_limit``: the grant's `max_calls` is spent.
4a. ``outside_window``: the plan gives the tool maintenance windows
   (`Plan.windows`) and none is open on the engine's clock: a role calls
   such a tool only in its window, as a step naming it starts only then.
5. ``quarantine``: the worker has read untrusted text (a referenced input
   or a tool output declared untrusted) and the tool is side-effecting (not
   read-only). A reader of untrusted text returns data; it does not act,
   except for a call the reviewed plan pre-approved with every argument it
   passes bounded (free text such as a message's body aside): the plan
   fixed where that effect lands.
6. ``untrusted_argument``: an argument the tool declares sensitive (a path,
   a recipient, a URL, an amount, code; every destination of a tool that
   reaches the network) was not bounded by the grant and its value is not
   one the user or the reviewed plan gave as a value (a literal of the
   step's parameters or grants, a value of a trusted input) while the
   worker has read untrusted text: untrusted data chose it. Text that
   merely occurs in the goal or an instruction grants nothing.
7. ``approval``: a side-effecting call the plan did not pre-approve
   (`Grant.approved`) is approved per call, with its arguments shown.

Rules 5 and 6 are escalations: a person (an approver whose `person` is
true) is asked, with the provenance chain; anyone else (``--yes``, a
policy, no approver) refuses. With ``enforce=False`` (the engine's
`enforce_contract`, for measuring what the defences cost) only rule 1 and
the old step-level approval apply. Imports `plan`, `records`, `workers.io`
and `workers.tools`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

from planexec.errors import CallRefusedError
from planexec.plan.capabilities import Grant
from planexec.plan.references import find_references
from planexec.records import OMIT_EMPTY, Record
from planexec.workers.io import Source, StepCall, derive_untrusted, merge_sources
from planexec.workers.tools import Tool

__all__ = [
    "CONTRACT_STOPS",
    "GATE_HOOKS",
    "NO_APPROVER",
    "CallApprover",
    "CallRecord",
    "CallRequest",
    "Gate",
    "GateHooks",
    "admit_direct",
    "default_grants",
]

RequestKind = Literal["call", "escalation"]
CONTRACT_STOPS = frozenset({"quarantine", "untrusted_argument"})
"""The escalations: refused (no person approved), they stop a single agent's work and a tool step's own call, and the run
ends `incomplete` with the reason."""
_SHOWN = 2_000  # characters of a string argument kept in a request or a record
NO_APPROVER = (
    "no approver is configured: approve the plan's own calls with --yes (or call_approver=approve_calls), "
    "give the Engine or Team a call_approver, or record a person's decisions in the store (planexec approve)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CallRequest(Record):
    """One tool call waiting for a decision, as the person deciding sees it.

    `kind` is ``call`` for a side-effecting call the plan did not
    pre-approve, ``escalation`` for one the contract would refuse (`rule`
    and `reason` say why; `chain` is where the deciding data came from).
    `digest` identifies exactly this call (step, tool, arguments), so a
    durable decision is found again after a restart.
    """

    run_id: str
    step_id: str
    worker: str
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    kind: RequestKind = "call"
    rule: str | None = None
    reason: str = ""
    chain: list[str] = field(default_factory=list)
    digest: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallRecord(Record):
    """What the run records of one tool call inside a worker: allowed or refused (with the rule), and whether it ran.

    `rule` of a refused call: ``unknown_tool``, ``not_granted``, ``outside_grant``, ``call_limit``, ``outside_window``,
    ``quarantine``, ``untrusted_argument``, ``approval_required`` (no approver configured),
    ``approval_denied``, ``bad_arguments`` (the tool's own input schema refused them) or
    ``turn_limit``. `arguments` keep at most 2,000 characters of each string, marked where cut;
    `truncated` names the arguments that were. `result_chars` and `result_kept`, when the call's
    result was too long for the model's conversation: how many characters it had and how many the model read.
    """

    step_id: str
    attempt: int
    worker: str
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    allowed: bool
    rule: str | None = None
    reason: str = ""
    chain: list[str] = field(default_factory=list)
    decided_by: str = "plan"
    ran: bool = False
    error: str | None = None
    truncated: Annotated[list[str], OMIT_EMPTY] = field(default_factory=list)  # arguments shown cut (see `arguments`)
    result_chars: Annotated[int, OMIT_EMPTY] = 0  # the result's length when it was cut for the model (0: not cut)
    result_kept: Annotated[int, OMIT_EMPTY] = 0


# asked about one call; True approves. A sync approver may block on a person: it runs off the event loop.
CallApprover = Callable[[CallRequest], "bool | Awaitable[bool]"]


class GateHooks(Protocol):
    """What the engine gives a gate: approvals of calls, a place to record them, and whether the run's goal is trusted.

    `goal_trusted` is False for a sub-team's run whose goal carries untrusted
    text (its parent step referenced untrusted output): its workers start
    quarantined and the goal is no source of trusted values.
    """

    enforce: bool
    goal_trusted: bool

    @property
    def approver(self) -> Any:
        """Who decides the run's calls; None when no one was configured (a plan's own call is then `approval_required`)."""
        ...

    async def approve_call(self, request: CallRequest) -> tuple[bool, str]:
        """(approved, who decided) for a call or an escalation."""
        ...

    def record_call(self, record: CallRecord) -> None:
        """Keep the call in the run's record (an event)."""
        ...

    def window_closed(self, tool: str) -> str | None:
        """Why `tool` may not run now (the plan's maintenance window for it is closed); None when it may."""
        ...


# set by the engine around one attempt; None when a worker runs outside an engine
GATE_HOOKS: ContextVar[GateHooks | None] = ContextVar("planexec_gate_hooks", default=None)


def default_grants(tools: Mapping[str, Tool]) -> list[Grant]:
    """What a step without capabilities may call: its worker's tools, unbounded, none pre-approved (side effects ask per call)."""
    return [Grant(tool=name) for name in tools]


@dataclass
class _Decision:
    allowed: bool
    rule: str | None = None
    reason: str = ""
    chain: list[str] = field(default_factory=list)
    decided_by: str = "plan"
    breaks_plan: bool = False  # a refusal of the plan's own call (granted, in bounds): the step cannot do what it says


class Gate:
    """The gate for one attempt of a role step: see the module docstring for the rules."""

    def __init__(self, call: StepCall, tools: Mapping[str, Tool]) -> None:
        self.call = call
        self.tools = tools
        self.hooks = GATE_HOOKS.get()
        self.enforce = self.hooks.enforce if self.hooks is not None else True
        step = call.step
        self.grants = {g.tool: g for g in (step.capabilities if step.capabilities is not None else default_grants(tools))}
        self.counts: dict[str, int] = {}
        referenced = step.references
        inputs = [out for sid, out in call.context.items() if sid in referenced]
        # the worker has read untrusted text from the start when any input it sees is untrusted
        self.sources: list[Source] = []  # what this attempt adds: each untrusted tool output it read
        inherited, self.more = derive_untrusted((), inputs)  # the untrusted origins its inputs name
        self.inherited = [Source.from_key(key) for key in inherited]
        goal_trusted = self.hooks.goal_trusted if self.hooks is not None else True
        # a step a replanner wrote with words copied from untrusted output: its own words are untrusted too
        self.marked = list(step.untrusted_from or [])
        self.tainted = any(out.untrusted for out in inputs) or not goal_trusted or bool(self.marked)
        self.trusted_values = _trusted_values(
            call, [out.value for out in inputs if not out.untrusted], plan=goal_trusted and not self.marked
        )
        self.refused: list[dict[str, Any]] = []

    async def admit_direct(self, tool: Tool) -> None:
        """A step that names the tool itself (the plan shows the call): refuse it when untrusted data chose a sensitive argument.

        The reviewed plan is the approval of the call's shape; what it cannot
        show is a value a reference brings in at run time. A sensitive
        argument whose value comes (whole or in part) from an untrusted
        output, and that the step's grant for the tool does not bound, is an
        escalation: a person decides, anyone else refuses
        (`CallRefusedError`, rule ``untrusted_argument``).
        """
        if not self.enforce:
            return
        call = self.call
        grant = self.grants.get(tool.name) if call.step.capabilities is not None else None
        outside = grant.admits(call.parameters) if grant is not None else None
        if outside is not None:
            name, why = outside
            self._refused(tool.name, call.parameters, "outside_grant", f"argument {name!r}: {why}")
            raise CallRefusedError(
                f"step {call.step_id!r}: the call to {tool.name!r} was refused (outside_grant: argument {name!r}: {why})",
                tool=tool.name,
                rule="outside_grant",
            )
        marked = list(call.step.untrusted_from or [])
        for name in sorted(tool.sensitive & call.parameters.keys()):
            if grant is not None and grant.bounds(name):
                continue
            refs = {ref for ref, _ in find_references(call.step.parameters.get(name))}
            tainted = [out for sid, out in call.context.items() if sid in refs and out.untrusted]
            if not tainted and not marked:
                continue
            chain = marked + _chain(
                merge_sources(*(out.provenance.untrusted_origins() for out in tainted)), any(o.provenance.more_untrusted for o in tainted)
            )
            value = call.parameters[name]
            reason = (
                f"argument {name!r} = {_short(value)} comes from untrusted data and no grant bounds it (a tool whose output is "
                "its own computation, not outside text, declares untrusted_output=False)"
            )
            if marked and not tainted:
                reason = f"argument {name!r} = {_short(value)} was written by a replanner from untrusted output and no grant bounds it"
            decision = await self._escalate(tool.name, call.parameters, "untrusted_argument", reason, chain)
            if not decision.allowed:
                raise CallRefusedError(
                    f"step {call.step_id!r}: the call to {tool.name!r} was refused (untrusted_argument: {decision.reason}); "
                    f"provenance: {' <- '.join(chain)}",
                    tool=tool.name,
                    rule="untrusted_argument",
                    chain=chain,
                )

    async def admit(self, tool: str, arguments: dict[str, Any]) -> _Decision:
        """Decide one call; ask for approval when a rule says so; record the decision."""
        decision = await self._decide(tool, arguments)
        if not decision.allowed:
            self.refused.append({"tool": tool, "rule": decision.rule, "reason": decision.reason})
        else:
            self.counts[tool] = self.counts.get(tool, 0) + 1
        return decision

    def ran(
        self, tool: str, arguments: dict[str, Any], decision: _Decision, *, error: str | None = None, cut: tuple[int, int] = (0, 0)
    ) -> None:
        """After an allowed call ran: its output taints the worker when it is untrusted; the call is recorded
        (`cut`: its result's length and how much of it the model read, when it was cut)."""
        found = self.tools.get(tool)
        if found is not None and found.untrusted_output:
            self.tainted = True
            self.sources = merge_sources(self.sources, [Source(kind="tool", step_id=self.call.step_id, tool=tool, untrusted=True)])
        self._record(tool, arguments, decision, ran=True, error=error, result_cut=cut)

    def refuse(self, tool: str, arguments: dict[str, Any], rule: str, reason: str) -> _Decision:
        """Refuse a call for a reason of the worker's own (the turn limit), recorded like any refusal."""
        self.refused.append({"tool": tool, "rule": rule, "reason": reason})
        return self._refused(tool, arguments, rule, reason)

    def refuse_text(self, tool: str, decision: _Decision) -> str:
        """What the model reads for a refused call: that it did not run, and why."""
        return f"error: the call to {tool!r} was refused ({decision.rule}: {decision.reason}); it did not run"

    async def _decide(self, tool: str, arguments: dict[str, Any]) -> _Decision:
        found = self.tools.get(tool)
        if found is None:
            return self._refused(tool, arguments, "unknown_tool", f"no tool {tool!r}; available: {', '.join(sorted(self.tools)) or 'none'}")
        if not self.enforce:
            return await self._legacy(found, tool, arguments)
        grant = self.grants.get(tool)
        if grant is None:
            granted = ", ".join(sorted(self.grants)) or "none"
            return self._refused(tool, arguments, "not_granted", f"step {self.call.step_id!r} is not granted {tool!r} (granted: {granted})")
        outside = grant.admits(arguments)
        if outside is not None:
            name, why = outside
            return self._refused(tool, arguments, "outside_grant", f"argument {name!r}: {why}")
        if grant.max_calls is not None and self.counts.get(tool, 0) >= grant.max_calls:
            return self._refused(tool, arguments, "call_limit", f"{tool!r} may be called {grant.max_calls} time(s) in this step")
        closed = self.hooks.window_closed(tool) if self.hooks is not None else None
        if closed is not None:  # a role's call of a windowed tool, outside its window: the plan's window is the contract
            return self._refused(tool, arguments, "outside_window", closed)
        chain = [*self.marked, *_chain(merge_sources(self.inherited, self.sources), self.more)] if self.tainted else []
        if self.tainted and not found.read_only:
            loose = _unbounded(found, grant, arguments)
            if grant.approved and not loose:
                # the reviewed plan fixed where this effect lands (every argument bounded, free text aside) and pre-approved it
                return _Decision(True, chain=chain)
            reason = (
                f"{tool!r} changes things and this worker has read untrusted text; a reader of untrusted text returns data, it does not act"
            )
            if grant.approved:
                reason += (
                    f" (the plan pre-approved {tool!r} but left {', '.join(map(repr, loose))} unbounded, so untrusted data could choose)"
                )
            return await self._escalate(tool, arguments, "quarantine", reason, chain)
        if self.tainted:
            for name in sorted(found.sensitive & arguments.keys()):
                if not grant.bounds(name) and not _is_trusted(arguments[name], self.trusted_values):
                    reason = f"argument {name!r} = {_short(arguments[name])} comes from untrusted data and the grant does not bound it"
                    return await self._escalate(tool, arguments, "untrusted_argument", reason, chain)
        if (not found.read_only or found.requires_approval) and not grant.approved:
            return await self._approve(
                tool, arguments, "call", None, f"{tool!r} changes things; the plan did not pre-approve this call", chain
            )
        return _Decision(True, chain=chain)

    async def _legacy(self, found: Tool, tool: str, arguments: dict[str, Any]) -> _Decision:
        """Without the contract: every tool of the worker, step-level approval for tools that require it."""
        if found.requires_approval and not self.call.step.requires_approval:
            return self._refused(
                tool, arguments, "approval_required", f"tool {tool!r} requires approval and this step was not approved for it"
            )
        return _Decision(True)

    async def _escalate(self, tool: str, arguments: dict[str, Any], rule: str, reason: str, chain: list[str]) -> _Decision:
        return await self._approve(tool, arguments, "escalation", rule, reason, chain)

    async def _approve(
        self, tool: str, arguments: dict[str, Any], kind: RequestKind, rule: str | None, reason: str, chain: list[str]
    ) -> _Decision:
        denied_rule = rule or "approval_required"
        if self.hooks is None:
            return self._refused(tool, arguments, denied_rule, f"{reason}; no one can approve it here", chain)
        if kind == "call" and self.hooks.approver is None:
            refused = self._refused(tool, arguments, "approval_required", f"{reason}; {NO_APPROVER}", chain, by="no approver")
            refused.breaks_plan = True
            return refused
        call = self.call
        request = CallRequest(
            run_id=call.run_id,
            step_id=call.step_id,
            worker=call.worker,
            tool=tool,
            arguments=_shown(arguments)[0],
            kind=kind,
            rule=rule,
            reason=reason,
            chain=chain,
            digest=_digest(call, tool, arguments),
        )
        approved, by = await self.hooks.approve_call(request)
        if approved:
            return _Decision(True, rule=rule, reason=reason, chain=chain, decided_by=by)
        refused = self._refused(
            tool, arguments, denied_rule if rule else "approval_denied", f"{reason}; not approved by {by}", chain, by=by
        )
        refused.breaks_plan = kind == "call"
        return refused

    def _refused(
        self, tool: str, arguments: dict[str, Any], rule: str, reason: str, chain: list[str] | None = None, *, by: str = "plan"
    ) -> _Decision:
        decision = _Decision(False, rule=rule, reason=reason, chain=chain or [], decided_by=by)
        self._record(tool, arguments, decision, ran=False)
        return decision

    def _record(
        self,
        tool: str,
        arguments: dict[str, Any],
        decision: _Decision,
        *,
        ran: bool,
        error: str | None = None,
        result_cut: tuple[int, int] = (0, 0),
    ) -> None:
        if self.hooks is None:
            return
        call = self.call
        shown, cut = _shown(arguments)
        self.hooks.record_call(
            CallRecord(
                step_id=call.step_id,
                attempt=call.attempt,
                worker=call.worker,
                tool=tool,
                arguments=shown,
                truncated=cut,
                allowed=decision.allowed,
                rule=decision.rule,
                reason=decision.reason,
                chain=decision.chain,
                decided_by=decision.decided_by,
                ran=ran,
                error=error,
                result_chars=result_cut[0],
                result_kept=result_cut[1],
            )
        )


async def admit_direct(call: StepCall, tool: Tool, tools: Mapping[str, Tool]) -> None:
    """`Gate.admit_direct` for a step that names the tool; free when no grant bounds it and no sensitive argument takes a referenced value."""
    if (tool.sensitive and call.context) or call.step.capabilities is not None or call.step.untrusted_from:
        await Gate(call, tools).admit_direct(tool)


def _chain(untrusted: list[Source], more: bool) -> list[str]:
    """The untrusted origins as a person reads them, with a last line when more upstream were left out of the summary."""
    chain = [s.label() for s in untrusted if s.untrusted]
    if more:
        chain.append("more untrusted origins upstream (planexec show lists every one)")
    return chain


def _unbounded(tool: Tool, grant: Grant, arguments: Mapping[str, Any]) -> list[str]:
    """The arguments of a call that untrusted data could choose: sensitive (not free text), not bounded by the grant,
    and not the tool's own default (passing a default chooses nothing the call could not have left out)."""
    return sorted(
        name
        for name, value in arguments.items()
        if name in tool.chooses and not grant.bounds(name) and not (name in tool.defaults and _same(tool.defaults[name], value))
    )


def _trusted_values(call: StepCall, trusted_inputs: list[Any], *, plan: bool = True) -> set[tuple[str, Any]]:
    """The values an argument may take and still be trusted: those the user or the reviewed plan gave as values.

    They are the literals of the step's parameters and of its grants' value
    bounds, and every value in a trusted input (a typed slot of a trusted
    step, a trusted step's answer). The goal and the instruction are prose,
    not values: a name they mention ("do not open secrets.txt") grants
    nothing. When the goal carries untrusted text (`plan` False), so does
    every plan written for it: only trusted inputs count.
    """
    out: set[tuple[str, Any]] = set()
    sources: list[Any] = list(trusted_inputs)
    if plan:
        step = call.step
        sources.append(step.parameters)
        for grant in step.capabilities or ():
            for bound in grant.arguments.values():
                sources.append(bound.values or [])
    for value in sources:
        out.update(_leaves(value))
    return out


def _leaves(value: Any) -> list[tuple[str, Any]]:
    """Every string and number in a value as a (kind, value) key, references left out (their values have their own provenance)."""
    if isinstance(value, str):
        if find_references(value):
            return []  # a reference, or a text built around one: the value arrives at run time
        return [("s", value)]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [("n", float(value))]
    if isinstance(value, Mapping):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return []


def _is_trusted(value: Any, values: set[tuple[str, Any]]) -> bool:
    """True when the value carries no choice of its own, or is, whole, a value the user or the plan gave."""
    if value is None or isinstance(value, bool) or value == "":
        return True
    if isinstance(value, str):
        return ("s", value) in values
    if isinstance(value, (int, float)):
        return ("n", float(value)) in values
    if isinstance(value, Mapping):
        return all(_is_trusted(v, values) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_is_trusted(v, values) for v in value)
    return False


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _shown(arguments: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Arguments as a request or record keeps them, each string longer than `_SHOWN` characters (at any depth) cut
    and saying so; and the names of the arguments cut."""
    shown, cut = {}, []
    for name, value in arguments.items():
        shown[name], was_cut = _cut(value)
        if was_cut:
            cut.append(name)
    return shown, cut


def _cut(value: Any) -> tuple[Any, bool]:
    if isinstance(value, str):
        if len(value) <= _SHOWN:
            return value, False
        return f"{value[:_SHOWN]}… [truncated: {_SHOWN:,} of {len(value):,} characters shown]", True
    if isinstance(value, dict):
        pairs = {k: _cut(v) for k, v in value.items()}
        if any(c for _, c in pairs.values()):
            return {k: v for k, (v, _) in pairs.items()}, True
        return value, False
    if isinstance(value, (list, tuple)):
        items = [_cut(v) for v in value]
        if any(c for _, c in items):
            return [v for v, _ in items], True
        return value, False
    return value, False


def _digest(call: StepCall, tool: str, arguments: dict[str, Any]) -> str:
    blob = json.dumps([call.run_id, call.step_id, tool, arguments], sort_keys=True, default=str, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
