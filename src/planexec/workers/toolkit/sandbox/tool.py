"""The `run_python` tool: `python_tool` and its `PythonRun` record; one call from start to cleanup.

Owns a call's life: refuse what cannot run (no sandbox here, the run's disk
quota spent), reap the cgroups of killed engines, make the call's cgroups
and (as root) find the workspace's stage, start the command, feed stdin and
bound the output, watch the workspace's growth, end on exit, timeout, quota
or cancellation with every process killed, then report what happened
(memory kills, set-id bits swept away). Imports `planexec.workers.tools`,
`planexec.workers.context`, `planexec.errors`, pydantic, the stdlib and the
sandbox's own modules. The guarantees are listed in the package docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from planexec.errors import ToolError
from planexec.workers.context import ToolContext
from planexec.workers.toolkit.sandbox import cgroups
from planexec.workers.toolkit.sandbox.command import (
    CODE_PATH,
    ENV,
    JOIN_MARK,
    SANDBOX_ID,
    Launch,
    bind_sources,
    command,
    system_binds,
)
from planexec.workers.toolkit.sandbox.disk import DiskUnmeasuredError, Ledger, descendants, disk_used, strip_setid
from planexec.workers.toolkit.sandbox.probe import data_fd, sandbox_problem
from planexec.workers.toolkit.sandbox.seccomp import filter_program
from planexec.workers.toolkit.sandbox.stage import Stage, StageError, release, stage_for
from planexec.workers.tools import Tool

__all__ = ["PythonRun", "python_tool"]

log = logging.getLogger("planexec.sandbox")

_CODE_NAME = "<run_python>"
_POLL = 0.025  # seconds between two looks at the workspace's size

# Runs in the sandbox before the model's code: argv[1] is a JSON config, argv[2] the code's file.
_BOOTSTRAP = r"""
import json, linecache, os, resource, sys, traceback
os.closerange(3, 1 << 20)  # what bwrap and nsenter were handed (namespaces, the filter) is not the code's
config = json.loads(sys.argv[1])
for name, value in config["limits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
os.environ.pop("PWD", None)  # bwrap's --chdir sets it; the environment stays the five names
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

    `exit_code` is the program's exit status: 128+N when a signal N killed
    it, -9 when the sandbox was killed (timeout, quota). `quota_exceeded` is
    true when the workspace grew past the run's disk quota (the run was then
    killed, if it was still going). `memory_exceeded` is true when the kernel
    killed a process of the call for going over the sandbox's memory bound;
    `memory_bound` says whether that bound held for all the call's processes
    together (``sandbox``, a memory cgroup) or for each process
    (``process``, where no memory cgroup is writable). `setid_stripped`
    lists workspace files whose setuid/setgid bits were removed after the
    call. `notes` says in words what the sandbox cut or killed, and why.
    Output beyond the bound is dropped and a ``[... N more bytes
    truncated]`` marker says so.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    quota_exceeded: bool
    duration: float
    truncated: bool
    isolation: Literal["bubblewrap"]
    memory_exceeded: bool = False
    memory_bound: Literal["sandbox", "process"] = "process"
    setid_stripped: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


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


@functools.cache
def _warn_per_process_memory() -> None:
    """Say once a process that memory is bounded per process only."""
    log.warning(
        "run_python: no memory cgroup is writable here, so memory_mb bounds each process of a call, not all of them "
        "together (up to max_processes x memory_mb), and shared memory and socket buffers are not counted; run the "
        "engine where it may create memory cgroups (as root, or with a delegated cgroup) for a bound on the whole sandbox"
    )


_LEDGERS: dict[str, Ledger] = {}  # a workspace's run baselines, shared by every tool bound to it


def _refuse(message: str) -> ToolError:
    return ToolError(message, tool="run_python")


@dataclass(frozen=True)
class _Limits:
    """A tool's settings (see `python_tool`)."""

    timeout: float
    memory_mb: int
    max_output: int
    max_file_mb: int
    max_disk_mb: int
    max_processes: int
    scratch_mb: int
    writable: bool


class _Started:
    """A started sandbox: its process, its cgroups, its stage (as root), its output so far, what was done to it."""

    def __init__(self, proc: asyncio.subprocess.Process, groups: cgroups.CallCgroups, stage: Stage | None, limits: _Limits) -> None:
        self.proc = proc
        self.groups = groups
        self.stage = stage
        self.out, self.err = _Capture(limits.max_output), _Capture(limits.max_output)
        self.notes: list[str] = []


class _Runner:
    """One tool's calls: checks, start, supervision and report (the steps of `run_python`)."""

    def __init__(self, root: Path, bwrap: str | None, limits: _Limits) -> None:
        self.root, self.ws, self.bwrap, self.limits = root, str(root), bwrap, limits
        st = root.stat()
        self.inode = (st.st_dev, st.st_ino)  # the directory the tool is for; as root, no other is mounted
        self.quota = limits.max_disk_mb * 2**20
        self.ledger = _LEDGERS.setdefault(self.ws, Ledger())
        self.env = {**ENV, "HOME": self.ws}
        self.passwd = f"sandbox:x:{SANDBOX_ID}:{SANDBOX_ID}:run_python:{self.ws}:/usr/sbin/nologin\n"
        self.group = f"sandbox:x:{SANDBOX_ID}:\n"
        self.as_root = os.geteuid() == 0

    async def call(self, code: str, stdin: str, run_id: str | None) -> PythonRun:
        baseline = await self.checks(run_id)
        await asyncio.to_thread(cgroups.reap)  # the groups of engines killed mid-call
        since = time.time_ns()  # a set-id file changed from here on is the code's doing
        started = await self.start(code)
        try:
            timed_out, quota_exceeded, duration = await self.supervise(started, stdin, baseline)
        finally:
            if started.stage is not None:  # its processes are gone: the slot (its host uid) is free
                release(started.stage)
        proc, out, err = started.proc, started.out, started.err
        oom_kills = started.groups.oom_kills_seen
        if oom_kills:
            started.notes.append(
                f"the kernel killed {oom_kills} process(es) of the call for going over memory_mb ({self.limits.memory_mb} MiB)"
            )
        stripped: list[str] = []
        if self.limits.writable:
            size, setid = await asyncio.to_thread(self.measure, [], since, started.notes)
            if not quota_exceeded and size - baseline > self.quota:  # it may have finished over the quota between two polls
                quota_exceeded = True
                started.notes.append(self.over_quota(size - baseline))
            if setid:  # the seccomp filter refuses set-id bits; this sweep is behind it
                stripped = await asyncio.to_thread(strip_setid, self.root, since)
                started.notes.append(f"setuid/setgid bits removed from {len(stripped)} file(s)")
        return PythonRun(
            stdout=out.text(),
            stderr=err.text(),
            exit_code=proc.returncode,
            timed_out=timed_out,
            quota_exceeded=quota_exceeded,
            duration=duration,
            truncated=bool(out.dropped or err.dropped),
            isolation="bubblewrap",
            memory_exceeded=oom_kills > 0,
            memory_bound="sandbox" if started.groups.memory is not None else "process",
            setid_stripped=stripped,
            notes=started.notes,
        )

    def measure(self, pids: list[int], since: int | None, notes: list[str]) -> tuple[int, bool]:
        """The workspace's size (`disk_used`); one that cannot be measured counts as infinitely large, and a note says why."""
        try:
            return disk_used(self.root, pids, since)
        except DiskUnmeasuredError as exc:
            notes.append(f"the workspace's size could not be measured, so it counts as over the disk quota: {exc.strerror}")
            return sys.maxsize, False

    def over_quota(self, grown: int) -> str:
        return (
            f"the workspace grew by {grown / 2**20:.0f} MiB in this run, past its disk quota of {self.limits.max_disk_mb} MiB (max_disk_mb)"
        )

    async def checks(self, run_id: str | None) -> int:
        """Refuse what cannot run; return the workspace's size the run's growth is counted from."""
        problem = await asyncio.to_thread(sandbox_problem, self.bwrap)  # probed once per binary, then cached
        if problem is not None:
            raise _refuse(problem)
        notes: list[str] = []
        now, _ = await asyncio.to_thread(self.measure, [], None, notes)
        if notes:
            raise _refuse(f"run_python: {notes[0]}. No code was run.")
        baseline = self.ledger.baseline(run_id, now)
        if self.limits.writable and now - baseline > self.quota:
            raise _refuse(f"run_python: {self.over_quota(now - baseline)}; delete files or start a new run. No code was run.")
        return baseline

    async def stage(self, binds: list[tuple[str, list[str]]]) -> Stage | None:
        """A stage of the workspace for this call when the engine is root (the caller must `release` it), else None."""
        if not self.as_root:
            return None
        making = asyncio.ensure_future(asyncio.to_thread(stage_for, self.ws, bind_sources(binds), self.inode))
        try:
            return await asyncio.shield(making)
        except StageError as exc:
            raise _refuse(f"{exc}. No code was run.") from None
        except OSError as exc:  # the workspace is gone, /run is read-only, ...
            raise _refuse(f"run_python could not prepare the workspace {self.ws!r} for its sandbox: {exc}. No code was run.") from None
        except asyncio.CancelledError:  # the thread goes on: give the stage back when it is done
            making.add_done_callback(lambda done: None if done.cancelled() or done.exception() else release(done.result()))
            raise

    def bootstrap_config(self) -> str:
        limits = {
            "RLIMIT_AS": self.limits.memory_mb * 2**20,
            "RLIMIT_CPU": math.ceil(self.limits.timeout) + 1,
            "RLIMIT_FSIZE": self.limits.max_file_mb * 2**20,
            "RLIMIT_CORE": 0,
            # the sandbox user is this call's alone, so this caps the call's tasks (bwrap's init is the other one),
            # beside the pids cgroup or where there is none
            "RLIMIT_NPROC": self.limits.max_processes + 1,
        }
        return json.dumps({"name": _CODE_NAME, "limits": limits})

    async def start(self, code: str) -> _Started:
        """Make the call's cgroups and start the sandbox in them (as root, from a stage of the workspace)."""
        binds = system_binds()
        stage = await self.stage(binds)
        try:
            try:
                groups = cgroups.CallCgroups.create(self.limits.max_processes + 2, self.limits.memory_mb * 2**20)  # + bwrap, its init
            except OSError as exc:
                raise _refuse(f"run_python could not create the sandbox's cgroups: {exc}. No code was run.") from None
            if groups.memory is None:
                _warn_per_process_memory()
            try:
                proc = await self.spawn(code, binds, stage, groups)
            except BaseException:
                groups.remove()
                raise
        except BaseException:
            if stage is not None:
                release(stage)
            raise
        return _Started(proc, groups, stage, self.limits)

    async def spawn(
        self, code: str, binds: list[tuple[str, list[str]]], stage: Stage | None, groups: cgroups.CallCgroups
    ) -> asyncio.subprocess.Process:
        """Start the command; `ToolError` when it cannot start or cannot join its cgroups (nothing ran then)."""
        program = [sys.executable, "-I", "-X", "utf8", "-c", _BOOTSTRAP, self.bootstrap_config(), CODE_PATH]
        fds: list[int] = []
        join_r, join_w = os.pipe()  # the wrapper's word that it could not join the cgroups: the code never holds it
        try:
            fds.extend(data_fd(text.encode("utf-8")) for text in (code, self.passwd, self.group))
            fds.append(data_fd(filter_program() or b""))
            data = {CODE_PATH: fds[0], "/etc/passwd": fds[1], "/etc/group": fds[2]}
            nsenter = shutil.which("nsenter") or "nsenter"
            scratch = self.limits.scratch_mb * 2**20
            join = tuple(groups.procs_files)
            launch = Launch(
                self.bwrap or "bwrap", nsenter, self.ws, self.limits.writable, binds, data, fds[3], self.env, scratch, stage, join, join_w
            )
            try:
                proc = await asyncio.create_subprocess_exec(
                    *command(launch, program),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    cwd=self.root,
                    env=self.env,  # bwrap's init keeps its own environment, readable in the sandbox's /proc/1/environ
                    pass_fds=launch.fds,
                    start_new_session=True,  # its own process group
                )
            except OSError as exc:
                raise _refuse(f"run_python could not start its sandbox: {exc}. No code was run.") from None
            os.close(join_w)
            join_w = -1
            if join and await self._join_failed(proc, join_r):
                raise _refuse(f"run_python could not put the sandbox in its cgroups ({', '.join(map(str, join))}). No code was run.")
            return proc
        finally:
            for fd in (*fds, join_r, join_w):
                if fd >= 0:
                    os.close(fd)

    @staticmethod
    async def _join_failed(proc: asyncio.subprocess.Process, join_r: int) -> bool:
        """Whether the wrapper said it could not join (it says ``joined`` otherwise, at once, before it runs anything)."""
        word = await asyncio.to_thread(os.read, join_r, 256)
        if word.startswith(JOIN_MARK.encode()):
            await proc.wait()
            return True
        return False

    async def supervise(self, started: _Started, stdin: str, baseline: int) -> tuple[bool, bool, float]:
        """Feed, drain and watch until the code ends, times out or goes over quota; then kill and clean up.

        Returns (timed out, over quota, seconds); notes what was done in `started.notes`.
        """
        proc, groups, begun = started.proc, started.groups, time.monotonic()
        assert proc.stdin and proc.stdout and proc.stderr

        def used() -> int:
            pids = groups.pids() if groups.groups else descendants(proc.pid)
            return self.measure(pids, None, started.notes)[0]

        async def watch() -> None:
            """Return when the workspace has grown past the run's quota (or cannot be measured)."""
            while True:
                await asyncio.sleep(_POLL)
                grown = await asyncio.to_thread(used) - baseline
                if grown > self.quota:
                    if grown < sys.maxsize // 2:
                        started.notes.append(self.over_quota(grown) + ": the call was killed")
                    return

        io = asyncio.gather(_feed(proc.stdin, stdin.encode()), started.out.drain(proc.stdout), started.err.drain(proc.stderr))
        exited = asyncio.ensure_future(proc.wait())
        watcher = asyncio.ensure_future(watch())
        try:
            done, _ = await asyncio.wait({exited, watcher}, timeout=self.limits.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when the step is cancelled: nothing the code started outlives the call
            watcher.cancel()
            if proc.returncode is None:  # not reaped yet, so its process group cannot be another's
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # bwrap; its init dies with it, and the namespace with that
            groups.kill()
            await proc.wait()
            groups.oom_kills_seen = groups.oom_kills()
            await groups.close()
            exited.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            # a process that held the pipes open may take a moment to be reaped; do not wait long for it
            _, pending = await asyncio.wait([io], timeout=1.0)
            for task in pending:
                task.cancel()
        if not done:
            started.notes.append(f"the call ran past its timeout of {self.limits.timeout:g} s and was killed")
        return not done, watcher in done, round(time.monotonic() - begun, 3)


def python_tool(
    workspace: str | Path,
    *,
    timeout: float = 10.0,
    memory_mb: int = 512,
    max_output: int = 20_000,
    max_file_mb: int = 64,
    max_disk_mb: int = 256,
    max_processes: int = 64,
    scratch_mb: int = 64,
    bwrap: str | os.PathLike[str] | None = shutil.which("bwrap"),
    writable: bool = True,
) -> Tool:
    """The `run_python(code, stdin="")` tool, running code in a bubblewrap sandbox bound to `workspace`.

    `timeout` bounds wall-clock seconds (and CPU seconds, rounded up),
    `memory_mb` the memory of all the call's processes together (where a
    memory cgroup can be made; else of each process), `max_output` the bytes
    kept of stdout and of stderr, `max_file_mb` the size of any file
    written, `max_disk_mb` how much the workspace may grow over all the calls
    of one run, `max_processes` the tasks (processes and threads) the code
    may have at once, `scratch_mb` the size of each of its private ``/tmp``
    and ``/dev/shm``. `bwrap` is the bubblewrap binary (by default the one on
    PATH when this module was imported). The sandbox is checked at the first
    call, not here: where it cannot work, each call raises `ToolError` and
    runs nothing. See the package docstring for what is isolated.

    With `writable` False the workspace is bound read-only: the code can
    read and compute but change nothing, reach nothing and see no secret, so
    the tool is declared read-only with no sensitive argument (a critic
    checks work with it after reading untrusted output).
    """
    root = Path(workspace).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"workspace {str(root)!r} is not a directory")
    limits = _Limits(timeout, memory_mb, max_output, max_file_mb, max_disk_mb, max_processes, scratch_mb, writable)
    runner = _Runner(root, os.fspath(bwrap) if bwrap is not None else None, limits)

    async def run_python(code: str, context: ToolContext[Any], stdin: str = "") -> PythonRun:
        """Run a Python 3 program in the workspace directory and return its stdout, stderr and exit code.

        The program runs in a fresh, isolated interpreter with no network
        access. Print what you want to see. Files it writes with relative
        paths land in the workspace. It is killed when it runs past its
        time limit (`timed_out` is then true); output past a bound is cut.
        """
        return await runner.call(code, stdin, context.run_id)

    if not writable:  # it can change nothing and send nothing anywhere: a check, not an action
        return Tool(run_python, name="run_python", read_only=True, untrusted_output=True)
    # side-effecting (it writes in the workspace), so approved per call unless the plan granted it;
    # the code is what it does, and its output may echo files it read
    return Tool(run_python, name="run_python", sensitive=("code",), untrusted_output=True)
