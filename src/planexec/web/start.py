"""Starting work from the console: a goal (its mode and models), or a template of the plan library with its parameters.

Owns checking the two forms (`check_goal`, `check_template`: every problem
at once, each by the field it is about, so the page shows it next to that
field; nothing starts until there is none) and `Submitter`, which hands
the work to the goal path: `Team.submit` for a goal (route, plan, have the
policies review, store it as a run in the state ``waiting``) and
`Team.submit_plan` for a template filled in (no planner, no model). The
team is this folder's (planexec.toml's models, tools and policies; the
form's models make a `Team.variant`), and every plan waits for a person's
review in the inbox before a worker runs any step (``single`` mode works
the goal with one agent and no plan to review, as on the CLI). Planning
runs in the console's event loop, in the background, so the page of the
new run is shown at once; until the run is stored it says the plan is
being written, and a submission that stored nothing (no valid plan, a
model that failed) says why there, from the error itself. The worker that
runs approved runs is the console's own (`fleet.local`) or a ``planexec
worker`` fleet's. Imports the public API (`planexec`, `.errors`,
`.store`), `library` (templates) and `models` (the model names).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planexec import Plan, Submission, Team, new_run_id
from planexec.errors import ConfigError, PlanexecError, PlanValidationError
from planexec.fleet import LocalWorker
from planexec.library import TemplateError, instantiate, parse_values
from planexec.models import parse_model_name
from planexec.store import RunStore, Template

__all__ = ["GOAL_MODES", "FormCheck", "Submitter", "check_goal", "check_template"]

log = logging.getLogger("planexec.web")

GOAL_MODES = ("plan", "auto", "single")
_MAX_GOAL = 4000


@dataclass
class FormCheck:
    """A form checked: `problems` by field name (``""`` for the form as a whole) and what it starts when there is none."""

    values: dict[str, str] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    goal: dict[str, str] = field(default_factory=dict)  # what a valid goal form submits: goal, mode, model, worker_model
    plan: Plan | None = None  # what a valid template form submits: the template filled in
    what: str = ""

    def add(self, name: str, problem: str) -> None:
        """Record a problem about the field `name`."""
        self.problems.setdefault(name, []).append(problem)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems


def check_goal(form: dict[str, str]) -> FormCheck:
    """The goal form: a goal in words, a mode (``plan``, ``auto``, ``single``) and optional ``provider:model`` names."""
    check = FormCheck(values={k: form.get(k, "").strip() for k in ("goal", "mode", "model", "worker_model")})
    goal, mode = check.values["goal"], check.values["mode"] or "plan"
    if not goal:
        check.add("goal", "say what you want done")
    elif len(goal) > _MAX_GOAL:
        check.add("goal", f"at most {_MAX_GOAL} characters, not {len(goal)}")
    if mode not in GOAL_MODES:
        check.add("mode", f"one of {', '.join(GOAL_MODES)}, not {mode!r}")
    for name in ("model", "worker_model"):
        if check.values[name]:
            try:
                parse_model_name(check.values[name])
            except ConfigError as exc:
                check.add(name, str(exc))
    if check.ok:
        check.goal = {"goal": goal, "mode": mode, "model": check.values["model"], "worker_model": check.values["worker_model"]}
        check.what = f"the goal {goal[:80]!r} ({mode})"
    return check


def check_template(form: dict[str, str], store: RunStore | None) -> tuple[FormCheck, Template | None]:
    """The template form: which template (``name``, optional ``version``) and each declared parameter (``param-NAME``), plus
    ``more`` (``NAME=TEXT`` or ``NAME:=JSON`` lines, for typed values); missing and unknown parameters are named by field."""
    check = FormCheck(values={k: v for k, v in form.items() if k != "csrf"})
    template = _template(check, store, form.get("name", "").strip(), form.get("version", "").strip())
    if template is None:
        return check, None
    values: dict[str, Any] = {p: form[f"param-{p}"] for p in template.params if form.get(f"param-{p}", "") != ""}
    lines = [line.strip() for line in form.get("more", "").splitlines() if line.strip()]
    try:
        typed, _ = parse_values(lines)
    except TemplateError as exc:
        check.add("more", str(exc))
        typed = {}
    for name, value in typed.items():
        if name not in template.params:
            check.add("more", f"{name}: the template declares no such parameter (it takes {', '.join(template.params) or 'none'})")
        elif name in values:
            check.add(f"param-{name}", f"given twice: here and as {name} in the typed values below")
        else:
            values[name] = value
    for name in template.params:
        if name not in values and not check.problems.get(f"param-{name}"):
            check.add(f"param-{name}", "missing: the template needs a value")
    if check.ok:
        try:
            check.plan = instantiate(template, values)
        except TemplateError as exc:
            check.add("", str(exc))
        except PlanValidationError as exc:
            for p in exc.problems:
                check.add("", f"{p.rule}: {p.message}" + (f" (step {p.step_id})" if p.step_id else ""))
    if check.ok:
        check.what = f"template {template.name} v{template.version}"
    return check, template


def _template(check: FormCheck, store: RunStore | None, name: str, version: str) -> Template | None:
    if not name:
        check.add("name", "choose a template")
        return None
    saved = [t for t in (store.templates(name) if store is not None else []) if t.name == name]
    if not saved:
        check.add("name", f"the plan library has no template {name!r}")
        return None
    if not version:
        return saved[-1]
    chosen = [t for t in saved if str(t.version) == version]
    if not chosen:
        check.add("version", f"template {name!r} has versions {', '.join(str(t.version) for t in saved)}, not {version!r}")
        return None
    return chosen[0]


@dataclass
class _Submitted:
    """One submission of this console: what it is, its task while it plans, why it stored nothing (when it did not)."""

    what: str
    task: asyncio.Task[Any] | None = None
    failed: str | None = None


class Submitter:
    """Hands the console's forms to `Team` (see the module docstring), each in the background; remembers what it submitted.

    `team` makes the console's team on first use (so a console over a
    folder with a broken planexec.toml still shows its runs); `worker` is
    woken when a run is stored, so an approved one starts at once.
    """

    def __init__(self, team: Callable[[], Team], *, user: str, worker: LocalWorker | None = None) -> None:
        self._make = team
        self._team: Team | None = None
        self._lock = threading.Lock()
        self.user = user
        self.worker = worker
        self.submitted: dict[str, _Submitted] = {}

    @property
    def team(self) -> Team:
        """The console's team (made now, the first time)."""
        with self._lock:  # the worker's thread may ask at the same time
            if self._team is None:
                self._team = self._make()
            return self._team

    def submit(self, check: FormCheck) -> str:
        """Start submitting the valid form `check` in the running event loop; the new run's id, at once."""
        team = self.team  # a team that cannot be made is the caller's error to show, before any run id is given out
        run_id = new_run_id("web")
        submission = Submission(by=self.user)
        if check.plan is not None:
            work = team.submit_plan(check.plan, run_id=run_id, submission=submission)
        else:
            goal = check.goal
            chosen = team.variant(model=goal["model"] or None, worker_model=goal["worker_model"] or None)
            work = chosen.submit(goal["goal"], mode=goal["mode"], run_id=run_id, submission=submission)  # type: ignore[arg-type]
        entry = self.submitted[run_id] = _Submitted(what=check.what)
        entry.task = asyncio.get_running_loop().create_task(self._settle(run_id, work), name=f"planexec web {run_id}")
        return run_id

    async def _settle(self, run_id: str, work: Any) -> None:
        entry = self.submitted[run_id]
        try:
            await work
        except PlanexecError as exc:  # no valid plan, a model that failed, a store that failed: said on the run's page
            entry.failed = f"{entry.what} stored no run: {type(exc).__name__}: {exc}"
        except Exception as exc:  # a bug: said on the page, and in the log with its traceback
            log.exception("submitting %s failed", entry.what)
            entry.failed = f"{entry.what} stored no run: {type(exc).__name__}: {exc}"
        else:
            if self.worker is not None:
                self.worker.wake()
        finally:
            entry.task = None

    def explain(self, run_id: str) -> str | None:
        """Why `run_id`, submitted here, has no stored run: None while it is being planned (the page retries), or the error."""
        entry = self.submitted.get(run_id)
        return entry.failed if entry is not None else None

    async def close(self) -> None:
        """Wait for the submissions still planning (a console stopping does not lose a goal half planned)."""
        tasks = [e.task for e in self.submitted.values() if e.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
