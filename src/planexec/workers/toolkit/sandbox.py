"""A Python runner for role workers: `python_tool` and the `PythonRun` record it returns.

Owns running model-written code in a child interpreter (`sys.executable -I`)
whose working directory is the workspace, with a minimal environment, resource
limits set in the child, a wall-clock timeout that kills every process the
code started, bounded output, and no network. Imports `planexec.workers.tools`, the
stdlib and pydantic only.

How the child is isolated, strongest first:

- ``namespace``: ``unshare -rn --pid --fork --kill-child`` gives the child its
  own user, network and PID namespaces. The network namespace has only a
  loopback device that is down, so every connect (even to 127.0.0.1 of the
  host), bind to a host interface and DNS lookup fails. In the PID namespace
  the code cannot see or signal the host's processes, and when the run ends
  the kernel kills every process left in it, even ones that called setsid().
- ``audit-hook``: where ``unshare`` is missing or refused, a bootstrap installs
  a `sys.addaudithook` hook that makes socket connect/bind/send and name
  lookups, and starting other programs, raise `PermissionError`. Audit hooks
  are not a security boundary (ctypes or a C extension can bypass them), so
  this mode only stops code that uses Python's own socket and process APIs.

Neither mode isolates the file system: the code can read whatever the
engine's user can read and write wherever that user can write. The memory
limit (RLIMIT_AS) and CPU limit (RLIMIT_CPU) apply per process, so code that
forks many processes is bounded only by the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from planexec.workers.tools import Tool

__all__ = ["PythonRun", "namespace_available", "python_tool"]

Isolation = Literal["namespace", "audit-hook"]

_UNSHARE = ("-rn", "--pid", "--fork", "--kill-child")
_CODE_NAME = "<run_python>"

# Runs in the child before the model's code: argv[1] is a JSON config, argv[2] the code's file.
_BOOTSTRAP = r"""
import json, linecache, os, resource, sys, traceback
config = json.loads(sys.argv[1])
if config["reaper"] and os.getpid() == 1:
    # PID 1 of a fresh namespace ignores default signals and must reap orphans:
    # stay as that init, run the code in a child, exit with the child's status.
    child = os.fork()
    if child:
        while True:
            pid, status = os.wait()
            if pid == child:
                code = os.waitstatus_to_exitcode(status)
                os._exit(code if code >= 0 else 128 - code)
for name, value in config["limits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
if config["audit"]:
    DENIED = {
        "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
        "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo",
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
    }
    def deny(event, args):
        if event in DENIED:
            raise PermissionError(f"{event} is not allowed: network access and new programs are disabled in this sandbox")
    sys.addaudithook(deny)
with open(sys.argv[2], encoding="utf-8") as f:
    source = f.read()
name = config["name"]
linecache.cache[name] = (len(source), None, source.splitlines(True), name)  # tracebacks show the lines
sys.argv = [name]
del config, f
try:
    exec(compile(source, name, "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
except SystemExit:
    raise
except BaseException as exc:
    traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)  # without this bootstrap's frame
    sys.exit(1)
"""


class PythonRun(BaseModel):
    """What one `run_python` call produced.

    `exit_code` is the process's exit status; a process killed by signal N
    shows as -N (audit-hook) or 128+N (namespace). Output beyond the bound is
    dropped and a ``[... N more bytes truncated]`` marker says so.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration: float
    truncated: bool
    isolation: Isolation


@functools.cache
def namespace_available() -> bool:
    """Whether ``unshare`` can give a child its own user, network and PID namespaces here."""
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        done = subprocess.run([exe, *_UNSHARE, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


class _Capture:
    """Bytes read from one pipe, kept up to a bound; the rest is counted and dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            room = max(0, self.limit - len(self.kept))
            self.kept += chunk[:room]
            self.dropped += len(chunk) - min(room, len(chunk))

    def text(self) -> str:
        out = self.kept.decode("utf-8", errors="replace")
        return out + f"\n[... {self.dropped} more bytes truncated]" if self.dropped else out


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    try:
        if data:
            stream.write(data)
            await stream.drain()
        stream.close()
    except (BrokenPipeError, ConnectionResetError):  # the code exited without reading its input
        pass


def python_tool(
    workspace: str | Path,
    *,
    timeout: float = 10.0,
    memory_mb: int = 512,
    max_output: int = 20_000,
    max_file_mb: int = 64,
    isolation: Literal["auto", "namespace", "audit-hook"] = "auto",
) -> Tool:
    """The `run_python(code, stdin="")` tool, running code in a sandboxed child interpreter.

    `timeout` bounds wall-clock seconds (and CPU seconds, rounded up),
    `memory_mb` the address space of each process, `max_output` the bytes
    kept of stdout and of stderr, `max_file_mb` the size of any file written.
    `isolation="auto"` uses namespaces when `namespace_available()`, else the
    audit hook; asking for ``"namespace"`` where it is unavailable raises
    `RuntimeError`. See the module docstring for what each mode stops.
    """
    root = Path(workspace).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"workspace {str(root)!r} is not a directory")
    if isolation == "auto":
        isolation = "namespace" if namespace_available() else "audit-hook"
    elif isolation == "namespace" and not namespace_available():
        raise RuntimeError("isolation='namespace' needs `unshare -rn --pid --fork` to work on this machine")
    mode: Isolation = isolation
    config = json.dumps(
        {
            "name": _CODE_NAME,
            "reaper": mode == "namespace",
            "audit": mode == "audit-hook",
            "limits": {
                "RLIMIT_AS": memory_mb * 2**20,
                "RLIMIT_CPU": math.ceil(timeout) + 1,
                "RLIMIT_FSIZE": max_file_mb * 2**20,
                "RLIMIT_CORE": 0,
            },
        }
    )
    prefix = [shutil.which("unshare") or "unshare", *_UNSHARE] if mode == "namespace" else []
    argv = [*prefix, sys.executable, "-I", "-X", "utf8", "-c", _BOOTSTRAP, config]  # then the code's file
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "MALLOC_ARENA_MAX": "2",  # else glibc reserves 64 MiB per thread, and RLIMIT_AS counts reservations
    }

    async def run_python(code: str, stdin: str = "") -> PythonRun:
        """Run a Python 3 program in the workspace directory and return its stdout, stderr and exit code.

        The program runs in a fresh, isolated interpreter with no network
        access. Print what you want to see. Files it writes with relative
        paths land in the workspace. It is killed when it runs past its
        time limit (`timed_out` is then true); output past a bound is cut.
        """
        fd, code_path = tempfile.mkstemp(prefix="planexec-run-", suffix=".py")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(code)
        out, err = _Capture(max_output), _Capture(max_output)
        timed_out = False
        start = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                code_path,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=root,
                env=env,
                start_new_session=True,  # its own process group, killed as a whole
            )
            assert proc.stdin and proc.stdout and proc.stderr
            io = asyncio.gather(_feed(proc.stdin, stdin.encode()), out.drain(proc.stdout), err.drain(proc.stderr))
            try:
                try:
                    await asyncio.wait_for(proc.wait(), timeout)
                except TimeoutError:
                    timed_out = True
            finally:  # also when the step is cancelled: nothing the code started outlives the call
                with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
                # a process that left the group may still hold the pipes open; do not wait for it
                _, pending = await asyncio.wait([io], timeout=1.0)
                for task in pending:
                    task.cancel()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(code_path)
        return PythonRun(
            stdout=out.text(),
            stderr=err.text(),
            exit_code=proc.returncode,
            timed_out=timed_out,
            duration=round(time.monotonic() - start, 3),
            truncated=bool(out.dropped or err.dropped),
            isolation=mode,
        )

    # side-effecting (it writes in the workspace), so approved per call unless the plan granted it;
    # the code is what it does, and its output may echo files it read
    return Tool(run_python, name="run_python", sensitive=("code",), untrusted_output=True)
