"""The sandbox's cgroups: a pids and a memory bound for all of a call's processes together, and their cleanup.

Owns `CgroupRoot` (where this process may create capped child cgroups, v1
or v2), `pids_root`, `memory_root` and `cgroup_roots` (found once a
process), `CallCgroups` (one call's groups: created with their limits,
joined by a shell wrapper before bwrap starts, emptied and removed at the
end) and `reap` (the groups of an engine that was killed mid-call). Imports
the stdlib only.

A call's group is named ``planexec-<pid>-<start>-<pidns>-<token>``: the
engine's pid, its start time (in clock ticks, from ``/proc/<pid>/stat``)
and its PID namespace, so that `reap` can tell an engine that is gone from
one that still runs, even when its pid was reused, and leaves alone the
groups of engines in another PID namespace sharing the cgroup tree. An engine killed during a call leaves its groups
behind (nobody is left to remove them; the processes in them died with the
engine, through bwrap's ``--die-with-parent``); the next call of any engine
under the same cgroup reaps them.

Memory: v1 ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``,
so swap is not a way around it), v2 ``memory.max`` (and ``memory.swap.max``
0). The kernel charges to the group the pages of every process in it,
anonymous memory, tmpfs and shared memory (SysV segments, memfds, the
scratch ``/tmp``), and kernel memory such as socket buffers and pipes;
measured on Linux 6.18 (v1): 5 processes x 400 MB under 512 MB, one held
its 400 MB and the kernel killed the other four; 1.5 GB of socket buffers
stopped under 256 MB. A kill by the group's limit is counted in
``memory.oom_control`` (v1) or ``memory.events`` (v2): `CallCgroups.oom_kills`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CallCgroups", "CgroupRoot", "cgroup_roots", "memory_root", "pids_root", "reap"]

# planexec-<pid>-<start>-<pid namespace>-<token>; planexec-<pid>-<token> is an earlier planexec's
_NAME = re.compile(r"planexec-(\d+)-(\d+)-(\d+)-[0-9a-f]+")
_OLD_NAME = re.compile(r"planexec-(\d+)-[0-9a-f]{8}")


@dataclass(frozen=True)
class CgroupRoot:
    """A cgroup directory under which this process may create children with `controller` set, and its version."""

    path: Path
    v2: bool
    controller: str


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


def _find_root(controller: str) -> CgroupRoot | None:
    """Where this process may create children with `controller` (v1 hierarchy first, then v2), or None."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            own = [line.rstrip("\n").split(":", 2) for line in f]
        mounts = list(_mounts())
    except (OSError, ValueError, IndexError):
        return None
    for _, controllers, path in own:  # v1: a hierarchy with the controller
        if controller in controllers.split(","):
            for root, point, fstype, options in mounts:
                if fstype == "cgroup" and controller in options.split(","):
                    found = CgroupRoot(_own_cgroup_dir(root, point, path), v2=False, controller=controller)
                    return found if _can_create(found) else None
    for hierarchy, _, path in own:  # v2: the controller enabled (or enablable) for our children
        if hierarchy == "0":
            for root, point, fstype, _ in mounts:
                if fstype == "cgroup2":
                    found = CgroupRoot(_own_cgroup_dir(root, point, path), v2=True, controller=controller)
                    if _can_create(found):
                        return found
    return None


def _can_create(root: CgroupRoot) -> bool:
    try:
        if root.v2:
            if root.controller not in (root.path / "cgroup.controllers").read_text().split():
                return False
            if root.controller not in (root.path / "cgroup.subtree_control").read_text().split():
                (root.path / "cgroup.subtree_control").write_text(f"+{root.controller}")
        probe = _create(root.path / f"planexec-probe-{os.getpid()}-{secrets.token_hex(4)}")
    except OSError:
        return False
    try:
        _LIMITS[root.controller](probe, root.v2, 2**30 if root.controller == "memory" else 1)
    except OSError:
        return False
    finally:
        _remove(probe)
    return True


@functools.cache
def pids_root() -> CgroupRoot | None:
    """Where a call's pids cgroup goes, or None when no pids cgroup is writable here."""
    return _find_root("pids")


@functools.cache
def memory_root() -> CgroupRoot | None:
    """Where a call's memory cgroup goes, or None when no memory cgroup is writable here."""
    return _find_root("memory")


def cgroup_roots() -> list[CgroupRoot]:
    """The distinct roots this process's calls create groups in (one for v2, one per controller for v1)."""
    roots: list[CgroupRoot] = []
    for root in (pids_root(), memory_root()):
        if root is not None and all(root.path != other.path for other in roots):
            roots.append(root)
    return roots


def _create(path: Path) -> Path:
    path.mkdir()
    return path


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


def _write_checked(path: Path, value: str) -> None:
    path.write_text(value)
    if path.read_text().strip() != value:
        raise OSError(f"{path} did not take {value}")


def _limit_pids(group: Path, v2: bool, max_tasks: int) -> None:
    _write_checked(group / "pids.max", str(max_tasks))


def _limit_memory(group: Path, v2: bool, limit: int) -> None:
    if v2:
        _write_checked(group / "memory.max", str(limit))
        if (group / "memory.swap.max").exists():
            _write_checked(group / "memory.swap.max", "0")
        return
    _write_checked(group / "memory.limit_in_bytes", str(limit))
    if (group / "memory.memsw.limit_in_bytes").exists():  # memory and swap together: no way around it by swapping
        _write_checked(group / "memory.memsw.limit_in_bytes", str(limit))


_LIMITS = {"pids": _limit_pids, "memory": _limit_memory}


def _start_time(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot, or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        return int(raw[raw.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int, start: int | None) -> bool:
    """Whether the engine that made a group still runs: process `pid`, started at `start` (when known)."""
    now = _start_time(pid)
    return now is not None and (start is None or now == start)


@functools.cache
def _own_start() -> int | None:
    return _start_time(os.getpid())


@functools.cache
def _pid_namespace() -> int:
    """This process's PID namespace (its inode): pids in group names mean something only within it."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _gone(name: str) -> bool:
    """Whether `name` is a group made by an engine of this PID namespace that no longer runs.

    A group of another PID namespace (another container sharing the cgroup
    tree) is never taken for a dead engine's: its pid means nothing here.
    """
    match = _NAME.fullmatch(name)
    if match is not None:
        return int(match[3]) == _pid_namespace() and not _alive(int(match[1]), int(match[2]))
    old = _OLD_NAME.fullmatch(name)
    return old is not None and not _alive(int(old[1]), None)


def _procs(group: Path) -> list[int]:
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill(group: Path, v2: bool) -> None:
    if v2:
        with contextlib.suppress(OSError):
            (group / "cgroup.kill").write_text("1")
            return
    for pid in _procs(group):  # only processes in this group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def reap() -> list[Path]:
    """Remove the groups of engines that are gone (their processes killed first); return what was removed.

    Groups of engines still running, this one included, are left alone.
    """
    removed = []
    for root in cgroup_roots():
        try:
            entries = list(os.scandir(root.path))
        except OSError:
            continue
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False) or not _gone(entry.name):
                continue
            group = Path(entry.path)
            deadline = time.monotonic() + 1.0
            while _procs(group) and time.monotonic() < deadline:
                _kill(group, root.v2)
                time.sleep(0.01)
            _remove(group)
            if not group.exists():
                removed.append(group)
    return removed


class CallCgroups:
    """One call's groups: pids (`max_tasks`) and memory (`memory_bytes`) where the host offers them.

    `procs_files` are the ``cgroup.procs`` files the wrapper writes its pid
    into before it starts bwrap, so that nothing the code forks is outside.
    """

    def __init__(self, groups: list[tuple[Path, CgroupRoot]], memory: Path | None) -> None:
        self.groups = groups
        self.memory = memory
        self.oom_kills_seen = 0  # `oom_kills` read after the call, before the groups are removed

    @classmethod
    def create(cls, max_tasks: int, memory_bytes: int) -> CallCgroups:
        """Create the call's groups with their limits; `OSError` (nothing left behind) when one cannot be."""
        pid = os.getpid()
        name = f"planexec-{pid}-{_own_start() or 0}-{_pid_namespace()}-{secrets.token_hex(4)}"
        wanted = {"pids": max_tasks, "memory": memory_bytes}
        groups: list[tuple[Path, CgroupRoot]] = []
        memory: Path | None = None
        try:
            for root in (pids_root(), memory_root()):
                if root is None:
                    continue
                group = root.path / name
                if all(group != made for made, _ in groups):
                    groups.append((_create(group), root))
                _LIMITS[root.controller](group, root.v2, wanted[root.controller])
                if root.controller == "memory":
                    memory = group
        except OSError:
            for group, _ in groups:
                _remove(group)
            raise
        return cls(groups, memory)

    @property
    def procs_files(self) -> list[Path]:
        return [group / "cgroup.procs" for group, _ in self.groups]

    def pids(self) -> list[int]:
        """The processes in the call's groups."""
        return sorted({pid for group, _ in self.groups for pid in _procs(group)})

    def oom_kills(self) -> int:
        """How many processes the kernel killed for going over the memory limit (0 without a memory group)."""
        if self.memory is None:
            return 0
        for name in ("memory.events", "memory.oom_control"):
            with contextlib.suppress(OSError, ValueError):
                for line in (self.memory / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        return 0

    def kill(self) -> None:
        """SIGKILL every process in the call's groups."""
        for group, root in self.groups:
            _kill(group, root.v2)

    def remove(self) -> None:
        for group, _ in self.groups:
            _remove(group)

    async def close(self) -> None:
        """Kill what is left, wait (up to 2 s) until it is gone, and remove the groups."""
        deadline = time.monotonic() + 2.0
        while True:
            self.kill()
            if not self.pids() or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
        self.remove()
