"""Workspace file tools for role workers: `file_tools` and the records they return.

Owns `read_file`, `list_files`, `search_files` and `write_file`, each bound to
one workspace directory. Every path is relative to the workspace; a path that
is absolute or resolves outside it (through ``..`` or a symlink) is refused
with a `ToolError` naming the path and the workspace. Binary files are
reported, not dumped; long output is cut with a note that says how to get
the rest. Imports `planexec.workers.tools`, `planexec.errors`, the stdlib and
pydantic only.
"""

from __future__ import annotations

import fnmatch
import mimetypes
import re
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Annotated, Literal, TextIO

from pydantic import BaseModel, Field

from planexec.errors import Problem, ToolError
from planexec.workers.tools import Tool

__all__ = ["FileEntry", "FileListing", "FileText", "FileWritten", "SearchMatch", "SearchResults", "file_tools"]

_SNIFF = 8192  # bytes looked at to tell binary from text, as grep and git do: a NUL means binary
_MAX_LINE_CHARS = 400  # a search match shows at most this much of its line


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


def _is_binary(path: Path) -> bool:
    with path.open("rb") as f:
        return b"\0" in f.read(_SNIFF)


def _skip_line(f: TextIO) -> bool:
    """Read past the rest of one line without holding it whole; False at end of file."""
    while chunk := f.readline(65536):
        if chunk.endswith("\n"):
            return True
    return False


class _Workspace:
    """Resolves tool paths inside one root directory and refuses the rest."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(f"workspace {str(self.root)!r} is not a directory")

    def refuse(self, tool: str, message: str, rule: str, field: str = "path") -> ToolError:
        problem = Problem(rule, message, field=f"parameters.{field}")
        return ToolError(f"{tool}: {message}", tool=tool, problems=[problem])

    def resolve(self, tool: str, path: str, field: str = "path") -> Path:
        """The real path of `path` under the root, following symlinks; refused if it leaves the root."""
        if PurePath(path).is_absolute():
            raise self.refuse(
                tool,
                f"{path!r} is absolute; give a path relative to the workspace {str(self.root)!r}",
                "absolute_path",
                field,
            )
        try:
            full = (self.root / path).resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop, or a name the OS rejects
            raise self.refuse(tool, f"cannot resolve {path!r} in the workspace: {exc}", "bad_path", field) from None
        if not full.is_relative_to(self.root):
            raise self.refuse(
                tool,
                f"{path!r} resolves outside the workspace {str(self.root)!r}; access is refused",
                "outside_workspace",
                field,
            )
        return full

    def show(self, full: Path) -> str:
        """The path as tools report it: relative to the root, with forward slashes."""
        return full.relative_to(self.root).as_posix() if full != self.root else "."

    def inside(self, path: Path) -> bool:
        try:
            return path.resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):
            return False

    def existing(self, tool: str, path: str, kind: Literal["file", "dir"]) -> Path:
        full = self.resolve(tool, path)
        if not full.exists():
            raise self.refuse(tool, f"no such file or directory: {path!r} in the workspace", "not_found")
        if kind == "file" and full.is_dir():
            raise self.refuse(tool, f"{path!r} is a directory; use list_files to see what it holds", "is_directory")
        if kind == "dir" and not full.is_dir():
            raise self.refuse(tool, f"{path!r} is not a directory", "not_a_directory")
        return full

    def check_pattern(self, tool: str, pattern: str, field: str) -> None:
        if PurePath(pattern).is_absolute() or ".." in PurePath(pattern).parts:
            raise self.refuse(tool, f"pattern {pattern!r} may not be absolute or contain '..'", "bad_pattern", field)


def _read_lines(f: TextIO, start_line: int, max_lines: int, budget: int) -> tuple[list[str], int | None, bool]:
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
) -> list[Tool]:
    """The tools `read_file`, `list_files`, `search_files` and `write_file`, bound to `workspace`.

    `max_read_bytes` and `max_read_lines` bound one `read_file` answer,
    `max_entries` a listing, `max_search_file_bytes` the size of a file
    `search_files` will scan, `max_write_bytes` what `write_file` accepts.
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
        full = ws.existing("read_file", path, "file")
        shown = ws.show(full)
        size = full.stat().st_size
        if _is_binary(full):
            kind = mimetypes.guess_type(full.name)[0] or "unknown type"
            note = f"binary file ({size} bytes, {kind}); its content is not shown"
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
        limit = min(max_lines or max_read_lines, max_read_lines)
        with full.open(encoding="utf-8", errors="replace") as f:
            lines, next_line, cut = _read_lines(f, start_line, limit, max_read_bytes)
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
        base = ws.existing("list_files", path, "dir")
        ws.check_pattern("list_files", pattern, "pattern")
        found = base.rglob(pattern) if recursive else base.glob(pattern)
        entries: list[FileEntry] = []
        truncated = False
        for entry in sorted(found):
            if not ws.inside(entry.parent):  # a pattern such as "link/*" would look through a symlink
                continue
            if len(entries) == max_entries:
                truncated = True
                break
            if entry.is_symlink():
                kind, size = "symlink", None
            elif entry.is_dir():
                kind, size = "dir", None
            elif entry.is_file():
                kind, size = "file", entry.stat().st_size
            else:
                kind, size = "other", None
            entries.append(FileEntry(path=ws.show(entry), kind=kind, size=size))
        note = f"truncated at {max_entries} entries; narrow the pattern or the path" if truncated else ""
        return FileListing(path=ws.show(base), entries=entries, truncated=truncated, note=note)

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
        ws.check_pattern("search_files", glob, "glob")
        base = ws.resolve("search_files", path)
        if not base.exists():
            raise ws.refuse("search_files", f"no such file or directory: {path!r} in the workspace", "not_found")
        matches: list[SearchMatch] = []
        searched = skipped = 0
        for file in _candidates(base, glob):
            if not ws.inside(file) or file.stat().st_size > max_search_file_bytes or _is_binary(file):
                skipped += 1
                continue
            searched += 1
            shown = ws.show(file)
            with file.open(encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    if pattern.search(line):
                        if len(matches) == max_results:
                            note = f"stopped at {max_results} matches; narrow the query, path or glob"
                            return SearchResults(
                                matches=matches,
                                files_searched=searched,
                                files_skipped=skipped,
                                truncated=True,
                                note=note,
                            )
                        text = line.rstrip("\r\n")
                        matches.append(SearchMatch(path=shown, line=number, text=text[:_MAX_LINE_CHARS]))
        note = f"skipped {skipped} binary, oversized or outside files" if skipped else ""
        return SearchResults(matches=matches, files_searched=searched, files_skipped=skipped, truncated=False, note=note)

    def write_file(path: str, content: str, overwrite: bool = False) -> FileWritten:
        """Write UTF-8 text to a file in the workspace, creating parent directories.

        An existing file is replaced only when `overwrite` is true.
        """
        data = content.encode()
        if len(data) > max_write_bytes:
            raise ws.refuse("write_file", f"content is {len(data)} bytes; the limit is {max_write_bytes}", "too_large", "content")
        full = ws.resolve("write_file", path)
        if full.is_dir():
            raise ws.refuse("write_file", f"{path!r} is a directory", "is_directory")
        existed = full.exists()
        if existed and not overwrite:
            raise ws.refuse("write_file", f"{path!r} exists; pass overwrite=true to replace it", "exists")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(data)
        return FileWritten(path=ws.show(full), bytes_written=len(data), created=not existed)

    return [
        Tool(read_file, idempotent=True, read_only=True, sensitive=("path",), untrusted_output=True),
        Tool(list_files, idempotent=True, read_only=True, sensitive=("path",), untrusted_output=True),
        Tool(search_files, idempotent=True, read_only=True, sensitive=("path",), untrusted_output=True),
        Tool(write_file, requires_approval=True, sensitive=("path",)),
    ]


def _candidates(base: Path, glob: str) -> Iterator[Path]:
    """Regular files under `base` (or `base` itself) whose name or relative path matches `glob`, in order."""
    if base.is_file():
        if fnmatch.fnmatch(base.name, glob):
            yield base
        return
    for file in sorted(base.rglob(glob)):
        if file.is_file():
            yield file
