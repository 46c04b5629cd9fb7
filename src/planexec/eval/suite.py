"""Evaluation suites: the YAML file that lists goals, their checkers and reference solutions.

Owns the suite format and reading it: `Suite`, `GoalCase`, `SolutionCall`,
`Checker` (``exact``, ``regex`` or ``python``), `SuiteError` (a bad suite,
naming the goal and the field), `load_suite`, `answer_text` (an answer as
the text a checker compares) and `run_solution` (a goal's reference tool
calls, run directly). A suite::

    name: parallel
    description: independent lookups combined by arithmetic
    tools: tools.py                 # relative to the suite file; Registry.load_module
    builtin_tools: [calculator]     # optional; the default
    goals:
      - id: pop-sum
        goal: What is the combined population of Avalon and Brightwater?
        exact: "184500"             # or regex: "...", or python: "module:function"
        solution:
          - {id: a, tool: population, args: {city: Avalon}}
          - {id: b, tool: population, args: {city: Brightwater}}
          - {id: total, tool: calculator, args: {expression: "${a} + ${b}"}}

References (``${a}``) in a solution's arguments name earlier calls of the
same solution, with the plan's reference rules. Running a suite is
`evaluation`'s business. Imports `plan` (reference rules), `registry`,
`tools`, `toolkit.calculator`, `records`, `errors`; never the engine.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from planexec.errors import PlanexecError, RegistryError
from planexec.plan.model import STEP_ID_PATTERN
from planexec.plan.references import find_references, resolve_references
from planexec.records import Record
from planexec.workers.registry import Registry
from planexec.workers.toolkit.calculator import calculator
from planexec.workers.tools import Tool

__all__ = [
    "CHECKER_KINDS",
    "Checker",
    "GoalCase",
    "SolutionCall",
    "Suite",
    "SuiteError",
    "answer_text",
    "load_suite",
    "run_solution",
]

CHECKER_KINDS = ("exact", "regex", "python")
_SUITE_KEYS = {"name", "description", "tools", "builtin_tools", "goals"}
_GOAL_KEYS = {"id", "goal", "solution", "expected", *CHECKER_KINDS}
_CALL_KEYS = {"id", "tool", "args"}
_ID = re.compile(STEP_ID_PATTERN)


class SuiteError(PlanexecError):
    """A suite file that cannot be used: `path`, and where known the `goal_id` and `field` at fault."""

    def __init__(self, message: str, *, path: Path | None = None, goal_id: str | None = None, field: str | None = None) -> None:
        self.path = path
        self.goal_id = goal_id
        self.field = field
        where = [f"suite {str(path)!r}" if path else "suite"]
        if goal_id is not None:
            where.append(f"goal {goal_id!r}")
        if field is not None:
            where.append(field)
        super().__init__(f"{': '.join(where)}: {message}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SolutionCall(Record):
    """One reference tool call: its id (what later calls reference), the tool and its arguments."""

    call_id: str
    tool: str
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def references(self) -> list[str]:
        """The ids of the earlier calls its arguments reference, in order of first mention."""
        return list(dict.fromkeys(sid for sid, _ in find_references(self.args)))


def answer_text(answer: Any) -> str:
    """An answer as the text a checker reads: strings stripped, whole floats without ``.0``, data as JSON."""
    if answer is None:
        return ""
    if isinstance(answer, str):
        return answer.strip()
    if isinstance(answer, bool):
        return "true" if answer else "false"
    if isinstance(answer, float) and math.isfinite(answer) and answer == int(answer):
        return str(int(answer))
    if isinstance(answer, int | float):
        return str(answer)
    return json.dumps(answer, ensure_ascii=False, sort_keys=True, default=str)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Checker:
    """Judges an answer: ``exact`` (the text equals `value`; numbers compare as numbers, 12 == 12.0),
    ``regex`` (`value` is found in the text) or ``python`` (``fn(answer)`` or ``fn(answer, goal)``
    returns a bool or ``(bool, reason)``; `value` is ``module:function``)."""

    kind: str
    value: str
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        """``exact: '184500'`` and the like."""
        return f"{self.kind}: {self.value!r}"

    def check(self, answer: Any, goal: GoalCase | None = None) -> tuple[bool, str]:
        """Whether the answer passes, and why not (an empty reason when it passes)."""
        text = answer_text(answer)
        if self.kind == "exact":
            want = self.value.strip()
            a, b = _number(text), _number(want)
            same = (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)) or text == want
            return same, "" if same else f"expected exactly {want!r}, got {text[:200]!r}"
        if self.kind == "regex":
            found = re.search(self.value, text) is not None
            return found, "" if found else f"/{self.value}/ not found in {text[:200]!r}"
        assert self.fn is not None
        takes_goal = len(inspect.signature(self.fn).parameters) >= 2
        try:
            verdict = self.fn(answer, goal) if takes_goal else self.fn(answer)
        except Exception as exc:  # a checker that crashes rejects the answer, saying why
            return False, f"checker {self.value} raised {type(exc).__name__}: {exc}"
        ok, reason = verdict if isinstance(verdict, tuple) else (verdict, "")
        return bool(ok), "" if ok else (str(reason) or f"checker {self.value} rejected {text[:200]!r}")


@dataclass(frozen=True)
class GoalCase:
    """One goal of a suite: its id, the goal's words, the checker, the reference solution and an optional `expected` value."""

    goal_id: str
    goal: str
    checker: Checker
    solution: list[SolutionCall]
    expected: Any = None

    def to_dict(self) -> dict[str, Any]:
        """The goal as JSON data (the checker described, not its function)."""
        return {
            "id": self.goal_id,
            "goal": self.goal,
            "checker": {"kind": self.checker.kind, "value": self.checker.value},
            "solution": [{"id": c.call_id, "tool": c.tool, "args": c.args} for c in self.solution],
            "expected": self.expected,
        }


@dataclass
class Suite:
    """A loaded suite: its goals and what its tools are (`registry()` builds a fresh registry of them)."""

    name: str
    description: str
    path: Path
    goals: list[GoalCase]
    tools_module: Path | None = None
    builtin_tools: list[str] = field(default_factory=lambda: ["calculator"])

    def registry(self) -> Registry:
        """A registry of exactly the suite's tools: its built-in tools and its tools module, on the ``tool`` worker."""
        registry = Registry()
        available = _builtin_tools()
        for name in self.builtin_tools:
            registry.add_tool(available[name])
        if self.tools_module is not None:
            registry.load_module(str(self.tools_module))
        return registry

    def goal(self, goal_id: str) -> GoalCase:
        """The goal with this id; `KeyError` naming the known ones otherwise."""
        for case in self.goals:
            if case.goal_id == goal_id:
                return case
        raise KeyError(f"suite {self.name!r} has no goal {goal_id!r}; known: {', '.join(c.goal_id for c in self.goals)}")


def _builtin_tools() -> dict[str, Tool]:
    """The tools a suite may take by name: the calculator and planexec's built-ins (echo, concat ...)."""
    out = dict(Registry.default().tools)
    out["calculator"] = calculator
    return out


# --- loading -----------------------------------------------------------------------------------


def load_suite(path: str | Path) -> Suite:
    """Read and check a suite file: its tools load, every goal is complete, every solution names real tools.

    Raises `SuiteError` naming the goal and the field at fault.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError("the file does not exist", path=path) from None
    except OSError as exc:
        raise SuiteError(f"cannot read the file: {exc.strerror or exc}", path=path) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SuiteError(f"not valid YAML{at}: {getattr(exc, 'problem', None) or exc}", path=path) from None
    if not isinstance(data, dict):
        raise SuiteError(f"the top level must be a mapping with name and goals, not {type(data).__name__}", path=path)
    unknown = sorted(set(map(str, data)) - _SUITE_KEYS)
    if unknown:
        raise SuiteError(f"unknown key(s) {', '.join(unknown)}; a suite has {', '.join(sorted(_SUITE_KEYS))}", path=path)
    name = _text(data.get("name"), path=path, field="name")
    description = "" if data.get("description") is None else str(data["description"])
    builtins = data.get("builtin_tools", ["calculator"])
    available = _builtin_tools()
    if not isinstance(builtins, list) or not all(isinstance(b, str) for b in builtins):
        raise SuiteError("must be a list of tool names", path=path, field="builtin_tools")
    for b in builtins:
        if b not in available:
            raise SuiteError(f"no built-in tool {b!r}; known: {', '.join(sorted(available))}", path=path, field="builtin_tools")
    tools_module = None
    if data.get("tools") is not None:
        rel = _text(data["tools"], path=path, field="tools")
        tools_module = (path.parent / rel).resolve()
        if not tools_module.is_file():
            raise SuiteError(f"the tools module {str(tools_module)!r} does not exist", path=path, field="tools")
    suite = Suite(name=name, description=description, path=path, goals=[], tools_module=tools_module, builtin_tools=list(builtins))
    try:
        registry = suite.registry()
    except RegistryError as exc:
        raise SuiteError(str(exc), path=path, field="tools") from None
    goals = data.get("goals")
    if not isinstance(goals, list) or not goals:
        raise SuiteError("must be a non-empty list of goals", path=path, field="goals")
    seen: set[str] = set()
    for i, raw in enumerate(goals):
        case = _goal(raw, i, path=path, registry=registry)
        if case.goal_id in seen:
            raise SuiteError("this id is used by an earlier goal too", path=path, goal_id=case.goal_id, field="id")
        seen.add(case.goal_id)
        suite.goals.append(case)
    return suite


def _text(value: Any, *, path: Path, field: str, goal_id: str | None = None) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float) or not str(value).strip():
        shown = "missing" if value is None else f"{type(value).__name__} {value!r}"
        raise SuiteError(f"must be a non-empty text ({shown})", path=path, goal_id=goal_id, field=field)
    return str(value)


def _goal(raw: Any, index: int, *, path: Path, registry: Registry) -> GoalCase:
    if not isinstance(raw, dict):
        raise SuiteError(
            f"must be a mapping with id, goal, a checker and solution, not {type(raw).__name__}", path=path, field=f"goals[{index}]"
        )
    gid = _text(raw.get("id"), path=path, field=f"goals[{index}].id")
    unknown = sorted(set(map(str, raw)) - _GOAL_KEYS)
    if unknown:
        raise SuiteError(f"unknown key(s) {', '.join(unknown)}; a goal has {', '.join(sorted(_GOAL_KEYS))}", path=path, goal_id=gid)
    goal = _text(raw.get("goal"), path=path, goal_id=gid, field="goal")
    kinds = [k for k in CHECKER_KINDS if k in raw]
    if len(kinds) != 1:
        found = f"it has {', '.join(kinds)}" if kinds else "it has none"
        raise SuiteError(
            f"a goal needs exactly one checker of {', '.join(CHECKER_KINDS)} ({found})", path=path, goal_id=gid, field="checker"
        )
    checker = _checker(kinds[0], raw[kinds[0]], path=path, goal_id=gid)
    solution = _solution(raw.get("solution"), path=path, goal_id=gid, registry=registry)
    return GoalCase(goal_id=gid, goal=goal, checker=checker, solution=solution, expected=raw.get("expected"))


def _checker(kind: str, value: Any, *, path: Path, goal_id: str) -> Checker:
    text = _text(value, path=path, goal_id=goal_id, field=kind)
    if kind == "exact":
        return Checker("exact", text)
    if kind == "regex":
        try:
            re.compile(text)
        except re.error as exc:
            raise SuiteError(f"not a valid regular expression: {exc}", path=path, goal_id=goal_id, field="regex") from None
        return Checker("regex", text)
    module_name, _, fn_name = text.partition(":")
    if not module_name or not fn_name:
        raise SuiteError(f"must be 'module:function', not {text!r}", path=path, goal_id=goal_id, field="python")
    try:
        module = _import_checker_module(module_name, path.parent)
    except Exception as exc:  # whatever the module raises while loading: say which goal needed it
        raise SuiteError(
            f"cannot load module {module_name!r}: {type(exc).__name__}: {exc}", path=path, goal_id=goal_id, field="python"
        ) from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise SuiteError(f"module {module_name!r} has no function {fn_name!r}", path=path, goal_id=goal_id, field="python")
    return Checker("python", text, fn)


_checker_modules: dict[Path, Any] = {}


def _import_checker_module(name: str, base: Path) -> Any:
    """A module by file (``checks.py`` or ``checks``, next to the suite) or by dotted import name."""
    candidate = base / (name if name.endswith(".py") else f"{name}.py")
    if candidate.is_file():
        candidate = candidate.resolve()
        if candidate not in _checker_modules:
            spec = importlib.util.spec_from_file_location(f"planexec_suite_{candidate.stem}_{abs(hash(str(candidate)))}", candidate)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _checker_modules[candidate] = module
        return _checker_modules[candidate]
    return importlib.import_module(name)


def _solution(raw: Any, *, path: Path, goal_id: str, registry: Registry) -> list[SolutionCall]:
    if not isinstance(raw, list) or not raw:
        raise SuiteError("must be a non-empty list of tool calls {id, tool, args}", path=path, goal_id=goal_id, field="solution")
    calls: list[SolutionCall] = []
    for i, item in enumerate(raw):
        where = f"solution[{i}]"
        if not isinstance(item, dict):
            raise SuiteError(f"must be a mapping {{id, tool, args}}, not {type(item).__name__}", path=path, goal_id=goal_id, field=where)
        unknown = sorted(set(map(str, item)) - _CALL_KEYS)
        if unknown:
            raise SuiteError(f"unknown key(s) {', '.join(unknown)}; a call has id, tool, args", path=path, goal_id=goal_id, field=where)
        cid = _text(item.get("id"), path=path, goal_id=goal_id, field=f"{where}.id")
        if not _ID.match(cid) or len(cid) > 64:
            raise SuiteError(f"{cid!r} is not a step id (letters, digits, '_' and '-')", path=path, goal_id=goal_id, field=f"{where}.id")
        if any(c.call_id == cid for c in calls):
            raise SuiteError(f"id {cid!r} is used by an earlier call too", path=path, goal_id=goal_id, field=f"{where}.id")
        name = _text(item.get("tool"), path=path, goal_id=goal_id, field=f"{where}.tool")
        found = registry.tools.get(name)
        if found is None:
            raise SuiteError(
                f"no tool {name!r}; the suite has {', '.join(sorted(registry.tools))}", path=path, goal_id=goal_id, field=f"{where}.tool"
            )
        args = item.get("args", {}) if item.get("args") is not None else {}
        if not isinstance(args, dict):
            raise SuiteError(
                f"must be a mapping of argument names to values, not {type(args).__name__}",
                path=path,
                goal_id=goal_id,
                field=f"{where}.args",
            )
        fields = found.input_model.model_fields
        for arg in args:
            if arg not in fields:
                raise SuiteError(
                    f"tool {name!r} has no argument {arg!r}; it takes {', '.join(fields) or 'none'}",
                    path=path,
                    goal_id=goal_id,
                    field=f"{where}.args",
                )
        missing = [f for f, info in fields.items() if info.is_required() and f not in args]
        if missing:
            raise SuiteError(f"tool {name!r} needs {', '.join(missing)}", path=path, goal_id=goal_id, field=f"{where}.args")
        call = SolutionCall(call_id=cid, tool=name, args=dict(args))
        for ref in call.references:
            if not any(c.call_id == ref for c in calls):
                raise SuiteError(f"${{{ref}}} names no earlier call of this solution", path=path, goal_id=goal_id, field=f"{where}.args")
        calls.append(call)
    return calls


async def run_solution(case: GoalCase, registry: Registry) -> dict[str, Any]:
    """Run a goal's reference calls one after another, references resolved; their outputs by call id."""
    outputs: dict[str, Any] = {}
    for call in case.solution:
        args = resolve_references(call.args, outputs)
        outputs[call.call_id] = await registry.tools[call.tool].invoke(args)
    return outputs
