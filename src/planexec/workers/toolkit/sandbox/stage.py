"""For an engine that runs as root: the namespaces in which the sandbox's user is an unprivileged host uid.

Owns `HOST_ID` and `SLOTS` (the host uids and gids the sandbox's user is
when the engine is root: one per call running at once), `Stage` (a
workspace's mount and user namespaces for one slot, held as descriptors),
`stage_for` and `release` (a stage for one call, made by `stage_helper`
the first time, then cached) and `StageError`. Imports the stdlib only; runs `stage_helper` by its path.

Why: bwrap started by root with ``--unshare-user --uid 1000`` maps the
sandbox's uid 1000 to host uid 0 (``/proc/self/uid_map`` read ``1000 0 1``):
without capabilities, but every root-owned file passed the permission
checks, so the code wrote ``/proc/sys`` and made setuid-root files. Now,
as root, bwrap joins a user namespace made beforehand that maps 1000 to
one host uid and nothing else, and starts (through ``nsenter``) in a mount
namespace where the workspace is an idmapped mount: the code is that uid
on the host, owns the workspace's root-owned files and writes files that
root owns on disk. The uid is `HOST_ID` + the call's slot, so two calls
running at once never share a user (whose kernel limits, such as inotify
instances or pending signals, are per user: measured, a call holding 128
inotify instances made the other's ``inotify_init`` fail). See `stage_helper` for what the namespaces hold.

The namespaces live as long as their descriptors: no mount is left on the
host, whatever happens to the engine; only the empty directory `STAGE_DIR`
is. Idle stages are kept for the last `_KEEP` (workspace, slot) pairs. The
workspace is mounted from a descriptor checked against the directory the
tool was made for, so a directory or a link swapped in at its path is
refused, never mounted writable.

An idmapped mount needs Linux 5.12 and a file system that supports one
(ext4, xfs, btrfs, f2fs, vfat; tmpfs since 6.3; measured: overlayfs refuses
one on 6.18, so a container's overlay root is not a workspace for a root
engine, a volume or a tmpfs is); elsewhere `stage_for` raises `StageError`
saying so and no code runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["HOST_ID", "SLOTS", "STAGE_DIR", "Stage", "StageError", "discard", "release", "stage_for"]

HOST_ID = 2147418112  # 2^31 - 2^16: no user on the host, above systemd's dynamic and container ranges
SLOTS = 256  # calls at once: call n of those running is host uid HOST_ID + n
STAGE_DIR = "/run/planexec-sandbox"  # empty on the host; each stage mounts its own tmpfs here, in its own namespace
_KEEP = 32
_SETUP_TIMEOUT = 30.0  # seconds the set-up may take (it takes ~40 ms)
_HELPER = Path(__file__).with_name("stage_helper.py")  # run by path: it must not import planexec


class StageError(Exception):
    """The namespaces a root engine's sandbox needs could not be made here; the message says why and what to do."""


@dataclass
class Stage:
    """One workspace's namespaces for one slot: `mount_fd` (``nsenter --mount``), `userns_fd` (``bwrap --userns``).

    `host_id` is the host uid and gid of the slot; `busy` is true while a
    call holds the stage (from `stage_for` to `release`).
    """

    mount_fd: int
    userns_fd: int
    inode: tuple[int, int]
    host_id: int
    busy: bool = field(default=False)

    def source(self, path: str) -> str:
        """Where bwrap finds host path `path` (a source or the workspace) in this stage."""
        return STAGE_DIR + path

    def close(self) -> None:
        for fd in (self.mount_fd, self.userns_fd):
            try:
                os.close(fd)
            except OSError:
                pass


_stages: OrderedDict[tuple[str, tuple[str, ...], int], Stage] = OrderedDict()
_busy: set[int] = set()  # the slots of the calls running now
_lock = threading.Lock()


def stage_for(workspace: str, sources: tuple[str, ...], inode: tuple[int, int], *, idmap: bool = True) -> Stage:
    """A stage of `workspace` with `sources` bound read-only, for one call (blocking: call it in a thread).

    Each call running at once gets its own slot, so its own host uid: per-user
    kernel limits (inotify instances, pending signals, message queues, pipe
    buffers, RLIMIT_NPROC) are not shared between two calls. The stage is
    the caller's until it calls `release`, after the call's processes are
    gone. `inode` is the workspace directory's (device, inode) when the tool
    was made: a directory swapped in at that path since is refused rather
    than mounted writable. `idmap` False (the probe's throwaway workspace
    only) binds the workspace as it is.
    """
    with _lock:
        slot = next((n for n in range(SLOTS) if n not in _busy), None)
        if slot is None:
            raise StageError(f"run_python runs at most {SLOTS} calls at once as root, and {SLOTS} are running")
        _busy.add(slot)  # the slot is this call's from here: the stage is made outside the lock, calls at once in parallel
        key = (workspace, sources, slot)
        stage = _stages.get(key)
        if stage is not None and stage.inode == inode:
            _stages.move_to_end(key)
            stage.busy = True
            return stage
    try:
        made = _make(workspace, sources, inode, HOST_ID + slot, idmap)
    except BaseException:
        with _lock:
            _busy.discard(slot)
        raise
    with _lock:
        old = _stages.pop(key, None)
        if old is not None and not old.busy:
            old.close()
        made.busy = True
        _stages[key] = made
        idle = [k for k, s in _stages.items() if not s.busy]
        for k in idle[: max(0, len(_stages) - _KEEP)]:
            _stages.pop(k).close()
        return made


def release(stage: Stage) -> None:
    """The call that held `stage` is over (its processes are gone): its slot is free again."""
    with _lock:
        stage.busy = False
        _busy.discard(stage.host_id - HOST_ID)
        if all(s is not stage for s in _stages.values()):
            stage.close()


def discard(workspace: str) -> None:
    """Forget the stages of `workspace` (a throwaway one): closed now, or by `release` when its call is over."""
    with _lock:
        for key in [k for k in _stages if k[0] == workspace]:
            stage = _stages.pop(key)
            if not stage.busy:
                stage.close()


def _make(workspace: str, sources: tuple[str, ...], inode: tuple[int, int], host_id: int, idmap: bool) -> Stage:
    config = json.dumps(
        {
            "workspace": workspace,
            "inode": list(inode),
            "sources": list(sources),
            "stage": STAGE_DIR,
            "host_id": host_id,
            "idmap": idmap,
        }
    )
    try:
        helper = subprocess.Popen(
            [sys.executable, "-I", "-S", str(_HELPER), config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        raise StageError(f"cannot start the sandbox's set-up ({exc})") from None
    assert helper.stdin is not None and helper.stdout is not None
    watchdog = threading.Timer(_SETUP_TIMEOUT, helper.kill)  # a set-up that hangs fails instead of holding the lock
    watchdog.start()
    try:
        line = helper.stdout.readline()
        try:
            answer = json.loads(line)
        except ValueError:
            stderr = helper.communicate(timeout=10)[1].decode(errors="replace").strip()
            raise StageError(f"run_python's set-up of its namespaces as root failed: {stderr or 'no answer'}") from None
        if "error" in answer:
            raise StageError(_explain(answer["step"], answer["error"], workspace))
        pid = answer["pid"]
        mount_fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            userns_fd = os.open(f"/proc/{pid}/fd/{answer['userns']}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            os.close(mount_fd)
            raise
        return Stage(mount_fd, userns_fd, inode, host_id)
    finally:
        watchdog.cancel()
        helper.stdin.close()
        try:
            helper.wait(timeout=10)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()
        helper.stdout.close()
        if helper.stderr is not None:
            helper.stderr.close()


def _explain(step: str, error: str, workspace: str) -> str:
    if step == "workspace":
        return f"run_python will not mount {workspace!r} for its sandbox: {error}"
    if step.startswith("an idmapped mount"):
        return (
            f"run_python runs code as an unprivileged user (uid {HOST_ID} and up) when the engine runs as root, and needs an "
            f"idmapped mount of the workspace for that user to write in it; the kernel refused one for {workspace!r} "
            f"({error}): put the workspace on a file system that supports idmapped mounts (ext4, xfs, btrfs; tmpfs on "
            "Linux 6.3+), or run the engine as a non-root user"
        )
    return f"run_python could not set up its sandbox's namespaces as root ({step}: {error})"
