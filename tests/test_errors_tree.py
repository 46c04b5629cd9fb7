"""The exception tree in `planexec.errors`' docstring is the real one: every class in its place, none missing."""

from __future__ import annotations

import importlib
import re

import planexec.errors as errors

MODULES = ("library.templates", "engine.resume", "engine.join", "eval.suite", "testing", "workers.worker")


def _drawn() -> dict[str, str | None]:
    """Each class the docstring draws, with the parent it is drawn under."""
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"^    ((?:[│ ]   )*)(?:[├└]── )?([A-Z][A-Za-z]+)\b", line)
        if found is None or (not found.group(1) and "──" not in line and found.group(2) != "PlanexecError"):
            continue
        depth = len(found.group(1)) // 4 + (1 if "──" in line else 0)
        del stack[depth:]
        parents[found.group(2)] = stack[-1] if stack else None
        stack.append(found.group(2))
    return parents


def _defined() -> dict[str, type]:
    for name in MODULES:
        importlib.import_module(f"planexec.{name}")
    found: dict[str, type] = {}
    todo = [errors.PlanexecError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("planexec."):
            found[cls.__name__] = cls
        todo += cls.__subclasses__()
    return found


def test_the_docstring_draws_every_exception_under_its_parent():
    drawn, defined = _drawn(), _defined()
    assert drawn["PlanexecError"] is None and len(drawn) > 30
    assert set(drawn) == set(defined), (set(defined) - set(drawn), set(drawn) - set(defined))
    for name, parent in drawn.items():
        if parent is not None:
            assert defined[name].__bases__[0].__name__ == parent, f"{name} is drawn under {parent}"
