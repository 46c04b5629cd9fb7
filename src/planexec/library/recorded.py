"""One recorded run as the training export reads it: what its planner was asked and wrote, its versions, who decided.

Owns `RecordedRun` (a run's summary, its planner's conversation, its plan
versions and first drafts, which versions derive from outside words, its
refused calls, whether a person decided, which versions were denied, why
each replan was asked for; and writing its plans in the format the
prompt asked for: `render`, `final_text`, `plan_key`) and `read_run` (a
run of the store -> a `RecordedRun`, or the reason it gives none: a key of
`training.LEFT_OUT`). A run changed behind the store's back (`verify_run`),
one whose records no longer parse, and one whose setup is not in the shape
`Planner.asked` writes are reasons, never a traceback. A version is
untrusted when a replanner wrote it after the run had read outside words:
an untrusted output, or the error message of a step that may carry them (a
tool whose output is untrusted or not recorded as trusted, a role that
called one, a sub-team; any step of a run that recorded no tools' trust),
or when a step of it is marked ``untrusted_from``. Imports `store`,
`engine` records, `plan`, `planning.draft_schema` and `errors`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from planexec.engine.results import PlanVersion
from planexec.errors import PlanError, StoreError
from planexec.plan.compact import parse_compact, print_compact
from planexec.plan.model import Plan
from planexec.planning.draft_schema import draft_to_plan_data, plan_to_draft
from planexec.store.audit import AuditedStore, verify_run
from planexec.store.base import ApprovalState, RunStore, RunSummary

__all__ = ["RecordedRun", "read_run", "run_status"]

_NOT_A_PERSON = frozenset({"--yes", "policy", "nobody", "auto_approve", ""})
_ROLES = frozenset({"system", "user", "assistant"})


@dataclass(slots=True)
class RecordedRun:
    """What one run gives: its summary, what the planner was asked, its versions and drafts, and who decided."""

    summary: RunSummary
    asked: dict[str, Any]  # its prompt checked: a list of role/content texts
    setup: dict[str, Any]  # its review and reuse checked: objects, when there
    versions: list[PlanVersion]
    drafts: list[Any]  # PlanDrafted events of version 1, in order
    untrusted_versions: set[int]  # versions written by a replanner that had read untrusted output, or marking a step so
    refused_calls: int
    person: bool
    denied: list[int]  # versions a person or a policy denied in the store (not replaced by an edit)
    replans: dict[int, str]  # version -> why the version before it was replaced

    @property
    def goal(self) -> str:
        return self.summary.goal

    @property
    def prompt(self) -> list[dict[str, str]]:
        return [{"role": m["role"], "content": m["content"]} for m in self.asked["prompt"]]

    @property
    def format(self) -> str:
        return "compact" if self.asked.get("format") == "compact" else "json"

    @property
    def final_denied(self) -> bool:
        """True when the plan the run ended with was denied in the store: it never ran."""
        return self.versions[-1].version in self.denied

    def render(self, plan: Plan) -> str | None:
        """`plan` as the planner's prompt asked for it written: what a draft says (`plan_to_draft`), in the JSON draft or
        the compact form; None when the compact form cannot write it (a step id of digits only, a parameter that is not
        a name)."""
        draft = plan_to_draft(plan)
        if self.format != "compact":
            return json.dumps(draft, ensure_ascii=False)
        try:  # the draft's fields only: what only a reviewer sets (criteria, timeouts, approvals) is no planner's answer
            return print_compact(Plan.from_data({"plan_id": plan.plan_id, "goal": plan.goal, **draft}))
        except (PlanError, ValueError):
            return None

    def plan_key(self, text: str) -> str:
        """The plan `text` writes, written one way (`render` of the plan the prompt's format reads in it): two texts of
        the same plan, spaced or ordered differently, have the same key; a text that reads as no plan is its own key."""
        try:
            if self.format == "compact":
                plan = parse_compact(text, goal=self.goal, plan_id="read")
            else:
                plan = Plan.from_data(draft_to_plan_data(json.loads(text), self.goal, plan_id="read"))
        except (PlanError, ValueError, TypeError):
            return text.strip()
        return self.render(plan) or text.strip()

    def final_text(self) -> str | None:
        """The plan that ran last, in the prompt's format: the model's own words when that plan is the draft it wrote
        (None when the format cannot write it, see `render`)."""
        final = self.versions[-1].plan
        accepted = next((d for d in reversed(self.drafts) if not d.problems and d.text), None)
        if accepted is not None and accepted.content_hash == final.content_hash:
            return str(accepted.text)
        return self.render(final)

    def untrusted(self, version: int) -> bool:
        return version in self.untrusted_versions

    def metadata(self, **more: Any) -> dict[str, Any]:
        final = self.versions[-1].plan
        reuse = self.setup.get("reuse") or {}
        return {
            "run_id": self.summary.run_id, "goal": self.goal, "status": run_status(self.summary),
            "started_at": self.summary.started_at.isoformat(), "planner_model": self.asked.get("model"),
            "format": self.format, "plan_hash": final.content_hash, "plan_version": final.version,
            "repairs": max(len(self.drafts) - 1, 0), "template": reuse.get("template") if not reuse.get("fallback") else None,
            "reviewed_by_person": self.person, **more,
        }  # fmt: skip


def read_run(store: RunStore, summary: RunSummary) -> RecordedRun | str:
    """What `summary`'s run gives, or the reason it gives nothing (a key of `LEFT_OUT`)."""
    if summary.parent_run_id is not None:
        return "sub_run"
    run_id = summary.run_id
    try:
        if isinstance(store, AuditedStore) and not verify_run(store, run_id).ok:
            return "tampered"  # what changed behind the store's back is never trained on
        events = store.events(run_id)
        started = next((e for e in events if e.type == "run_started"), None)
        setup = dict(started.setup) if started is not None else {}
        if "single" in setup:
            return "single_agent"
        asked = setup.get("planner")
        if not isinstance(asked, dict) or not asked.get("prompt"):
            return "no_prompt"
        if not _well_formed(setup):
            return "malformed"
        versions = store.plan_versions(run_id)
        if not versions:
            return "no_plan"
        approvals = [a for a in store.approvals(run_id) if a.step_id is None]
    except (StoreError, ValueError):  # a body that no longer parses as the event it was (ValidationError is a ValueError)
        return "unreadable"
    # a replan's drafts answer the replanner's conversation, which is not kept
    drafts = [e for e in events if e.type == "plan_drafted" and e.version == 1]
    trust = None if "untrusted_tools" not in asked else (set(asked["trusted_tools"]), set(asked["untrusted_tools"]))
    untrusted_versions, replans, refused_calls = _history(events, trust)
    for v in versions:
        if any(s.untrusted_from for s in v.plan.steps):
            untrusted_versions.add(v.version)
    edits = {v.version for v in versions if v.reason.startswith("edited by ")}
    by_version = {v.plan.content_hash: v.version for v in versions}
    person = bool(edits) or (setup.get("review") or {}).get("by") == "person"
    denied = []
    for a in approvals:
        if a.state is ApprovalState.APPROVED and (a.by or "") not in _NOT_A_PERSON:
            person = True
        if a.state is ApprovalState.DENIED and a.content_hash in by_version:
            version = by_version[a.content_hash]
            if version + 1 not in edits:  # an edit's denial is the edit's pair, not a refusal
                denied.append(version)
                person = person or (a.by or "") not in _NOT_A_PERSON
    return RecordedRun(
        summary=summary, asked=asked, setup=setup, versions=versions, drafts=drafts, untrusted_versions=untrusted_versions,
        refused_calls=refused_calls, person=person, denied=denied,
        replans={v: why for v, why in replans.items() if v not in edits},
    )  # fmt: skip


def _well_formed(setup: dict[str, Any]) -> bool:
    """Whether a run's setup says what the planner was asked in the shape `Planner.asked` writes (a setup edited, or
    written by another program, is left out rather than read wrong)."""
    asked = setup["planner"]
    prompt, tools = asked.get("prompt"), [asked.get(key, []) for key in ("trusted_tools", "untrusted_tools")]
    return (
        isinstance(prompt, list)
        and all(isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content"), str) for m in prompt)
        and isinstance(asked.get("model", ""), str)
        and asked.get("format", "json") in ("json", "compact")
        and all(isinstance(names, list) and all(isinstance(n, str) for n in names) for names in tools)
        and all(isinstance(setup.get(key) or {}, dict) for key in ("review", "reuse"))
    )


def _history(events: list[Any], trust: tuple[set[str], set[str]] | None) -> tuple[set[int], dict[int, str], int]:
    """From a run's events: the versions written after the run had read outside words (an untrusted output, or the
    error message of a step that may carry them, see `_outside_words`), why each replan was asked for, and the refused calls."""
    untrusted: set[int] = set()
    replans: dict[int, str] = {}
    refused, outside, why = 0, False, ""
    started: dict[str, tuple[str, str]] = {}  # step -> the worker and action of its last attempt
    tools: dict[str, set[str]] = {}  # step -> the tools it called (a role's calls)
    teams: set[str] = set()  # steps a sub-team worked
    for e in events:
        if e.type == "step_started":
            started[e.step_id] = (e.worker, e.action)
        elif e.type == "tool_call_decided":
            tools.setdefault(e.step_id, set()).add(e.call.tool)
            refused += not e.call.allowed
        elif e.type == "sub_run_event":
            teams.add(e.step_id)
        elif e.type == "step_succeeded" and e.output.untrusted:
            outside = True
        elif e.type == "step_failed" and e.then not in ("retry", "fallback"):  # a failure the replanner and joiner read
            worker, action = started.get(e.step_id, (e.worker, ""))
            outside = outside or _outside_words(worker, action, tools.get(e.step_id, set()), e.step_id in teams, trust)
        elif e.type == "replan_started":
            why = e.reason
        elif e.type == "plan_revised":
            replans[e.version] = why
            if outside:
                untrusted.add(e.version)
    return untrusted, replans, refused


def _outside_words(worker: str, action: str, called: set[str], team: bool, trust: tuple[set[str], set[str]] | None) -> bool:
    """Whether a failed step's error message may carry words from outside: a tool's whose output is untrusted (called
    directly, or through a worker of its own, as a remote A2A agent is) or not recorded as trusted; a role's that called
    such a tool; a sub-team's (its steps' errors are its own); any step's when the run recorded no tools' trust."""
    if trust is None or team:
        return True
    trusted, untrusted = trust
    if action in untrusted or (worker == "tool" and action not in trusted):
        return True
    return not called <= trusted


def run_status(summary: RunSummary) -> str:
    return str(getattr(summary.status, "value", summary.status))
