"""What a person changes from the console: decide an approval, and edit a plan that waits for approval.

Owns `decide` (approve or deny one pending request, recorded under the
signed-in name, through `RunStore.decide_approval` exactly as ``planexec
approve`` does) and the edit of a pending plan: `check_edit` parses the
edited JSON and lists every problem by step (the plan's shape and graph
here, then, when the run loaded tools modules, ``planexec validate
--tools ...`` in a child process for what only the registry knows: unknown
tools, actions and parameters), and `submit_edit` makes a valid edit the
plan's next version. A waiting run's engine holds its plan in memory and
accepts only the exact version it asked about, so the edit cannot slip
into that process: the pending version is denied (the reason names the
edit and who made it; nothing of it ran) and the edit starts as a new run,
``RUN_ID-vN``, whose plan is version N revising the old one, run by
``planexec run --plan`` with the original run's tools, in the console's
folder. A policy shipped here (``needs_person: ["*"]``) makes it wait for
a person's approval in the inbox: an edit is reviewed like any plan, the
project's own policies included. Imports the store and `plan`; starts the
CLI only as a separate process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from planexec.errors import PlanParseError, Problem
from planexec.plan.model import Plan
from planexec.plan.validation import validate_plan
from planexec.store import Approval, RunStore

__all__ = ["EditCheck", "check_edit", "decide", "find_pending", "run_setup", "submit_edit"]

_VALIDATE_TIMEOUT = 60.0


def find_pending(store: RunStore, approval_id: int) -> Approval | None:
    """The pending approval with this id, or None (decided meanwhile, or unknown)."""
    for a in store.approvals(pending_only=True):
        if a.approval_id == approval_id:
            return a
    return None


def decide(store: RunStore, approval: Approval, *, approved: bool, by: str, reason: str | None) -> Approval:
    """Approve or deny exactly this request (its content hash); `ApprovalError` when it is no longer pending."""
    return store.decide_approval(
        approval.run_id, step_id=approval.step_id, approved=approved, by=by, reason=reason or None, content_hash=approval.content_hash
    )


@dataclass
class EditCheck:
    """An edit checked: the `plan` when it is valid, else every problem, by step (`by_step`) and for the plan as a whole (`general`)."""

    text: str
    plan: Plan | None = None
    general: list[Problem] = field(default_factory=list)
    by_step: dict[str, list[Problem]] = field(default_factory=dict)
    step_ids: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[Problem]:
        """Every problem, the plan's first."""
        return [*self.general, *(p for ps in self.by_step.values() for p in ps)]


def run_setup(store: RunStore, run_id: str) -> dict[str, Any]:
    """How the run was set up (its `RunStarted` setup: the tools modules a resume loads again)."""
    for e in store.events(run_id, limit=20):
        if e.type == "run_started":
            setup: dict[str, Any] = dict(e.setup)
            return setup
    return {}


def check_edit(text: str, *, old: Plan, tools: list[str], cwd: Path) -> EditCheck:
    """Every problem with the edited plan `text` (see the module docstring); its `plan` (the next version of `old`) when there is none."""
    check = EditCheck(text=text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        check.general.append(Problem("malformed_json", f"{exc.msg} at line {exc.lineno} column {exc.colno}"))
        return check
    if isinstance(data, dict):
        data.pop("content_hash", None)  # the editor shows it; it is computed, not edited
        data["version"], data["revises"] = old.version + 1, old.version
        check.step_ids = [str(s.get("id")) for s in data.get("steps", []) if isinstance(s, dict) and "id" in s]
    try:
        plan = Plan.from_data(data)
    except PlanParseError as exc:
        _sort(check, exc.problems)
        return check
    # with tools, `planexec validate` checks everything at once (graph and registry); without, the graph is all there is to check
    problems = _registry_problems(plan, tools, cwd) if tools else validate_plan(plan)
    _sort(check, problems)
    if not check.problems:
        check.plan = plan
    return check


def _sort(check: EditCheck, problems: list[Problem]) -> None:
    for p in problems:
        if p.step_id is not None and p.step_id in check.step_ids:
            check.by_step.setdefault(p.step_id, []).append(p)
        else:
            check.general.append(p)


def _registry_problems(plan: Plan, tools: list[str], cwd: Path) -> list[Problem]:
    """Every problem ``planexec validate --json --tools ...`` finds: the graph's, and what the run's tools know (tools, actions, parameters)."""
    folder = cwd / ".planexec" / "web"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"check-{os.getpid()}.json"
    path.write_text(plan.to_json(indent=2))
    command = [sys.executable, "-m", "planexec", "validate", str(path), "--json", *(a for t in tools for a in ("--tools", t))]
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=_VALIDATE_TIMEOUT, stdin=subprocess.DEVNULL, check=False
        )
    except subprocess.TimeoutExpired:
        return [Problem("not_checked", f"checking the plan against the tools took longer than {_VALIDATE_TIMEOUT:g}s")]
    finally:
        path.unlink(missing_ok=True)
    if done.returncode == 0:
        return []
    try:
        found = json.loads(done.stdout)
        return [Problem(p["rule"], p["message"], step_id=p.get("step_id"), field=p.get("field")) for p in found]
    except (ValueError, KeyError, TypeError):
        why = (done.stderr or done.stdout).strip().splitlines()
        return [Problem("not_checked", f"the tools could not be loaded to check the plan: {why[-1] if why else done.returncode}")]


def submit_edit(store: RunStore, approval: Approval, plan: Plan, *, by: str, store_target: str, tools: list[str], cwd: Path) -> str:
    """Deny the pending version in favour of the valid edit `plan` and start the edit as a new run; the new run's id.

    The new run waits for approval of its plan in the inbox (see the module docstring).
    """
    new_id = _free_id(store, f"{approval.run_id}-v{plan.version}")
    folder = cwd / ".planexec" / "web"
    folder.mkdir(parents=True, exist_ok=True)
    plan_file = folder / f"{new_id}.plan.json"
    plan_file.write_text(plan.to_json(indent=2))
    reason = f"edited in the web console by {by}: version {plan.version} runs as run {new_id}; nothing of this version ran"
    store.decide_approval(approval.run_id, step_id=None, approved=False, by=by, reason=reason, content_hash=approval.content_hash)
    policy = str(files("planexec.web") / "edited.yaml")
    command = [sys.executable, "-m", "planexec", "run", "--plan", str(plan_file), "--run-id", new_id, "--store", store_target,
               "--json", "--policies", policy, *(a for t in tools for a in ("--tools", t))]  # fmt: skip
    log = (folder / f"{new_id}.log").open("ab")
    subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    return new_id


def _free_id(store: RunStore, wanted: str) -> str:
    """`wanted`, or `wanted.2`, `wanted.3`... when the store has it already."""
    taken = {r.run_id for r in store.runs(limit=None)}
    candidate, n = wanted, 1
    while candidate in taken:
        n += 1
        candidate = f"{wanted}.{n}"
    return candidate
