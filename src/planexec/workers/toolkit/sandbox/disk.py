"""The sandbox's disk: how much a workspace takes, the quota across one run's calls, and set-id bits swept away.

Owns `disk_used` (the blocks of everything under the workspace, each inode
once, plus deleted files the call's processes still hold), `descendants`,
`Ledger` (the workspace's size at the first call of each run, which every
later call of that run is measured against) and `strip_setid`. Imports the
stdlib only.

Why a ledger: a quota measured from the start of each call let every call
add its quota again (measured on 2a5d34d: four calls left 960 MB under a
256 MB quota). The workspace's growth is now counted from the first call
of the run (`ToolContext.run_id`; calls outside a run share one count per
tool), so a run's calls together stay within `max_disk_mb`, and a call that
starts over it runs nothing. Files the code deletes give their room back.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections import OrderedDict
from pathlib import Path

__all__ = ["MAX_DEPTH", "MIN_INODE", "DiskUnmeasuredError", "Ledger", "descendants", "disk_used", "strip_setid"]

MIN_INODE = 4096  # bytes an inode counts for at least: a block, so a million empty files are not free
MAX_DEPTH = 256  # folders deep; a deeper workspace cannot be measured, so counts as over quota
_SETID = stat.S_ISUID | stat.S_ISGID


def descendants(root: int) -> list[int]:
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
                total += max(st.st_blocks * 512, MIN_INODE)
    return total


class DiskUnmeasuredError(OSError):
    """The workspace's size could not be measured (a folder unreadable, nested too deep): counted as over quota."""


def _subdir(parent: int, name: str) -> int | None:
    """A descriptor of directory `name` in `parent` (a link is not followed), or None when it is gone."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DiskUnmeasuredError(exc.errno, f"cannot open a folder of the workspace ({exc.strerror})") from None


def _scan(fd: int, seen: set[tuple[int, int]], setid_since: int | None) -> tuple[list[str], int, bool]:
    """One folder: its subfolders' names, the bytes of its entries not seen before, whether a fresh set-id file is there."""
    try:
        with os.scandir(fd) as scan:
            entries = list(scan)
    except OSError as exc:
        raise DiskUnmeasuredError(exc.errno, f"cannot read a folder of the workspace ({exc.strerror})") from None
    folders, total, setid = [], 0, False
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            folders.append(entry.name)
        elif setid_since is not None and st.st_mode & _SETID and st.st_ctime_ns >= setid_since:
            setid = True
        key = (st.st_dev, st.st_ino)
        if key not in seen:
            seen.add(key)
            total += max(st.st_blocks * 512, MIN_INODE)
    return folders, total, setid


def disk_used(root: Path, pids: list[int], setid_since: int | None = None) -> tuple[int, bool]:
    """Bytes the workspace's files take (each inode once, at least a block) plus deleted files the processes hold.

    The second value says whether a regular file with a set-id bit changed
    at or after `setid_since` (ns) was seen: then `strip_setid` is worth its
    walk. Folders are walked by descriptor, so no path is too long to
    measure (a tree deeper than PATH_MAX was once counted as empty); a
    folder that cannot be read, or nesting deeper than `MAX_DEPTH`, raises
    `DiskUnmeasuredError`, which the caller counts as over quota.
    """
    seen: set[tuple[int, int]] = set()
    total = 0
    setid = False
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    opened = {top: 0}  # each open folder fd -> how many of its subfolders are still to be opened (then it is closed)
    pending: list[tuple[int | None, str, int]] = [(None, "", 0)]  # (parent fd, name, depth), depth-first from the root
    try:
        while pending:
            parent, name, depth = pending.pop()
            if parent is None:
                fd: int | None = top
            else:
                fd = _subdir(parent, name)
                opened[parent] -= 1
                if opened[parent] == 0:
                    del opened[parent]
                    os.close(parent)
                if fd is None:
                    continue
                opened[fd] = 0
            assert fd is not None
            if depth > MAX_DEPTH:
                raise DiskUnmeasuredError(0, f"the workspace is nested deeper than {MAX_DEPTH} folders")
            folders, size, found = _scan(fd, seen, setid_since)
            total += size
            setid = setid or found
            if folders:
                opened[fd] = len(folders)
                pending.extend((fd, folder, depth + 1) for folder in folders)
            else:
                del opened[fd]
                os.close(fd)
    finally:
        for fd in opened:
            os.close(fd)
    return total + _held_deleted(pids, seen), setid


def strip_setid(root: Path, since: int) -> list[str]:
    """Clear the setuid and setgid bits of regular files under `root` changed at or after `since` (ns); their paths.

    Symlink-safe: directories are walked by descriptor (`os.fwalk`) and a
    file is opened without following a link, checked to be the file that
    was listed, and changed through its descriptor, so a name swapped for a
    link to a host file changes nothing outside.
    """
    stripped = []
    for folder, _, files, dir_fd in os.fwalk(root):
        for name in files:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_mode & _SETID and st.st_ctime_ns >= since:
                    os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~_SETID)
                    stripped.append(os.path.relpath(os.path.join(folder, name), root))
            except OSError:
                continue
            finally:
                os.close(fd)
    return sorted(stripped)


class Ledger:
    """The workspace's size when each run's first call started (kept for the last `keep` runs)."""

    def __init__(self, keep: int = 256) -> None:
        self._start: OrderedDict[str | None, int] = OrderedDict()
        self._keep = keep

    def baseline(self, run_id: str | None, now: int) -> int:
        """The size this run's growth is counted from (`now`, at its first call)."""
        if run_id in self._start:
            self._start.move_to_end(run_id)
            return self._start[run_id]
        self._start[run_id] = now
        while len(self._start) > self._keep:
            self._start.popitem(last=False)
        return now
