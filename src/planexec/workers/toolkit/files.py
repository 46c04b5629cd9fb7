"""Workspace file tools for role workers: `file_tools` and the records they return.

Owns `read_file`, `list_files`, `search_files` and `write_file`, each bound to
one workspace directory. Every path is relative to the workspace. Binary
files are reported, not dumped; long output is cut with a note that says how
to get the rest. Imports `planexec.workers.tools`, `planexec.errors`, the
stdlib and pydantic only.

How a path is opened (one design, everywhere): a tool path never reaches the
kernel whole. It is split into names (``.`` dropped, ``..`` folded away and
refused as ``outside_workspace`` once it would climb above the root;
absolute paths, NUL bytes and over-long names refused), and each name is
opened relative to the file descriptor of the directory before it, starting
from the workspace root: directories with ``O_DIRECTORY | O_NOFOLLOW``, the
last name with ``O_NOFOLLOW | O_NONBLOCK``. So a symlink at any position is
refused (rule ``symlink``), even one that points inside, and swapping a
directory for a symlink mid-call cannot redirect an open anchored on the fd of
a directory already opened. After the open the tools use only the fd
(``fstat``, ``pread``, ``read``, ``scandir(fd)``, ``stat(name, dir_fd=...)``),
never the path again. Files to read, search or write must be regular files
(a FIFO, socket or device is refused as ``not_regular_file``, and opening one
with ``O_NONBLOCK`` never waits) with a single link (``hard_link``: another
name of the same file may lie outside the workspace, and nothing tells
where). Writes make missing directories with ``mkdir(name, dir_fd=...)`` and
create the file with ``O_CREAT | O_EXCL | O_NOFOLLOW`` in its parent's fd; an
existing file (with `overwrite`) is opened without ``O_CREAT`` and truncated
only after the opened fd passes the same checks.

``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` would give the same
guarantee in one system call, but only on Linux 5.6+, through ctypes and a
per-architecture syscall number, and some seccomp profiles refuse it; keeping
a second code path as safe as the first is worse than the cost of the walk
(about 5 µs a call for three names) and it cannot say which name is the
symlink. Like openat2 without ``RESOLVE_NO_XDEV``, the walk crosses mount
points inside the workspace. The root path itself is trusted (resolved once).

Reads are bounded in size (`max_read_bytes`, `max_read_lines`,
`max_search_file_bytes`) and in time: `max_read_seconds` of wall time per
call, checked between reads of at most 64 KiB and between directory entries.
A single read the kernel never returns from cannot be interrupted; the
engine's step timeout abandons that thread.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import io
import mimetypes
import os
import re
import stat
import time
from collections.abc import Generator, Iterator
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from planexec.errors import Problem, ToolError
from planexec.workers.tools import Tool

__all__ = ["FileEntry", "FileListing", "FileText", "FileWritten", "SearchMatch", "SearchResults", "file_tools"]

_SNIFF = 8192  # bytes looked at to tell binary from text, as grep and git do: a NUL means binary
_MAX_LINE_CHARS = 400  # a search match shows at most this much of its line
_NAME_MAX, _PATH_MAX = 255, 4096  # bytes in one name and in a whole path, as Linux allows
_MAX_DEPTH = 64  # directories a recursive walk descends at most (each level holds an fd)
_CHUNK = 65536  # bytes per read(2); the deadline is checked between reads
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device"}


class FileText(BaseModel):
    """A slice of a text file, or a note that the file is binary."""

    path: str
    size: int
    binary: bool
    text: str
    start_line: int
    end_line: int
    next_start_line: int | None
    truncated: bool
    note: str


class FileEntry(BaseModel):
    """One directory entry; `size` is in bytes and only set for files."""

    path: str
    kind: Literal["file", "dir", "symlink", "other"]
    size: int | None


class FileListing(BaseModel):
    """The entries under a directory that match a pattern."""

    path: str
    entries: list[FileEntry]
    truncated: bool
    note: str


class SearchMatch(BaseModel):
    """One matching line: its file, 1-based line number and text."""

    path: str
    line: int
    text: str


class SearchResults(BaseModel):
    """Matching lines, in file order, and what was searched or skipped."""

    matches: list[SearchMatch]
    files_searched: int
    files_skipped: int
    truncated: bool
    note: str


class FileWritten(BaseModel):
    """What `write_file` did."""

    path: str
    bytes_written: int
    created: bool


class _Slow(Exception):
    """A read ran past its deadline."""


class _FdReader(io.RawIOBase):
    """Reads an open fd (never closing it) and fails with `_Slow` once `deadline` has passed."""

    def __init__(self, fd: int, deadline: float) -> None:
        super().__init__()
        self.fd, self.deadline = fd, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if time.monotonic() > self.deadline:
            raise _Slow
        data = os.read(self.fd, min(len(buffer), _CHUNK))
        buffer[: len(data)] = data
        return len(data)


def _text(fd: int, deadline: float) -> io.TextIOWrapper:
    """The fd's content as UTF-8 text (bad bytes replaced), read under `deadline`."""
    return io.TextIOWrapper(io.BufferedReader(_FdReader(fd, deadline), _CHUNK), encoding="utf-8", errors="replace")


def _is_binary(fd: int) -> bool:
    return b"\0" in os.pread(fd, _SNIFF, 0)


def _skip_line(f: io.TextIOWrapper) -> bool:
    """Read past the rest of one line without holding it whole; False at end of file."""
    while chunk := f.readline(65536):
        if chunk.endswith("\n"):
            return True
    return False


def _quote(text: str) -> str:
    """`text` as a repr for a message, cut when long so that a 2,000-character name is not dumped whole."""
    return repr(text) if len(text) <= 120 else f"{text[:80]!r}... ({len(text)} characters)"


class _Workspace:
    """Opens tool paths beneath one root directory through directory fds, and refuses the rest."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(f"workspace {str(self.root)!r} is not a directory")

    def refuse(self, tool: str, message: str, rule: str, field: str = "path") -> ToolError:
        problem = Problem(rule, message, field=f"parameters.{field}")
        return ToolError(f"{tool}: {message}", tool=tool, problems=[problem])

    def names(self, tool: str, path: str, field: str = "path") -> tuple[str, ...]:
        """`path` as names beneath the root, ``..`` folded away; refused if absolute, escaping or malformed."""
        where, root = _quote(path), str(self.root)
        if "\0" in path:
            raise self.refuse(tool, f"{where} contains a NUL byte", "bad_path", field)
        if path.startswith("/"):
            raise self.refuse(tool, f"{where} is absolute; give a path relative to the workspace {root!r}", "absolute_path", field)
        names: list[str] = []
        for name in path.split("/"):
            if name == ".." and not names:
                raise self.refuse(tool, f"{where} resolves outside the workspace {root!r}; access is refused", "outside_workspace", field)
            if name == "..":
                names.pop()
            elif name not in ("", "."):
                names.append(name)
        try:
            too_long = len(os.fsencode(path)) > _PATH_MAX or any(len(os.fsencode(name)) > _NAME_MAX for name in names)
        except UnicodeEncodeError:
            raise self.refuse(tool, f"{where} is not a valid file name", "bad_path", field) from None
        if too_long:
            message = f"{where} is too long: a name may have at most {_NAME_MAX} bytes and a path {_PATH_MAX}"
            raise self.refuse(tool, message, "name_too_long", field)
        return tuple(names)

    def open_dir(self, tool: str, path: str, names: tuple[str, ...], *, create: bool = False) -> int:
        """An fd of the directory `names`, each name opened in the one before it without following a link.

        With `create`, missing directories are made on the way.
        """
        try:
            fd = os.open(self.root, _DIR)
        except OSError as exc:
            raise self.refuse(tool, f"cannot open the workspace {str(self.root)!r}: {exc.strerror}", "os_error") from None
        try:
            for depth, name in enumerate(names, 1):
                try:
                    child = _child_dir(fd, name, create)
                except OSError as exc:
                    raise self.failure(tool, path, names[:depth], fd, exc) from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open(self, tool: str, path: str, names: tuple[str, ...]) -> tuple[int, os.stat_result]:
        """An fd open for reading on `names` (the root when empty) and its fstat, which is what counts."""
        if not names:
            fd = self.open_dir(tool, path, names)
            return fd, os.fstat(fd)
        parent = self.open_dir(tool, path, names[:-1])
        try:
            mode = os.stat(names[-1], dir_fd=parent, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                raise OSError(errno.ELOOP, "a symlink")
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):  # not even opened: a device may act on open
                raise self.not_regular(tool, path, mode)
            fd = os.open(names[-1], _READ, dir_fd=parent)
        except OSError as exc:
            raise self.failure(tool, path, names, parent, exc) from None
        finally:
            os.close(parent)
        return fd, os.fstat(fd)

    def check_file(self, tool: str, path: str, st: os.stat_result) -> None:
        """Refuse anything but a regular file with one link."""
        if not stat.S_ISREG(st.st_mode):
            raise self.not_regular(tool, path, st.st_mode)
        if st.st_nlink > 1:
            message = (
                f"{_quote(path)} has {st.st_nlink} hard links; another name of the same file may lie outside "
                "the workspace and there is no telling where, so file tools refuse it"
            )
            raise self.refuse(tool, message, "hard_link")

    def not_regular(self, tool: str, path: str, mode: int) -> ToolError:
        kind = "directory" if stat.S_ISDIR(mode) else _KINDS.get(stat.S_IFMT(mode), "special file")
        message = f"{_quote(path)} is a {kind}, not a regular file; file tools read and write regular files only"
        return self.refuse(tool, message, "not_regular_file")

    def failure(self, tool: str, path: str, names: tuple[str, ...], parent: int, exc: OSError) -> ToolError:
        """The refusal for an open of `names[-1]` in `parent` that failed with `exc`, naming the path and the rule."""
        where = _quote(path) if "/".join(names) == "/".join(self.names(tool, path)) else f"{_quote('/'.join(names))} in {_quote(path)}"
        mode = 0
        with contextlib.suppress(OSError):
            mode = os.stat(names[-1], dir_fd=parent, follow_symlinks=False).st_mode
        if exc.errno == errno.ELOOP or stat.S_ISLNK(mode):  # ELOOP under O_NOFOLLOW: it was a symlink when opened
            message = f"{where} is a symlink; file tools follow no symlink, so none can lead out of the workspace {str(self.root)!r}"
            return self.refuse(tool, message, "symlink")
        if exc.errno == errno.ENOTDIR:  # a directory now, but not at the open: it was being swapped
            message = f"{where} is not a directory" if not stat.S_ISDIR(mode) else f"{where} changed while it was opened; try again"
            return self.refuse(tool, message, "not_a_directory" if not stat.S_ISDIR(mode) else "path_changed")
        if exc.errno == errno.ENOENT:
            return self.refuse(tool, f"no such file or directory: {where} in the workspace", "not_found")
        if exc.errno in (errno.EACCES, errno.EPERM):
            return self.refuse(tool, f"{where}: permission denied", "permission_denied")
        return self.refuse(tool, f"cannot open {where}: {exc.strerror or exc}", "os_error")

    def write(self, tool: str, path: str, names: tuple[str, ...], data: bytes, overwrite: bool) -> bool:
        """Write `data` to `names` (parents made as needed); True if the file was created."""
        parent = self.open_dir(tool, path, names[:-1], create=True)
        try:
            fd, created = self._open_for_write(tool, path, names, parent, overwrite)
        finally:
            os.close(parent)
        try:
            self.check_file(tool, path, os.fstat(fd))  # what was opened, whatever the name points to by now
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            raise self.refuse(tool, f"cannot write {_quote(path)}: {exc.strerror or exc}", "os_error") from None
        finally:
            os.close(fd)
        return created

    def _open_for_write(self, tool: str, path: str, names: tuple[str, ...], parent: int, overwrite: bool) -> tuple[int, bool]:
        """A new file created with ``O_EXCL`` (True), or the existing one if `overwrite` allows (False)."""
        try:
            with contextlib.suppress(FileExistsError):
                return os.open(names[-1], _WRITE | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=parent), True
            st = os.stat(names[-1], dir_fd=parent, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise OSError(errno.ELOOP, "a symlink")
            if stat.S_ISDIR(st.st_mode):
                raise self.refuse(tool, f"{_quote(path)} is a directory", "is_directory")
            if not overwrite:
                raise self.refuse(tool, f"{_quote(path)} exists; pass overwrite=true to replace it", "exists")
            self.check_file(tool, path, st)  # before the open: a device is not even opened
            return os.open(names[-1], _WRITE, dir_fd=parent), False
        except OSError as exc:
            raise self.failure(tool, path, names, parent, exc) from None

    def check_pattern(self, tool: str, pattern: str, field: str, *, recursive: bool = False) -> tuple[str, ...]:
        """The pattern's names, under ``**`` if `recursive`, runs of ``**`` folded; refused if empty, absolute or with ``..``."""
        parts = PurePosixPath(pattern).parts
        if not parts:
            raise self.refuse(tool, "the pattern is empty; '*' matches every name", "bad_pattern", field)
        if pattern.startswith("/") or ".." in parts:
            raise self.refuse(tool, f"pattern {_quote(pattern)} may not be absolute or contain '..'", "bad_pattern", field)
        parts = ("**", *parts) if recursive else parts
        return tuple(p for i, p in enumerate(parts) if not (p == "**" and i and parts[i - 1] == "**"))


def _child_dir(parent: int, name: str, create: bool) -> int:
    try:
        return os.open(name, _DIR, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, dir_fd=parent)
    return os.open(name, _DIR, dir_fd=parent)


def _walk(dir_fd: int, prefix: tuple[str, ...], depth: int) -> Generator[tuple[int, tuple[str, ...], os.stat_result], None, None]:
    """(parent fd, names, lstat) of what lies beneath `dir_fd`, `depth` levels down, depth first in sorted order.

    Symlinks are reported, never entered; a directory swapped for a symlink
    between the listing and the open is skipped (the open refuses it).
    """
    with os.scandir(dir_fd) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:  # gone since the listing
            continue
        yield dir_fd, (*prefix, name), st
        if depth > 1 and stat.S_ISDIR(st.st_mode):
            try:
                child = os.open(name, _DIR, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from _walk(child, (*prefix, name), depth - 1)
            finally:
                os.close(child)


def _glob(pattern: tuple[str, ...], names: tuple[str, ...]) -> bool:
    """Whether `names` match the pattern's names one by one, ``**`` standing for any number of them."""
    if not pattern:
        return not names
    if pattern[0] == "**":
        return _glob(pattern[1:], names) or (bool(names) and _glob(pattern, names[1:]))
    return bool(names) and fnmatch.fnmatchcase(names[0], pattern[0]) and _glob(pattern[1:], names[1:])


def _read_lines(f: io.TextIOWrapper, start_line: int, max_lines: int, budget: int) -> tuple[list[str], int | None, bool]:
    """Lines from `start_line` within `max_lines` and `budget` bytes: (lines, next start line or None, line cut)."""
    for _ in range(start_line - 1):
        if not _skip_line(f):
            return [], None, False
    lines: list[str] = []
    used = 0
    while len(lines) < max_lines:
        line = f.readline(budget - used + 1)  # one character past the budget shows that it would overflow
        if not line:
            return lines, None, False
        size = len(line.encode())
        if used + size > budget:
            if lines:  # this line is the next call's first
                return lines, start_line + len(lines), False
            # one line longer than the whole budget: show its start, skip the rest
            lines.append(line.encode()[:budget].decode(errors="ignore") + "\n")
            if not line.endswith("\n"):
                _skip_line(f)
            return lines, start_line + 1 if f.read(1) else None, True
        lines.append(line)
        used += size
    return lines, start_line + len(lines) if f.read(1) else None, False


def file_tools(
    workspace: str | Path,
    *,
    max_read_bytes: int = 100_000,
    max_read_lines: int = 2_000,
    max_entries: int = 1_000,
    max_search_file_bytes: int = 5_000_000,
    max_write_bytes: int = 5_000_000,
    max_read_seconds: float = 5.0,
) -> list[Tool]:
    """The tools `read_file`, `list_files`, `search_files` and `write_file`, bound to `workspace`.

    `max_read_bytes` and `max_read_lines` bound one `read_file` answer,
    `max_entries` a listing, `max_search_file_bytes` the size of a file
    `search_files` will scan, `max_write_bytes` what `write_file` accepts,
    `max_read_seconds` the wall time of one read, listing or search.
    `write_file` is declared ``requires_approval=True`` with `path`
    sensitive; the others are read-only and idempotent, and their output is
    untrusted (a file's text, or its name, may carry instructions).
    """
    ws = _Workspace(workspace)

    def read_file(
        path: str,
        start_line: Annotated[int, Field(ge=1)] = 1,
        max_lines: Annotated[int | None, Field(ge=1)] = None,
    ) -> FileText:
        """Read a text file in the workspace, from `start_line` (1-based) for up to `max_lines` lines.

        Long files are cut; the answer then says `next_start_line` to continue
        from. Binary files are reported by size and type, not shown.
        """
        names = ws.names("read_file", path)
        fd, st = ws.open("read_file", path, names)
        try:
            if stat.S_ISDIR(st.st_mode):
                raise ws.refuse("read_file", f"{_quote(path)} is a directory; use list_files to see what it holds", "is_directory")
            ws.check_file("read_file", path, st)
            shown, size, limit = "/".join(names), st.st_size, min(max_lines or max_read_lines, max_read_lines)
            if _is_binary(fd):
                note = f"binary file ({size} bytes, {mimetypes.guess_type(names[-1])[0] or 'unknown type'}); its content is not shown"
                return FileText(
                    path=shown,
                    size=size,
                    binary=True,
                    text="",
                    start_line=start_line,
                    end_line=start_line - 1,
                    next_start_line=None,
                    truncated=False,
                    note=note,
                )
            lines, next_line, cut = _read_lines(_text(fd, time.monotonic() + max_read_seconds), start_line, limit, max_read_bytes)
        except _Slow:
            raise ws.refuse("read_file", f"reading {_quote(path)} took over {max_read_seconds:g}s; gave up", "read_timeout") from None
        except OSError as exc:
            raise ws.refuse("read_file", f"cannot read {_quote(path)}: {exc.strerror or exc}", "os_error") from None
        finally:
            os.close(fd)
        end_line = start_line + len(lines) - 1
        notes = []
        if not lines and start_line > 1:
            notes.append(f"the file has fewer than {start_line} lines")
        if cut:
            notes.append(f"line {start_line} is longer than {max_read_bytes} bytes; only its start is shown")
        if next_line is not None:
            notes.append(
                f"truncated: showing lines {start_line}-{end_line} (at most {limit} lines and {max_read_bytes} bytes "
                f"per read); call read_file with start_line={next_line} for more"
            )
        return FileText(
            path=shown,
            size=size,
            binary=False,
            text="".join(lines),
            start_line=start_line,
            end_line=end_line,
            next_start_line=next_line,
            truncated=cut or next_line is not None,
            note="; ".join(notes),
        )

    def list_files(path: str = ".", pattern: str = "*", recursive: bool = False) -> FileListing:
        """List the files and directories in a workspace directory whose names match a glob `pattern`.

        With `recursive`, subdirectories are searched too. Paths in the answer
        are relative to the workspace.
        """
        names = ws.names("list_files", path)
        fd, st = ws.open("list_files", path, names)
        entries: list[FileEntry] = []
        note = ""
        try:
            if not stat.S_ISDIR(st.st_mode):
                raise ws.refuse("list_files", f"{_quote(path)} is not a directory", "not_a_directory")
            parts = ws.check_pattern("list_files", pattern, "pattern", recursive=recursive)
            deadline = time.monotonic() + max_read_seconds
            with contextlib.closing(_walk(fd, names, _MAX_DEPTH if "**" in parts else len(parts))) as found:
                for _, rel, entry in found:
                    if time.monotonic() > deadline:
                        note = f"stopped after {max_read_seconds:g}s; narrow the pattern or the path"
                        break
                    if not _glob(parts, rel[len(names) :]):
                        continue
                    if len(entries) == max_entries:
                        note = f"truncated at {max_entries} entries; narrow the pattern or the path"
                        break
                    mode = entry.st_mode
                    kind = "symlink" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"
                    entries.append(FileEntry(path="/".join(rel), kind=kind, size=entry.st_size if kind == "file" else None))
        finally:
            os.close(fd)
        return FileListing(path="/".join(names) or ".", entries=entries, truncated=bool(note), note=note)

    def search_files(
        query: str,
        path: str = ".",
        glob: str = "*",
        regex: bool = False,
        ignore_case: bool = False,
        max_results: Annotated[int, Field(ge=1, le=1000)] = 100,
    ) -> SearchResults:
        """Find lines containing `query` in the text files under a workspace path.

        `query` is plain text unless `regex` is true (Python `re` syntax).
        `glob` limits the files searched by name (for example ``*.py``).
        Each match gives the file, the 1-based line number and the line.
        """
        try:
            pattern = re.compile(query if regex else re.escape(query), re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise ws.refuse("search_files", f"invalid regular expression {query!r}: {exc}", "bad_regex", "query") from None
        parts = ws.check_pattern("search_files", glob, "glob", recursive=True)
        names = ws.names("search_files", path)
        base, st = ws.open("search_files", path, names)
        try:
            if not stat.S_ISDIR(st.st_mode):
                ws.check_file("search_files", path, st)
            deadline = time.monotonic() + max_read_seconds
            with contextlib.closing(_files(base, st, names, parts, glob, deadline)) as files:
                return _search(files, pattern, max_results, max_search_file_bytes, deadline, max_read_seconds)
        finally:
            os.close(base)

    def write_file(path: str, content: str, overwrite: bool = False) -> FileWritten:
        """Write UTF-8 text to a file in the workspace, creating parent directories.

        An existing file is replaced only when `overwrite` is true.
        """
        data = content.encode()
        if len(data) > max_write_bytes:
            raise ws.refuse("write_file", f"content is {len(data)} bytes; the limit is {max_write_bytes}", "too_large", "content")
        names = ws.names("write_file", path)
        if not names:
            raise ws.refuse("write_file", f"{_quote(path)} is a directory", "is_directory")
        created = ws.write("write_file", path, names, data, overwrite)
        return FileWritten(path="/".join(names), bytes_written=len(data), created=created)

    return [
        Tool(read_file, idempotent=True, read_only=True, sensitive=("path",), untrusted_output=True),
        Tool(list_files, idempotent=True, read_only=True, sensitive=("path",), untrusted_output=True),
        Tool(search_files, idempotent=True, read_only=True, sensitive=("path",), untrusted_output=True),
        Tool(write_file, requires_approval=True, sensitive=("path",)),
    ]


def _files(
    base: int, st: os.stat_result, names: tuple[str, ...], parts: tuple[str, ...], glob: str, deadline: float
) -> Generator[tuple[int | None, str], None, None]:
    """The files to search, opened for reading (None when one cannot be), with their paths; `base` is a file or a directory."""
    if not stat.S_ISDIR(st.st_mode):
        if fnmatch.fnmatch(names[-1], glob):
            yield os.dup(base), "/".join(names)
        return
    with contextlib.closing(_walk(base, names, _MAX_DEPTH)) as found:
        for parent, rel, entry in found:
            if time.monotonic() > deadline:
                raise _Slow
            if stat.S_ISDIR(entry.st_mode) or not _glob(parts, rel[len(names) :]):
                continue
            try:
                fd = os.open(rel[-1], _READ, dir_fd=parent) if stat.S_ISREG(entry.st_mode) else None
            except OSError:  # gone, or swapped for a symlink since the listing
                fd = None
            yield fd, "/".join(rel)


def _searchable(fd: int, max_bytes: int) -> bool:
    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size <= max_bytes and not _is_binary(fd)


def _search(
    files: Iterator[tuple[int | None, str]], pattern: re.Pattern[str], max_results: int, max_bytes: int, deadline: float, seconds: float
) -> SearchResults:
    """Matching lines of `files` (each fd closed here), in order, until `max_results` or the deadline."""
    matches: list[SearchMatch] = []
    searched = skipped = 0
    stop = ""
    try:
        for fd, shown in files:
            if fd is None:
                skipped += 1
                continue
            try:
                if not _searchable(fd, max_bytes):
                    skipped += 1
                    continue
                searched += 1
                for number, line in enumerate(_text(fd, deadline), 1):
                    if not pattern.search(line):
                        continue
                    if len(matches) == max_results:
                        stop = f"stopped at {max_results} matches; narrow the query, path or glob"
                        break
                    matches.append(SearchMatch(path=shown, line=number, text=line.rstrip("\r\n")[:_MAX_LINE_CHARS]))
            except OSError:  # an I/O error on this file: counted, the search goes on
                skipped += 1
            finally:
                os.close(fd)
            if stop:
                break
    except _Slow:
        stop = f"stopped after {seconds:g}s; narrow the path or glob"
    note = stop or (f"skipped {skipped} binary, oversized, linked or special files" if skipped else "")
    return SearchResults(matches=matches, files_searched=searched, files_skipped=skipped, truncated=bool(stop), note=note)
