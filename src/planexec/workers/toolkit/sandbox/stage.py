"""For an engine that runs as root: the namespaces in which the sandbox's user is an unprivileged host uid.

Owns `HOST_ID` (the host uid and gid the sandbox's user is when the engine
is root), `Stage` (one workspace's mount and user namespaces, held as
descriptors), `stage_for` (made once a workspace by `stage_helper`, then
cached) and `StageError`. Imports the stdlib only; runs `stage_helper` by its path.

Why: bwrap started by root with ``--unshare-user --uid 1000`` maps the
sandbox's uid 1000 to host uid 0 (``/proc/self/uid_map`` read ``1000 0 1``):
without capabilities, but every root-owned file passed the permission
checks, so the code wrote ``/proc/sys`` and made setuid-root files. Now,
as root, bwrap joins a user namespace made beforehand that maps 1000 to
`HOST_ID` and nothing else, and starts (through ``nsenter``) in a mount
namespace where the workspace is an idmapped mount: the code is `HOST_ID`
on the host, owns the workspace's root-owned files and writes files that
root owns on disk. See `stage_helper` for what the namespaces hold.

The namespaces live as long as their descriptors: no mount is left on the
host, whatever happens to the engine; only the empty directory `STAGE_DIR`
is. A stage is kept for the last `_KEEP` workspaces and made again when its
workspace's directory was replaced.

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

__all__ = ["HOST_ID", "STAGE_DIR", "Stage", "StageError", "discard", "release", "stage_for"]

HOST_ID = 2147418112  # 2^31 - 2^16: no user on the host, above systemd's dynamic and container ranges
STAGE_DIR = "/run/planexec-sandbox"  # empty on the host; each stage mounts its own tmpfs here, in its own namespace
_KEEP = 16
_SETUP_TIMEOUT = 30.0  # seconds the set-up may take (it takes ~40 ms)
_HELPER = Path(__file__).with_name("stage_helper.py")  # run by path: it must not import planexec


class StageError(Exception):
    """The namespaces a root engine's sandbox needs could not be made here; the message says why and what to do."""


@dataclass
class Stage:
    """One workspace's namespaces: `mount_fd` (for ``nsenter --mount``) and `userns_fd` (for ``bwrap --userns``)."""

    mount_fd: int
    userns_fd: int
    inode: tuple[int, int]
    users: int = field(default=0)

    def source(self, path: str) -> str:
        """Where bwrap finds host path `path` (a source or the workspace) in this stage."""
        return STAGE_DIR + path

    def close(self) -> None:
        for fd in (self.mount_fd, self.userns_fd):
            try:
                os.close(fd)
            except OSError:
                pass


_stages: OrderedDict[tuple[str, tuple[str, ...]], Stage] = OrderedDict()
_lock = threading.Lock()


def _inode(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def stage_for(workspace: str, sources: tuple[str, ...], *, idmap: bool = True) -> Stage:
    """The stage of `workspace` with `sources` bound read-only; made on first use (blocking: call it in a thread).

    The caller counts itself in `Stage.users` while it starts a process
    with the descriptors, so that the stage is not closed under it, and
    calls `release` once it has. `idmap` False (the probe's throwaway
    workspace only) binds the workspace as it is.
    """
    key = (workspace, sources)
    with _lock:
        stage = _stages.get(key)
        if stage is not None and stage.inode == _inode(workspace):
            _stages.move_to_end(key)
            stage.users += 1
            return stage
        stage = _make(workspace, sources, idmap)
        old = _stages.pop(key, None)
        if old is not None and old.users == 0:
            old.close()
        _stages[key] = stage
        idle = [k for k, s in _stages.items() if s.users == 0 and k != key]
        for k in idle[: max(0, len(_stages) - _KEEP)]:
            _stages.pop(k).close()
        stage.users += 1
        return stage


def release(stage: Stage) -> None:
    """The caller's process has started: it holds its own copies of the descriptors."""
    with _lock:
        stage.users -= 1
        if stage.users == 0 and all(s is not stage for s in _stages.values()):
            stage.close()


def discard(workspace: str) -> None:
    """Forget the stages of `workspace` (a throwaway one): closed now, or by `release` when the last user is done."""
    with _lock:
        for key in [k for k in _stages if k[0] == workspace]:
            stage = _stages.pop(key)
            if stage.users == 0:
                stage.close()


def _make(workspace: str, sources: tuple[str, ...], idmap: bool) -> Stage:
    inode = _inode(workspace)
    config = json.dumps({"workspace": workspace, "sources": list(sources), "stage": STAGE_DIR, "host_id": HOST_ID, "idmap": idmap})
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
        return Stage(mount_fd, userns_fd, inode)
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
    if step.startswith("an idmapped mount"):
        return (
            f"run_python runs code as an unprivileged user (uid {HOST_ID}) when the engine runs as root, and needs an "
            f"idmapped mount of the workspace for that user to write in it; the kernel refused one for {workspace!r} "
            f"({error}): put the workspace on a file system that supports idmapped mounts (ext4, xfs, btrfs; tmpfs on "
            "Linux 6.3+), or run the engine as a non-root user"
        )
    return f"run_python could not set up its sandbox's namespaces as root ({step}: {error})"
