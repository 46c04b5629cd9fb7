"""A Python runner for role workers: `python_tool`, its `PythonRun` record, `sandbox_available`.

Owns running model-written code in a child interpreter (`sys.executable -I`)
inside a bubblewrap (``bwrap``, 0.8 or newer) sandbox whose working directory
is the workspace: resource limits set in the child, a wall-clock timeout, a
process cap, a disk quota, bounded output, and every process the code started
killed when the call ends. Imports `planexec.workers.tools`, `planexec.errors`,
the stdlib and pydantic only.

What the sandbox isolates (figures measured on Linux 6.18, bwrap 0.8.0, 2 cores):

- File system: the sandbox's root is an empty tmpfs, read-only once built.
  Only what the interpreter needs is bound into it, read-only: ``/usr`` (so
  ``/usr/local`` too), ``/bin``, ``/sbin``, ``/lib*`` (as the host has them:
  symlinks into ``/usr`` or directories), the interpreter's prefixes and
  stdlib wherever they live (``sys.prefix``, ``sys.base_prefix``, a pyenv
  under ``/root`` binds only that version's directory), and of ``/etc`` only
  ``ld.so.cache``, ``localtime`` and ``alternatives`` (symlinks into ``/usr``),
  plus a generated ``passwd``/``group`` naming the sandbox user. No
  ``/etc/shadow``, ``/home``, ``/root``, ``/work`` or host ``/tmp``. The
  workspace is the one writable host directory (bound at its own path, the
  cwd); ``/tmp`` and ``/dev/shm`` are fresh tmpfs of ``scratch_mb`` each;
  ``/proc`` belongs to the sandbox's PID namespace and ``/dev`` is bwrap's
  minimal one (null, zero, full, random, urandom, tty, pts), read-only.
  A hard link from the workspace to anything outside fails (the file is
  absent, or on another mount: EXDEV).
- Namespaces: user (the code runs as uid/gid 1000 with no capabilities and
  cannot create nested user namespaces), PID (it sees only its own processes),
  network (only a loopback device that is down: every connect, even to the
  host's 127.0.0.1, and every DNS lookup fails), IPC, UTS and cgroup.
  ``--new-session`` (no TIOCSTI into a terminal), ``--die-with-parent``.
- Environment: bwrap runs with the minimal environment and ``--clearenv``; the
  code sees PATH, HOME (the workspace), LANG, LC_ALL and MALLOC_ARENA_MAX
  only. The engine's environment (API keys) is in no process the code can see:
  ``/proc/1/environ`` is bwrap's own, which we started with that same minimal
  environment.
- Processes: at most ``max_processes`` tasks (threads count). Root ignores
  RLIMIT_NPROC (the kernel exempts the root user, and a uid 1000 inside a user
  namespace created by root is still root's kuid outside: measured, a fork
  bomb made 300 of 300 children under RLIMIT_NPROC=64). So as root the run is
  put in a pids cgroup of its own (v1 ``/sys/fs/cgroup/pids`` or a v2
  hierarchy with the pids controller) with ``pids.max`` set: measured, a fork
  bomb gets 63 children besides itself (``max_processes`` = 64 tasks) and
  every further fork() fails with EAGAIN, where the old runner let it make
  all 400 it tried. As another user, RLIMIT_NPROC applies and is counted per
  user namespace, so only the sandbox's tasks count (measured as uid 65534: 62
  children plus the interpreter and bwrap's init under a limit of 64); a pids
  cgroup is used too when one is writable. As root with no writable pids
  cgroup, code execution is refused.
- Disk: RLIMIT_FSIZE bounds each file (``max_file_mb``); the scratch tmpfs are
  bounded by their size; the workspace's growth during the run is bounded by
  ``max_disk_mb``. bwrap 0.8 has no overlay mounts, and copying the workspace
  into a bounded tmpfs and back would cost time in proportion to the
  workspace and need a careful copy-back, so a watcher polls instead: every
  25 ms it adds up the blocks of everything under the workspace (each inode
  once, at least 4 KiB per inode, which also bounds the number of files) and
  of deleted files the sandbox's processes still hold open (memfds included;
  mapped ones too, as root: an unlinked file keeps its blocks), and kills the
  run when that grew past the quota; `PythonRun.quota_exceeded` says so
  (also when the code finished over the quota between two polls). The bound is not exact: between two polls
  the code can write what the disk takes in ~25 ms plus one file in flight
  (measured: a writer of 64 MiB files under a 50 MiB quota was stopped in
  its first file, 0.2 to 0.4 s in, with the workspace grown by 50 to 64 MiB
  in six runs, where unbounded it wrote 2.9 GB in 10 s). What was written
  stays in the workspace.
- Memory and CPU: RLIMIT_AS (``memory_mb``) and RLIMIT_CPU (the timeout,
  rounded up) per process, RLIMIT_CORE 0; with the process cap this bounds
  the total. tmpfs pages (the scratch areas) are outside RLIMIT_AS, and so is
  SysV shared memory not attached (the sandbox's own IPC namespace, freed at
  the end; bounded only by the kernel's shmall).
- The end: the code runs as the child of bwrap's init, PID 1 of its
  namespace; when the code exits, times out, goes over quota or the calling task is cancelled,
  bwrap is killed, its init dies with it (``--die-with-parent``), and the
  kernel kills every process left in the namespace, even ones that called
  setsid() or double-forked; the pids cgroup, where there is one, is emptied
  by SIGKILL as well and removed.

Where bwrap is missing, cannot create its namespaces, or no process cap is
available, `run_python` raises `ToolError` naming the problem (and
``apt-get install bubblewrap``) and runs nothing; nothing weaker is used in
its place. `sandbox_available()` says whether a run can happen here.
Startup overhead: one trivial call takes 64-68 ms (median of 10), against
54-57 ms with the ``unshare`` runner this replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from planexec.errors import ToolError
from planexec.workers.tools import Tool

__all__ = ["PythonRun", "python_tool", "sandbox_available"]

_CODE_NAME = "<run_python>"
_CODE_PATH = "/run/planexec/code.py"
_UID = 1000
_INSTALL = "install it with `apt-get install bubblewrap` (Debian, Ubuntu) or `dnf install bubblewrap` (Fedora)"
_POLL = 0.025  # seconds between two looks at the workspace's size
_MIN_INODE = 4096  # bytes an inode counts for at least: a block, so a million empty files are not free
_JOIN_FAILED = 125  # the wrapper's exit status when it could not put bwrap in the pids cgroup
_JOIN_MARK = "planexec-sandbox: cannot join the pids cgroup"
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "MALLOC_ARENA_MAX": "2",  # else glibc reserves 64 MiB per thread, and RLIMIT_AS counts reservations
}
_NAMESPACES = (
    "--unshare-user",
    "--uid",
    str(_UID),
    "--gid",
    str(_UID),
    "--disable-userns",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--hostname",
    "sandbox",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
    "--clearenv",
)

# Runs in the sandbox before the model's code: argv[1] is a JSON config, argv[2] the code's file.
_BOOTSTRAP = r"""
import json, linecache, os, resource, sys, traceback
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
    it, -9 when the sandbox was killed (timeout, quota). `quota_exceeded` is true when the workspace grew past
    the disk quota (the run was then killed, if it was still going). Output
    beyond the bound is dropped and a ``[... N more bytes truncated]`` marker
    says so.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    quota_exceeded: bool
    duration: float
    truncated: bool
    isolation: Literal["bubblewrap"]


# -- the process cap: a pids cgroup --------------------------------------------------------------


@dataclass(frozen=True)
class _CgroupRoot:
    """Where this process's pids cgroup is, and whether it is cgroup v2."""

    path: Path
    v2: bool


def _mounts() -> Iterator[tuple[str, str, str, str]]:
    """(mount root, mount point, fs type, super options) of each mount of this process."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            yield fields[3], fields[4], fields[sep + 1], fields[sep + 3]


def _own_cgroup_dir(mount_root: str, mount_point: str, path: str) -> Path:
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root) :] or "/"
    return Path(mount_point) / path.lstrip("/")


@functools.cache
def _pids_cgroup_root() -> _CgroupRoot | None:
    """A cgroup directory under which this process may create pids-capped children, or None."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            own = [line.rstrip("\n").split(":", 2) for line in f]
        mounts = list(_mounts())
    except (OSError, ValueError, IndexError):
        return None
    for _, controllers, path in own:  # v1: a hierarchy with the pids controller
        if "pids" in controllers.split(","):
            for root, point, fstype, options in mounts:
                if fstype == "cgroup" and "pids" in options.split(","):
                    found = _CgroupRoot(_own_cgroup_dir(root, point, path), v2=False)
                    return found if _can_create(found) else None
    for hierarchy, _, path in own:  # v2: the pids controller enabled (or enablable) for our children
        if hierarchy == "0":
            for root, point, fstype, _ in mounts:
                if fstype == "cgroup2":
                    found = _CgroupRoot(_own_cgroup_dir(root, point, path), v2=True)
                    if _can_create(found):
                        return found
    return None


def _can_create(root: _CgroupRoot) -> bool:
    try:
        if root.v2:
            if "pids" not in (root.path / "cgroup.controllers").read_text().split():
                return False
            if "pids" not in (root.path / "cgroup.subtree_control").read_text().split():
                (root.path / "cgroup.subtree_control").write_text("+pids")
        probe = _Cgroup.create(root, 1)
    except OSError:
        return False
    probe.remove()
    return True


class _Cgroup:
    """One run's pids cgroup: `pids.max` set, bwrap put in it by a shell wrapper, emptied and removed at the end."""

    def __init__(self, path: Path, v2: bool) -> None:
        self.path = path
        self.v2 = v2

    @classmethod
    def create(cls, root: _CgroupRoot, max_tasks: int) -> _Cgroup:
        path = root.path / f"planexec-{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir()
        group = cls(path, root.v2)
        try:
            (path / "pids.max").write_text(str(max_tasks))
            if (path / "pids.max").read_text().strip() != str(max_tasks):
                raise OSError(f"pids.max of {path} did not take {max_tasks}")
        except OSError:
            group.remove()
            raise
        return group

    def pids(self) -> list[int]:
        try:
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        if self.v2:
            with contextlib.suppress(OSError):
                (self.path / "cgroup.kill").write_text("1")
                return
        for pid in self.pids():  # only processes in this run's cgroup
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()

    async def close(self) -> None:
        """Kill what is left, wait (up to 2 s) until it is gone, and remove the cgroup."""
        deadline = time.monotonic() + 2.0
        while True:
            self.kill()
            if not self.pids() or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
        self.remove()


# -- can a run happen here -----------------------------------------------------------------------


def _system_binds() -> list[tuple[str, list[str]]]:
    """(destination, bwrap arguments) for the read-only host paths the interpreter needs."""
    binds: list[tuple[str, list[str]]] = []
    covered: list[str] = []

    def ro(path: str) -> None:
        binds.append((path, ["--ro-bind", path, path]))
        covered.append(path)

    if os.path.isdir("/usr"):
        ro("/usr")
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            binds.append((top, ["--symlink", os.readlink(top), top]))
            covered.append(top)
        elif os.path.isdir(top):
            ro(top)
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(sys.executable)}
    paths.update(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    candidates = {p for path in paths if path for p in (os.path.abspath(path), os.path.realpath(path))}
    candidates.add(os.path.dirname(os.path.realpath(sys.executable)))

    def under(path: str, roots: list[str]) -> bool:
        return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)

    chosen = sorted(p for p in candidates if os.path.isdir(p) and not under(p, covered))
    for path in chosen:
        if not under(path, [other for other in chosen if other != path]):
            ro(path)
    for name in ("ld.so.cache", "localtime", "alternatives"):
        path = f"/etc/{name}"
        if os.path.exists(path):
            binds.append((path, ["--ro-bind", path, path]))
    return binds


def _probe_argv(bwrap: str) -> list[str]:
    mounts = [arg for _, args in _system_binds() for arg in args]
    return [bwrap, *_NAMESPACES, *mounts, "--proc", "/proc", "--dev", "/dev", sys.executable, "-I", "-S", "-c", "pass"]


@functools.cache
def _sandbox_problem(bwrap: str | None) -> str | None:
    """Why code cannot run in a bubblewrap sandbox here, or None when it can."""
    if bwrap is None or not os.access(bwrap, os.X_OK) or not os.path.isfile(bwrap):
        where = "on PATH" if bwrap is None else f"at {bwrap!r}"
        return f"run_python needs bubblewrap (bwrap), which is not installed {where}; {_INSTALL}. No code was run."
    try:
        done = subprocess.run(_probe_argv(bwrap), capture_output=True, env=dict(_ENV), timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"run_python cannot start bubblewrap at {bwrap!r}: {exc}. No code was run."
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip() or f"exit status {done.returncode}"
        return (
            f"run_python needs bubblewrap (bwrap 0.8 or newer) to create user, PID and network namespaces, "
            f"and {bwrap!r} cannot here ({why}): enable unprivileged user namespaces "
            f"(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0) or allow them in the "
            f"container, or {_INSTALL}. No code was run."
        )
    if os.geteuid() == 0 and _pids_cgroup_root() is None:
        return (
            "run_python cannot cap the number of processes here: it runs as root, which RLIMIT_NPROC does not bound, "
            "and no pids cgroup is writable (/sys/fs/cgroup). Run the engine as another user, or give it a pids "
            "cgroup it may create children in. No code was run."
        )
    return None


def sandbox_available(bwrap: str | None = None) -> bool:
    """Whether `run_python` can run code here: bubblewrap (`bwrap`, or the one on PATH) works and processes can be capped."""
    return _sandbox_problem(bwrap if bwrap is not None else shutil.which("bwrap")) is None


# -- the disk quota ------------------------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    """`root` and every process under it, from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes()
            ppid = int(raw[raw.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _held_deleted(pids: list[int], seen: set[tuple[int, int]]) -> int:
    """Bytes of deleted regular files the processes still hold open or mapped (each inode once).

    Mapped ones are found through /proc/PID/map_files, which only root may read.
    """
    total = 0
    for pid in pids:
        links: list[str] = []
        with contextlib.suppress(OSError):
            links.extend(f"/proc/{pid}/fd/{name}" for name in os.listdir(f"/proc/{pid}/fd"))
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            links.extend(f"/proc/{pid}/map_files/{line.split()[0]}" for line in maps if line.rstrip().endswith("(deleted)"))
        for link in links:
            try:
                if link.split("/")[3] == "fd" and not os.readlink(link).endswith(" (deleted)"):
                    continue
                st = os.stat(link)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if stat.S_ISREG(st.st_mode) and key not in seen:
                seen.add(key)
                total += max(st.st_blocks * 512, _MIN_INODE)
    return total


def _disk_used(root: Path, pids: list[int]) -> int:
    """Bytes the workspace's files take (each inode once, at least a block) plus deleted files the run holds."""
    seen: set[tuple[int, int]] = set()
    total = 0
    todo = [str(root)]
    while todo:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    todo.append(entry.path)
                key = (st.st_dev, st.st_ino)
                if key not in seen:
                    seen.add(key)
                    total += max(st.st_blocks * 512, _MIN_INODE)
    return total + _held_deleted(pids, seen)


# -- the tool ------------------------------------------------------------------------------------


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


def _data_fd(text: str) -> int:
    """A memory file holding `text`, read from the start: what bwrap's --ro-bind-data copies into the sandbox."""
    fd = os.memfd_create("planexec-sandbox", os.MFD_CLOEXEC)
    view = memoryview(text.encode("utf-8"))
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


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
    `memory_mb` the address space of each process, `max_output` the bytes
    kept of stdout and of stderr, `max_file_mb` the size of any file written,
    `max_disk_mb` how much the workspace may grow during one run,
    `max_processes` the tasks (processes and threads) the code may have at
    once, `scratch_mb` the size of each of its private ``/tmp`` and
    ``/dev/shm``. `bwrap` is the bubblewrap binary (by default the one on
    PATH when this module was imported). The sandbox is checked at the first
    call, not here: where it cannot work, each call raises `ToolError` and
    runs nothing. See the module docstring for what is isolated.

    With `writable` False the workspace is bound read-only: the code can
    read and compute but change nothing, reach nothing and see no secret, so
    the tool is declared read-only with no sensitive argument (a critic
    checks work with it after reading untrusted output).
    """
    root = Path(workspace).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"workspace {str(root)!r} is not a directory")
    exe = os.fspath(bwrap) if bwrap is not None else None
    ws = str(root)
    config = json.dumps(
        {
            "name": _CODE_NAME,
            "limits": {
                "RLIMIT_AS": memory_mb * 2**20,
                "RLIMIT_CPU": math.ceil(timeout) + 1,
                "RLIMIT_FSIZE": max_file_mb * 2**20,
                "RLIMIT_CORE": 0,
                "RLIMIT_NPROC": max_processes + 1,  # bwrap's init is the other task of the sandbox user
            },
        }
    )
    env = {**_ENV, "HOME": ws}
    passwd = f"sandbox:x:{_UID}:{_UID}:run_python:{ws}:/usr/sbin/nologin\n"
    group = f"sandbox:x:{_UID}:\n"
    scratch = str(scratch_mb * 2**20)

    def bwrap_argv(fds: tuple[int, int, int]) -> list[str]:
        code_fd, passwd_fd, group_fd = fds
        mounts = [
            *_system_binds(),
            ("/etc/passwd", ["--ro-bind-data", str(passwd_fd), "/etc/passwd"]),
            ("/etc/group", ["--ro-bind-data", str(group_fd), "/etc/group"]),
            ("/proc", ["--proc", "/proc"]),
            ("/dev", ["--dev", "/dev"]),
            ("/dev/shm", ["--size", scratch, "--tmpfs", "/dev/shm"]),
            ("/tmp", ["--size", scratch, "--tmpfs", "/tmp"]),
            (_CODE_PATH, ["--ro-bind-data", str(code_fd), _CODE_PATH]),
            (ws, ["--bind" if writable else "--ro-bind", ws, ws]),
        ]
        mounts.sort(key=lambda item: len(Path(item[0]).parts))  # a deeper mount lands on top of a shallower one
        envs = [arg for name, value in env.items() for arg in ("--setenv", name, value)]
        return [
            exe or "bwrap",
            *_NAMESPACES,
            *envs,
            *[arg for _, args in mounts for arg in args],
            "--remount-ro",
            "/dev",
            "--remount-ro",
            "/",
            "--chdir",
            ws,
            "--",
            sys.executable,
            "-I",
            "-X",
            "utf8",
            "-c",
            _BOOTSTRAP,
            config,
            _CODE_PATH,
        ]

    async def run_python(code: str, stdin: str = "") -> PythonRun:
        """Run a Python 3 program in the workspace directory and return its stdout, stderr and exit code.

        The program runs in a fresh, isolated interpreter with no network
        access. Print what you want to see. Files it writes with relative
        paths land in the workspace. It is killed when it runs past its
        time limit (`timed_out` is then true); output past a bound is cut.
        """
        problem = await asyncio.to_thread(_sandbox_problem, exe)  # probed once per binary, then cached
        if problem is not None:
            raise ToolError(problem, tool="run_python")
        cgroup_root = _pids_cgroup_root()
        try:
            cgroup = _Cgroup.create(cgroup_root, max_processes + 2) if cgroup_root else None  # + bwrap and its init
        except OSError as exc:
            raise ToolError(f"run_python could not create the sandbox's pids cgroup: {exc}. No code was run.", tool="run_python") from None
        out, err = _Capture(max_output), _Capture(max_output)
        timed_out = quota_exceeded = False
        start = time.monotonic()
        fds: list[int] = []
        try:
            fds.extend(_data_fd(text) for text in (code, passwd, group))
            baseline = await asyncio.to_thread(_disk_used, root, [])
            argv = bwrap_argv((fds[0], fds[1], fds[2]))
            if cgroup is not None:  # join the cgroup before exec, so nothing the code forks is outside it
                join = f'echo $$ > "$0" || {{ echo "{_JOIN_MARK}" >&2; exit {_JOIN_FAILED}; }}; exec "$@"'
                argv = ["/bin/sh", "-c", join, str(cgroup.path / "cgroup.procs"), *argv]
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=root,
                env=env,  # bwrap's init keeps its own environment, readable in the sandbox's /proc/1/environ
                pass_fds=fds,
                start_new_session=True,  # its own process group
            )
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise
        finally:
            for fd in fds:
                os.close(fd)
        assert proc.stdin and proc.stdout and proc.stderr

        def used() -> int:
            return _disk_used(root, cgroup.pids() if cgroup is not None else _descendants(proc.pid))

        async def watch() -> None:
            """Return when the workspace has grown past the quota."""
            while True:
                await asyncio.sleep(_POLL)
                if await asyncio.to_thread(used) - baseline > max_disk_mb * 2**20:
                    return

        io = asyncio.gather(_feed(proc.stdin, stdin.encode()), out.drain(proc.stdout), err.drain(proc.stderr))
        exited = asyncio.ensure_future(proc.wait())
        watcher = asyncio.ensure_future(watch())
        try:
            done, _ = await asyncio.wait({exited, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            timed_out = not done
            quota_exceeded = watcher in done
        finally:  # also when the step is cancelled: nothing the code started outlives the call
            watcher.cancel()
            if proc.returncode is None:  # not reaped yet, so its process group cannot be another's
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # bwrap; its init dies with it, and the namespace with that
            if cgroup is not None:
                cgroup.kill()
            await proc.wait()
            if cgroup is not None:
                await cgroup.close()
            exited.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            # a process that held the pipes open may take a moment to be reaped; do not wait long for it
            _, pending = await asyncio.wait([io], timeout=1.0)
            for task in pending:
                task.cancel()
        if proc.returncode == _JOIN_FAILED and out.kept == b"" and err.text().startswith(_JOIN_MARK):
            raise ToolError(f"run_python could not put the sandbox in its pids cgroup: {err.text().strip()}", tool="run_python")
        if not quota_exceeded:  # it may have finished over the quota between two polls
            quota_exceeded = await asyncio.to_thread(_disk_used, root, []) - baseline > max_disk_mb * 2**20
        return PythonRun(
            stdout=out.text(),
            stderr=err.text(),
            exit_code=proc.returncode,
            timed_out=timed_out,
            quota_exceeded=quota_exceeded,
            duration=round(time.monotonic() - start, 3),
            truncated=bool(out.dropped or err.dropped),
            isolation="bubblewrap",
        )

    if not writable:  # it can change nothing and send nothing anywhere: a check, not an action
        return Tool(run_python, name="run_python", read_only=True, untrusted_output=True)
    # side-effecting (it writes in the workspace), so approved per call unless the plan granted it;
    # the code is what it does, and its output may echo files it read
    return Tool(run_python, name="run_python", sensitive=("code",), untrusted_output=True)
