"""Tools for tests/test_isolated_tools.py: each runs in a child process of its own (`@tool(isolated=True)`).

They live in an importable module because a child process finds an isolated
tool's function by its module and name.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys
import time
from pathlib import Path

from planexec import tool


@tool(isolated=True, read_only=True, idempotent=True, untrusted_output=False)
def square(n: int) -> int:
    """n squared; chatters on stdout and stderr, which must not reach the parent's."""
    print("isolated chatter on stdout", flush=True)
    print("isolated chatter on stderr", file=sys.stderr, flush=True)
    return n * n


@tool(isolated=True)
def whereabouts() -> dict:
    """The process it ran in and what it saw of its parent's state."""
    return {"pid": os.getpid(), "cwd": os.getcwd(), "value": os.environ.get("PLANEXEC_ISOLATED_TEST")}


@tool(isolated=True)
def stubborn(pid_file: str) -> str:
    """Ignores SIGTERM and sleeps for ever."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(pid_file).write_text(str(os.getpid()))
    while True:
        time.sleep(3600)


@tool(isolated=True)
def blocked(pid_file: str) -> str:
    """Blocks in one long C call (time.sleep)."""
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(3600)
    return "never"


@tool(isolated=True)
def exits(code: int) -> str:
    """Says goodbye on stderr and leaves with os._exit (no exception, no answer)."""
    print(f"leaving with {code}", file=sys.stderr, flush=True)
    os._exit(code)


@tool(isolated=True)
def segfault() -> str:
    """Reads address 8: a real segmentation fault."""
    return str(ctypes.c_char.from_address(8).value)


@tool(isolated=True)
def raises(message: str) -> str:
    """Raises ValueError."""
    raise ValueError(message)


@tool(isolated=True)
def readings() -> list[float]:
    """A NaN where a number should be."""
    return [1.0, math.nan]


@tool(isolated=True)
def text(size: int) -> str:
    """`size` characters."""
    return "x" * size


@tool(isolated=True)
async def later(n: int) -> dict:
    """An async function runs in the child too."""
    return {"n": n, "tags": sorted({"b", "a"})}
