"""The command line that starts one sandbox: the cgroup wrapper, ``nsenter`` as root, bwrap and its arguments.

Owns `system_binds` (the read-only host paths the interpreter needs),
`Launch` (what one command needs: fds, the stage, the cgroups to join) and
`command` (the argv, built without I/O). Imports the stdlib and
`planexec.workers.toolkit.sandbox.stage` only.

As another user, bwrap makes its own user namespace (``--unshare-user``,
uid 1000 is the engine's uid, ``--disable-userns``). As root, ``nsenter``
first enters the workspace's stage (its mount namespace) and becomes the
stage's host uid (`Stage.host_id`, no supplementary group); bwrap, run as
that user, joins the stage's user namespace (``--userns``, where uid 1000
is that uid) and binds every path from the stage. Either
way: new PID, network, IPC, UTS and cgroup namespaces, ``--new-session``,
``--die-with-parent``, no capabilities, a read-only root, ``/proc`` and
``/dev`` (six device nodes, no pseudo-terminals),
the seccomp filter, and the code's file, ``/etc/passwd`` and ``/etc/group``
given as data.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from planexec.workers.toolkit.sandbox.stage import Stage

__all__ = ["CODE_PATH", "ENV", "JOIN_FAILED", "JOIN_MARK", "SANDBOX_ID", "Launch", "command", "system_binds"]

SANDBOX_ID = 1000  # the uid and gid the code has inside the sandbox
CODE_PATH = "/run/planexec/code.py"
JOIN_FAILED = 125  # the wrapper's exit status when it could not put bwrap in the call's cgroups
JOIN_MARK = "planexec-sandbox: cannot join the call's cgroups"
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "MALLOC_ARENA_MAX": "2",  # else glibc reserves 64 MiB per thread, and RLIMIT_AS counts reservations
}
# /dev: these nodes and links only. No /dev/pts: the kernel's count of pseudo-terminals is one for the host
# (measured: a call held 3,071 and the next call's openpty() failed with ENOSPC), and their buffers are not charged to
# the call's memory cgroup; bwrap's --dev would mount a devpts with no bound.
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))
_SHARED = (
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


def system_binds() -> list[tuple[str, list[str]]]:
    """(destination, bwrap arguments) for the read-only host paths the interpreter needs, bound at their own paths."""
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


def bind_sources(binds: list[tuple[str, list[str]]]) -> tuple[str, ...]:
    """The host paths `binds` read (what a stage must hold)."""
    return tuple(args[1] for _, args in binds if args[0] == "--ro-bind")


@dataclass(frozen=True)
class Launch:
    """What one sandbox's command needs.

    `data` maps a path in the sandbox to the fd bwrap copies it from
    (``--ro-bind-data``); `seccomp_fd` holds the filter; `stage` is set when
    the engine is root; `join` lists the ``cgroup.procs`` files to join, and
    the wrapper writes `JOIN_MARK` to pipe `join_fd` when it cannot, and
    ``joined`` when it did.
    """

    bwrap: str
    nsenter: str
    workspace: str
    writable: bool
    binds: list[tuple[str, list[str]]]
    data: dict[str, int]
    seccomp_fd: int
    env: dict[str, str]
    scratch_bytes: int
    stage: Stage | None = None
    join: tuple[Path, ...] = ()
    join_fd: int = -1

    @property
    def fds(self) -> list[int]:
        """The descriptors the command inherits."""
        fds = [*self.data.values(), self.seccomp_fd, *([self.join_fd] if self.join else [])]
        if self.stage is not None:
            fds += [self.stage.mount_fd, self.stage.userns_fd]
        return fds


def command(launch: Launch, program: list[str]) -> list[str]:
    """The argv that runs `program` in the sandbox `launch` describes."""
    stage = launch.stage

    def source(path: str) -> str:
        return stage.source(path) if stage is not None else path

    scratch = str(launch.scratch_bytes)
    ws = launch.workspace
    mounts: list[tuple[str, list[str]]] = [
        (dest, [args[0], source(args[1]), args[2]] if args[0] == "--ro-bind" else args) for dest, args in launch.binds
    ]
    mounts += [(dest, ["--ro-bind-data", str(fd), dest]) for dest, fd in launch.data.items()]
    mounts += [
        ("/proc", ["--proc", "/proc"]),
        ("/dev", ["--size", str(2**16), "--tmpfs", "/dev"]),
        *[(f"/dev/{node}", ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]) for node in _DEVICES],
        *[(f"/dev/{name}", ["--symlink", target, f"/dev/{name}"]) for name, target in _DEV_LINKS],
        ("/dev/shm", ["--size", scratch, "--tmpfs", "/dev/shm"]),
        ("/tmp", ["--size", scratch, "--tmpfs", "/tmp"]),
        (ws, ["--bind" if launch.writable else "--ro-bind", source(ws), ws]),
    ]
    mounts.sort(key=lambda item: len(Path(item[0]).parts))  # a deeper mount lands on top of a shallower one
    if stage is not None:
        user = ["--userns", str(stage.userns_fd), "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID)]
    else:
        user = ["--unshare-user", "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID), "--disable-userns"]
    argv = [
        launch.bwrap,
        *user,
        *_SHARED,
        *[arg for name, value in launch.env.items() for arg in ("--setenv", name, value)],
        *[arg for _, args in mounts for arg in args],
        "--remount-ro",
        "/proc",  # /proc/sys, sysrq-trigger and the rest: read-only, whoever the code is
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--seccomp",
        str(launch.seccomp_fd),
        "--chdir",
        ws,
        "--",
        *program,
    ]
    if stage is not None:  # enter the stage as root, then become HOST_ID (no supplementary group) to run bwrap
        host = str(stage.host_id)
        argv = [launch.nsenter, f"--mount=/proc/self/fd/{stage.mount_fd}", "-S", host, "-G", host, "--", *argv]
    if launch.join:  # join the cgroups before exec, so nothing the code forks is outside them
        # a failure is told through `join_fd`, which the code never holds (a status or a message on stderr it could fake)
        writes = " && ".join(f'echo $$ > "${{{index + 1}}}"' for index in range(len(launch.join)))
        tell = f"/proc/self/fd/{launch.join_fd}"
        failed = f'echo "{JOIN_MARK}" > {tell}; exit {JOIN_FAILED}'
        join = f'{{ {writes}; }} 2>/dev/null || {{ {failed}; }}; echo joined > {tell}; shift {len(launch.join)}; exec "$@"'
        argv = ["/bin/sh", "-c", join, "sh", *[str(path) for path in launch.join], *argv]
    return argv
