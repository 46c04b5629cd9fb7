"""Python checkers for the example suites (``python: "checks:<function>"``).

A checker is ``fn(answer)`` or ``fn(answer, goal)`` (the `GoalCase`, with
its optional ``expected`` value) and returns a bool or ``(bool, reason)``.
"""

from __future__ import annotations

import math
import re
from typing import Any

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def same_number(answer: Any, goal: Any) -> tuple[bool, str]:
    """The answer is, or contains, the goal's expected number (to 0.01)."""
    text = str(answer)
    found = [float(m.replace(",", "")) for m in _NUMBER.findall(text)]
    ok = any(math.isclose(v, float(goal.expected), abs_tol=0.01) for v in found)
    return ok, "" if ok else f"no number close to {goal.expected} in {text[:120]!r}"


def same_name(answer: Any, goal: Any) -> tuple[bool, str]:
    """The answer names the goal's expected name (case and surrounding words ignored)."""
    ok = str(goal.expected).lower() in str(answer).lower()
    return ok, "" if ok else f"{goal.expected!r} not in {str(answer)[:120]!r}"
