"""Starting work from the console: a goal (its mode and models), or a template of the plan library with its parameters.

Owns checking the two forms (`check_goal`, `check_template`: every problem
at once, each by the field it is about, so the page shows it next to that
field; nothing starts until there is none) and `Launcher`, which starts
the work the way a person would at a terminal: ``planexec run GOAL`` (the
goal path, `Team`, as the CLI drives it: route, plan, review, run) or
``planexec run --template NAME@VERSION -p NAME:=JSON ...`` (no planner, no
model), as a child process in its own session, so the console never waits
on it. The run is recorded into the console's store under a run id chosen
here, with planexec.toml's tools and policies plus ``review.yaml`` (shipped
here: ``needs_person: ["*"]``), so its plan waits for a person's review in
the inbox before any step runs (``--mode single`` works the goal with one
agent and no plan to review, as on the CLI). The `Launcher` keeps each
child's log, so a run whose process ended before storing anything is
explained on its page instead of awaited. Imports `library`, `models` (the
model names) and the store; starts the CLI only as a separate process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

from planexec.errors import ConfigError, PlanValidationError
from planexec.library.templates import TemplateError, instantiate, parse_values
from planexec.models.providers import parse_model_name
from planexec.store import RunStore, Template

__all__ = ["GOAL_MODES", "FormCheck", "Launcher", "check_goal", "check_template", "goal_command", "new_run_id", "template_command"]

GOAL_MODES = ("plan", "auto", "single")
_MAX_GOAL = 4000


@dataclass
class FormCheck:
    """A form checked: `problems` by field name (``""`` for the form as a whole) and what it starts when there is none."""

    values: dict[str, str] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)  # the ``planexec run`` arguments, when the form is valid
    what: str = ""

    def add(self, name: str, problem: str) -> None:
        """Record a problem about the field `name`."""
        self.problems.setdefault(name, []).append(problem)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems


def new_run_id() -> str:
    """A run id for work started here, like the engine's own: ``web-20250101-120000-3f2a1b``."""
    return f"web-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


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
        check.args = goal_command(goal, mode=mode, model=check.values["model"] or None, worker_model=check.values["worker_model"] or None)
        check.what = f"the goal {goal[:80]!r} ({mode})"
    return check


def goal_command(goal: str, *, mode: str, model: str | None, worker_model: str | None) -> list[str]:
    """The ``planexec run`` arguments that work `goal`, before the run id, store and review options `Launcher` adds."""
    options = ["--mode", mode]
    options += ["--model", model] if model else []
    options += ["--worker-model", worker_model] if worker_model else []
    return [*options, "--", goal]  # a goal that starts with '-' stays the goal


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
            instantiate(template, values)
        except TemplateError as exc:
            check.add("", str(exc))
        except PlanValidationError as exc:
            for p in exc.problems:
                check.add("", f"{p.rule}: {p.message}" + (f" (step {p.step_id})" if p.step_id else ""))
    if check.ok:
        check.args = template_command(template, values)
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


def template_command(template: Template, values: dict[str, Any]) -> list[str]:
    """The ``planexec run`` arguments that fill in and run `template` (values typed as JSON, so each keeps its type)."""
    params = [a for name, value in values.items() for a in ("-p", f"{name}:={json.dumps(value, ensure_ascii=False)}")]
    return ["--template", f"{template.name}@{template.version}", *params]


@dataclass
class Started:
    """One run this console started: its id, its process, its log and what it is."""

    run_id: str
    process: subprocess.Popen[bytes]
    log: Path
    what: str


class Launcher:
    """Starts ``planexec run`` for the console (see the module docstring) and remembers the runs it started."""

    def __init__(self, store_target: str, cwd: Path) -> None:
        self.store_target = store_target
        self.cwd = cwd
        self.started: dict[str, Started] = {}

    def start(self, check: FormCheck) -> str:
        """Start the run `check` describes (it must be valid); its run id."""
        for earlier in self.started.values():  # reap the children that ended (a run still going outlives the console)
            earlier.process.poll()
        run_id = new_run_id()
        folder = self.cwd / ".planexec" / "web"
        folder.mkdir(parents=True, exist_ok=True)
        log_path = folder / f"{run_id}.log"
        policy = str(files("planexec.web") / "review.yaml")
        options = ["--run-id", run_id, "--store", self.store_target, "--json", "--policies", policy]
        split = check.args.index("--") if "--" in check.args else len(check.args)  # run options go before a goal's "--"
        command = [sys.executable, "-m", "planexec", "run", *check.args[:split], *options, *check.args[split:]]
        with log_path.open("ab") as log:
            process = subprocess.Popen(command, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        self.started[run_id] = Started(run_id=run_id, process=process, log=log_path, what=check.what)
        return run_id

    def ended_early(self, run_id: str) -> str | None:
        """When this console started `run_id` and its process has ended: the last lines it wrote (why nothing was stored); else None."""
        started = self.started.get(run_id)
        if started is None or started.process.poll() is None:
            return None
        text = started.log.read_text(encoding="utf-8", errors="replace") if started.log.exists() else ""
        lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("{", "}", '"'))]
        tail = "\n".join(lines[-8:]) or "(it wrote nothing)"
        return f"the process that was to run {started.what} ended (exit {started.process.returncode}) without storing the run:\n{tail}"
