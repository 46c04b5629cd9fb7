"""Run as root, once a workspace: build the mount namespace a root engine's sandbox starts in, and its user namespace.

Started by `planexec.workers.toolkit.sandbox.stage` as ``python -I -S
stage_helper.py CONFIG`` (the standard library only: no site, no planexec),
it never runs model code. CONFIG is JSON: ``workspace`` and its ``inode`` (device, inode), ``sources`` (the
host paths the sandbox binds read-only), ``stage`` (an empty root-owned
directory to build in), ``host_id`` (the unprivileged host uid and gid) and
``idmap`` (false only for the probe's throwaway workspace).

What it makes, then hands over by staying alive until its stdin closes
(the engine opens ``/proc/PID/ns/mnt`` and ``/proc/PID/fd/N`` meanwhile):

- A user namespace owned by ``host_id``, mapping the sandbox's uid and gid
  1000 to ``host_id`` and nothing else, in which no further user namespace
  may be created (``user.max_user_namespaces`` 0). bwrap, started as
  ``host_id``, joins it (``--userns``) instead of making its own, which as
  root would map the sandbox user to host root. (bwrap runs as ``host_id``,
  not as root, so that its monitor may signal the sandbox's init: the
  kernel checks a parent-death signal's permission like a ``kill``, and a
  root monitor without capabilities could not, which left the sandbox's
  processes running after the call.)
- A private mount namespace with a tmpfs at ``stage`` holding, at their own
  paths under it, read-only clones of each source and an idmapped clone of
  the workspace (``nosuid``, ``nodev``): files owned by root on disk appear
  owned by ``host_id``, so the sandbox's user may write them, and what it
  creates is owned by root on disk. bwrap binds from the stage, which
  ``host_id`` can reach even when a source lies under a directory it could
  not enter (a Python under ``/root``, a workspace under a 0700 directory).

Errors are printed as ``{"error": ..., "step": ...}`` and exit 1.
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_NOSUID = 2
MS_NODEV = 4
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
AT_EMPTY_PATH = 0x1000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x100000
# the new mount API's numbers are the same on every architecture but alpha
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
SANDBOX_ID = 1000

libc = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class StepError(Exception):
    """A step of the set-up failed; `step` says which."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


def check(result: int, step: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise StepError(step, f"{os.strerror(code)} (errno {code})")
    return result


def user_namespace(uid_map: str, gid_map: str, *, nesting: bool, owner: int = 0) -> int:
    """A descriptor of a new user namespace with these maps, owned by host uid `owner`.

    With `nesting` False no user namespace may be made inside it.
    """
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child makes the namespace and waits until its maps are written and it is opened
        os.close(ready_r)
        os.close(done_w)
        message = b"ok"
        try:
            if owner:
                os.setgroups([])
                os.setresgid(owner, owner, owner)
                os.setresuid(owner, owner, owner)
            check(libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
            if not nesting:  # bytes and os calls only: as `owner` the child may not read the stdlib under /root
                fd = os.open("/proc/sys/user/max_user_namespaces", os.O_WRONLY)
                os.write(fd, b"0")
                os.close(fd)
        except BaseException as exc:  # anything: the child must reach os._exit
            message = repr(exc).encode()
        os.write(ready_w, message)
        os.read(done_r, 1)
        os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        message = os.read(ready_r, 4096)
        if message != b"ok":
            raise StepError("user namespace", message.decode(errors="replace"))
        for name, text in (("uid_map", uid_map), ("gid_map", gid_map)):
            with open(f"/proc/{pid}/{name}", "w", encoding="ascii") as f:
                f.write(text)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    finally:
        os.close(done_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


def clone_tree(path: str, attrs: int, *, recursive: bool, userns: int | None = None, at: int = AT_FDCWD) -> int:
    """A detached copy of the mount at `path` (or of directory fd `at`, `path` empty) with `attrs` (an idmap through `userns`)."""
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (AT_RECURSIVE if recursive else 0) | (AT_EMPTY_PATH if at != AT_FDCWD else 0)
    tree = check(libc.syscall(SYS_OPEN_TREE, at, path.encode(), flags), f"open_tree({path})")
    attr = MountAttr(attrs, 0, 0, userns if userns is not None else 0)
    where = AT_EMPTY_PATH | (AT_RECURSIVE if recursive else 0)
    what = "an idmapped mount" if userns is not None else "a read-only mount"
    check(libc.syscall(SYS_MOUNT_SETATTR, tree, b"", where, ctypes.byref(attr), ctypes.sizeof(attr)), f"{what} of {path}")
    return tree


def anchored(path: str, inode: list[int]) -> int:
    """An O_PATH descriptor of directory `path`, checked to be the directory (device, inode) the tool was made for.

    The workspace is mounted from this descriptor, not from its path again:
    a folder swapped in at the path (a link, another directory) in between
    is refused rather than mounted writable for the sandbox.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:  # gone, or a link now
        raise StepError("workspace", f"{path} is no longer the directory run_python was made for ({exc.strerror})") from None
    st = os.fstat(fd)
    if [st.st_dev, st.st_ino] != inode:
        raise StepError("workspace", f"{path} is no longer the directory run_python was made for (it was replaced)")
    return fd


def place(tree: int, source: str, stage: str) -> None:
    """Attach `tree` at `source`'s path under `stage` (a directory or an empty file, as `source` is)."""
    target = stage + source
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH), f"move_mount({target})")


def stage_dir(path: str) -> None:
    """Make `path` (root's, 0755) unless it is there; refuse one that is a link or another user's."""
    os.makedirs(path, mode=0o755, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise StepError("stage", f"{path} must be a directory owned by root and writable by root only")


def build(config: dict[str, object]) -> int:
    """Make both namespaces; return the descriptor of the user namespace bwrap joins."""
    workspace, stage, host_id = str(config["workspace"]), str(config["stage"]), int(str(config["host_id"]))
    sources = [str(source) for source in config["sources"]]  # type: ignore[attr-defined]  # a list, by construction
    sandbox = user_namespace(f"{SANDBOX_ID} {host_id} 1\n", f"{SANDBOX_ID} {host_id} 1\n", nesting=False, owner=host_id)
    idmap = user_namespace(f"0 {host_id} 1\n", f"0 {host_id} 1\n", nesting=True)
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    locked = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
    trees = [(source, clone_tree(source, MOUNT_ATTR_RDONLY | locked, recursive=True)) for source in sources]
    folder = anchored(workspace, [int(n) for n in config["inode"]])  # type: ignore[attr-defined]  # a list, by construction
    if config.get("idmap", True):
        trees.append((workspace, clone_tree("", MOUNT_ATTR_IDMAP | locked, recursive=False, userns=idmap, at=folder)))
    else:  # the probe's throwaway workspace: what is probed is bwrap in these namespaces, not the file system
        trees.append((workspace, clone_tree("", locked, recursive=False, at=folder)))
    stage_dir(stage)
    check(libc.mount(b"planexec", stage.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m"), f"a tmpfs at {stage}")
    for source, tree in sorted(trees, key=lambda item: item[0].count("/")):
        place(tree, source, stage)
    return sandbox


def main() -> None:
    try:
        userns = build(json.loads(sys.argv[1]))
    except StepError as exc:
        print(json.dumps({"error": str(exc), "step": exc.step}), flush=True)
        sys.exit(1)
    except (OSError, ValueError, KeyError, IndexError) as exc:
        print(json.dumps({"error": str(exc), "step": "set-up"}), flush=True)
        sys.exit(1)
    print(json.dumps({"pid": os.getpid(), "userns": userns}), flush=True)
    sys.stdin.read()  # until the engine has opened what it needs and closes our stdin


if __name__ == "__main__":
    main()
