"""planexec's built-in tools and predicates, registered through the plugin hook.

Owns the small set every registry starts with: `echo`, `sleep`, `concat`,
`noop`, and the predicates `truthy` and `has_keys`. They register through
the same ``planexec.plugins`` entry point a third-party package uses.
Imports `registry` only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from planexec.workers.registry import Registry

__all__ = ["register"]


async def echo(value: Any = None) -> Any:
    """Return `value` unchanged (wires one step's output into the answer)."""
    return value


async def sleep(seconds: float, value: Any = None) -> Any:
    """Wait `seconds`, then return `value`."""
    await asyncio.sleep(seconds)
    return value


async def concat(parts: list[Any], separator: str = "\n") -> str:
    """Join the parts as text with `separator`."""
    return separator.join(p if isinstance(p, str) else str(p) for p in parts)


async def noop() -> None:
    """Do nothing and return null."""
    return None


def truthy(output: Any) -> bool:
    """The output is truthy."""
    return bool(output)


def has_keys(output: Any, keys: list[str]) -> tuple[bool, str]:
    """The output is a mapping with every one of `keys`."""
    if not isinstance(output, dict):
        return False, f"the output is a {type(output).__name__}, not a mapping"
    missing = [k for k in keys if k not in output]
    return not missing, f"missing keys: {', '.join(missing)}"


def register(registry: Registry) -> None:
    """The ``planexec.plugins`` hook: add the built-ins to `registry`."""
    for fn in (echo, sleep, concat, noop):
        registry.tool(fn, idempotent=True, read_only=True, untrusted_output=False)  # they only pass values along
    registry.predicate(truthy)
    registry.predicate(has_keys)
