"""Whether a SQLite run store file is sound: its header, its b-tree pages, and SQLite's own checks.

Owns `read_header` (the 100-byte header parsed into a `SqliteHeader` and
checked for consistency before anything trusts it), `open_check` (the check
`SqliteRunStore` runs on every open, before it writes anything), `file_check`
(``PRAGMA integrity_check``: the full check behind ``planexec store check``)
and `damaged` (the `StoreError` that says a file is damaged, names it and
says how to repair it). Everything here reads; nothing writes the file.

A header is damaged, not foreign, when it breaks what SQLite itself writes:
the page size a power of two from 512 to 65536, file format versions 1 or
2, payload fractions 64/32/32, at least 480 usable bytes a page, a schema
format from 0 to 4, a text encoding from 0 to 3, the 20 bytes reserved for
expansion zero. Only a well-formed header is then read for its
application_id (another application's database). Every file SQLite 3.7.0
or newer writes keeps a valid page count in its header; while no ``-wal``
or ``-journal`` lies beside the file (nobody has it open, nothing to
recover), the file must hold at least that many whole pages, its freelist
fit in them, and page 1 be the root of a table b-tree: a file cut short
(copied while written, a full disk) is damaged.

The check on open, measured with ``benchmarks/store_open.py`` (2 shared
x86_64 cores, milliseconds, median; page cache warm, and in brackets cold:
the file evicted from the cache first):

=======  ===========  ==========  ==============  ==============  ===============
store    header       pages       quick_check(1)  quick_check     integrity_check
=======  ===========  ==========  ==============  ==============  ===============
1 MB     0.03 (0.3)   0.4 (1.4)   1.5 (22)        1.4 (23)        1.6 (31)
20 MB    0.03 (0.5)   0.5 (2.5)   14-20 (430)     10-18 (270)     15-32 (280)
200 MB   0.03 (0.2)   0.7 (11)    90 (3,100)      82-94 (3,000)   140-220 (3,900)
=======  ===========  ==========  ==============  ==============  ===============

``quick_check(N)`` stops after N errors, not after N pages: on a healthy
file it walks every page, like ``quick_check``. So the check on open is
``PRAGMA quick_check`` (the b-tree structure of every page) for a file up
to `FULL_CHECK_BELOW` (32 MiB: at most ~30 ms warm, ~0.5 s cold), and
above that the pages that matter (``pages`` above, about a millisecond):
the schema, each table's and index's root page and every page down its
right edge (where new rows go), and the freelist's trunk pages, each
read from the file and parsed (page type, cell count, cell pointers and
freeblocks inside the page, child pages inside the file). What that screen
finds is confirmed by ``quick_check`` before the file is refused: SQLite
reads through a ``-wal`` beside the file (where a newer copy of a page may
be) and is the judge, so a stale page or a checkpoint half done costs one
``quick_check``, never a false refusal. A big file damaged elsewhere is
refused by SQLite when a read reaches the broken page, and ``planexec
store check`` (`file_check`) finds it at once.

What no SQLite check sees: bytes changed inside a record's text (an
event's JSON) leave every page well formed; the audit chain sees them
(``planexec store check``, ``planexec audit verify``). Of 512 bytes flipped
at each of 607 offsets of a store with 12 real runs, 350 were refused on
open, 133 were found by the audit chain, and 124 fell in the unused space
of pages and changed nothing that is read. Imports `errors` and `records`.
"""

from __future__ import annotations

import re
import shlex
import sqlite3
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from planexec.errors import StoreError
from planexec.records import Record

__all__ = [
    "FULL_CHECK_BELOW",
    "SQLITE_MAGIC",
    "FileCheck",
    "SqliteHeader",
    "damaged",
    "file_check",
    "has_journal",
    "inspect_header",
    "is_corrupt",
    "open_check",
    "read_header",
    "read_only",
    "repair_hint",
]

SQLITE_MAGIC = b"SQLite format 3\x00"
FULL_CHECK_BELOW = 32 * 2**20  # bytes: up to this size the check on open is a full PRAGMA quick_check (see the docstring)
_TABLE_PAGES = (0x05, 0x0D)  # interior, leaf: a rowid table's b-tree
_INDEX_PAGES = (0x02, 0x0A)  # an index's, or a WITHOUT ROWID table's
_WITHOUT_ROWID = re.compile(r"\bWITHOUT\s+ROWID\s*;?\s*$", re.IGNORECASE)
_MAX_PROBLEMS = 20  # integrity_check lines kept in a report


@dataclass(frozen=True, slots=True, kw_only=True)
class SqliteHeader(Record):
    """What the 100-byte header of a SQLite file says, once checked for consistency (see `read_header`)."""

    page_size: int
    usable_size: int  # the page size less the bytes reserved at the end of each page
    page_count: int | None  # the header's page count, None when the header does not keep a valid one
    freelist_trunk: int
    freelist_pages: int
    application_id: int
    file_size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FileCheck(Record):
    """The full check of a SQLite file (`file_check`): its pages, free pages, and each problem SQLite found."""

    ok: bool
    pages: int
    free_pages: int
    page_size: int
    problems: list[str]


def repair_hint(path: Path) -> str:
    """How to repair a damaged SQLite store file at `path`: salvage it with the sqlite3 shell, or restore a backup."""
    new = shlex.quote(str(path.with_name(f"{path.stem}-recovered{path.suffix or '.db'}")))
    return (
        f'sqlite3 {shlex.quote(str(path))} ".recover" | sqlite3 {new}, check the copy with '
        f"planexec store check --store {new} and use it instead; or restore the file from a backup"
    )


def damaged(path: Path, detail: str, location: str | None = None) -> StoreError:
    """The `StoreError` for a damaged store file: names it, says what is wrong and how to repair it."""
    where = location or str(path)
    return StoreError(f"{where} is damaged: {detail}. To repair it: {repair_hint(path)}", location=where)


def is_corrupt(exc: sqlite3.Error) -> bool:
    """True for SQLite's words for a file it cannot read as a database (not for a locked or busy one)."""
    text = str(exc)
    return "malformed" in text or "file is not a database" in text


def has_journal(path: Path) -> bool:
    """True when a ``-wal`` or ``-journal`` lies beside the file: it may be open, or have something to recover."""
    return Path(f"{path}-wal").exists() or Path(f"{path}-journal").exists()


def read_header(path: Path, location: str | None = None) -> SqliteHeader | None:
    """The checked header of the SQLite file `path`; None for an empty file.

    A `StoreError` naming the file when it is not SQLite, or when its header
    is damaged (see the module docstring). Reads the first page only.
    """
    header, problem = inspect_header(path, location)
    if problem:
        raise damaged(path, problem, location)
    return header


def inspect_header(path: Path, location: str | None = None) -> tuple[SqliteHeader | None, str | None]:
    """The header of the SQLite file `path` (None: empty or unreadable) and what is damaged in it (None: nothing).

    A `StoreError` when the file cannot be read or is not SQLite at all.
    """
    where = location or str(path)
    try:
        with path.open("rb") as f:
            head = f.read(512)
            size = f.seek(0, 2)
    except OSError as exc:
        raise StoreError(f"cannot read the run store {where}: {exc.strerror or exc}", location=where) from None
    if not head:
        return None, None
    if not head.startswith(SQLITE_MAGIC):
        raise StoreError(f"{where} is not a planexec run store: it is not an SQLite database", location=where)
    if len(head) < 100:
        return None, f"its SQLite header is cut short ({len(head)} of 100 bytes)"
    header = _parse(head, size)
    problem = _header_problem(head, header, journal=has_journal(path))
    return header, (f"its SQLite header is inconsistent: {problem}" if problem else None)


@contextmanager
def read_only(path: Path, timeout: float = 5.0) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the file that leaves nothing behind: immutable when no WAL lies beside it.

    (A read-only open of a WAL-mode file would create a ``-wal`` and ``-shm``.)
    """
    immutable = "&immutable=1" if not has_journal(path) else ""
    conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro{immutable}", uri=True, timeout=timeout)
    try:
        yield conn
    finally:
        conn.close()


def _parse(head: bytes, size: int) -> SqliteHeader:
    (raw_size,) = struct.unpack(">H", head[16:18])
    page_size = 65536 if raw_size == 1 else raw_size
    counter, pages, trunk, free = struct.unpack(">IIII", head[24:40])
    valid_for = struct.unpack(">I", head[92:96])[0]
    return SqliteHeader(
        page_size=page_size,
        usable_size=page_size - head[20],
        page_count=pages if pages and counter == valid_for else None,  # as SQLite reads it: valid when both counters agree
        freelist_trunk=trunk,
        freelist_pages=free,
        application_id=struct.unpack(">I", head[68:72])[0],
        file_size=size,
    )


def _header_problem(head: bytes, h: SqliteHeader, *, journal: bool) -> str | None:
    """What is inconsistent in a header, or None."""
    if not (512 <= h.page_size <= 65536 and h.page_size & (h.page_size - 1) == 0):
        return f"page size {int.from_bytes(head[16:18], 'big')} is not a power of two from 512 to 65536"
    if head[18] not in (1, 2) or head[19] not in (1, 2):
        return f"file format versions {head[18]}/{head[19]} are not 1 or 2"
    if h.usable_size < 480:
        return f"{head[20]} bytes reserved per page leave fewer than 480 usable"
    if tuple(head[21:24]) != (64, 32, 32):
        return f"payload fractions {head[21]}/{head[22]}/{head[23]} are not 64/32/32"
    schema_format, encoding = struct.unpack(">I", head[44:48])[0], struct.unpack(">I", head[56:60])[0]
    if schema_format > 4:
        return f"schema format {schema_format} is not 0 to 4"
    if encoding > 3:
        return f"text encoding {encoding} is not 0 to 3"
    if any(head[72:92]):
        return "the bytes reserved for expansion (72-91) are not zero"
    if h.page_count is None or journal:
        return None  # an old header, or a WAL or journal that may hold newer pages: the counts are not checked here
    # shorter than its pages, or a page cut in two: SQLite never leaves a file so (bytes after the last page it ignores)
    if h.file_size < h.page_count * h.page_size or h.file_size % h.page_size:
        return f"it says {h.page_count} pages of {h.page_size} bytes ({h.page_count * h.page_size} bytes), the file holds {h.file_size}"
    if h.freelist_pages >= h.page_count or h.freelist_trunk > h.page_count or (h.freelist_trunk == 0) != (h.freelist_pages == 0):
        return f"its freelist (trunk page {h.freelist_trunk}, {h.freelist_pages} pages) does not fit in its {h.page_count} pages"
    if len(head) > 100 and head[100] not in _TABLE_PAGES:
        return f"page 1 is not a table b-tree (type {head[100]:#x})"
    return None


# --- the check on open -------------------------------------------------------------------------


def open_check(
    conn: sqlite3.Connection, path: Path, header: SqliteHeader, location: str | None = None, *, full_below: int | None = None
) -> None:
    """The check run on open (see the module docstring); a `damaged` `StoreError` when it finds a problem.

    `conn` is a read-only connection to the file; nothing is written. A
    file up to `full_below` bytes (default `FULL_CHECK_BELOW`) gets the
    full ``PRAGMA quick_check``.
    """
    limit = FULL_CHECK_BELOW if full_below is None else full_below
    if header.file_size <= limit or header.page_count is None:
        problems = _quick_check(conn)
        if problems:
            raise damaged(path, f"SQLite's quick check failed: {'; '.join(problems[:3])}", location)
        return
    try:
        problem = _pages_problem(conn, path, header)
    except sqlite3.DatabaseError as exc:
        if not is_corrupt(exc):
            raise
        problem = f"SQLite cannot read its schema: {exc}"
    if problem is None:
        return
    # SQLite is the judge: a page may be newer in the WAL, or a checkpoint half done; only what it confirms is refused
    confirmed = _quick_check(conn)
    if confirmed:
        raise damaged(path, f"{problem}; SQLite's quick check: {'; '.join(confirmed[:3])}", location)


def _quick_check(conn: sqlite3.Connection) -> list[str]:
    """The problems ``PRAGMA quick_check`` finds (an empty list: none)."""
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:  # so damaged that the check itself stops
        if not is_corrupt(exc):
            raise
        return [str(exc)]
    lines = [str(line) for (text,) in rows for line in str(text).splitlines()]
    return [] if lines == ["ok"] else [line for line in lines if not line.startswith("***")]


def _pages_problem(conn: sqlite3.Connection, path: Path, header: SqliteHeader) -> str | None:
    """The pages that matter, read from the file and checked: the roots and right edges of every b-tree, the freelist."""
    roots = [(name, int(root), _expected(kind, sql)) for kind, name, root, sql in conn.execute(_ROOTS) if root]
    pages = header.file_size // header.page_size
    with path.open("rb") as f:
        reader = _Pages(f, header, pages)
        for name, root, types in [("sqlite_schema", 1, _TABLE_PAGES), *roots]:
            problem = reader.right_edge(root, types)
            if problem:
                return f"the b-tree of {name} is damaged ({problem})"
        return reader.freelist(header.freelist_trunk, header.freelist_pages)


_ROOTS = "SELECT type, name, rootpage, sql FROM sqlite_schema WHERE type IN ('table', 'index')"


def _expected(kind: str, sql: Any) -> tuple[int, int]:
    if kind == "table" and not _WITHOUT_ROWID.search(str(sql or "")):
        return _TABLE_PAGES
    return _INDEX_PAGES


class _Pages:
    """Raw pages of a file with no WAL beside it, each checked as SQLite would read it."""

    def __init__(self, f: Any, header: SqliteHeader, pages: int) -> None:
        self.f = f
        self.size = header.page_size
        self.usable = header.usable_size
        self.pages = pages

    def read(self, number: int) -> bytes:
        self.f.seek((number - 1) * self.size)
        return bytes(self.f.read(self.size))

    def right_edge(self, root: int, types: tuple[int, int]) -> str | None:
        """Check the root page of a b-tree and every page down its right edge; the first problem, or None."""
        number, seen = root, set[int]()
        while True:
            if not 1 <= number <= self.pages:
                return f"page {number} is outside the file's {self.pages} pages"
            if number in seen or len(seen) > 40:
                return f"page {number} loops back into the tree"
            seen.add(number)
            page = self.read(number)
            if len(page) < self.size:
                return f"page {number} is cut short"
            problem = self.btree_page(page, number, types)
            if problem:
                return f"page {number}: {problem}"
            at = 100 if number == 1 else 0
            if page[at] == types[1]:  # a leaf: the end of the edge
                return None
            number = struct.unpack(">I", page[at + 8 : at + 12])[0]

    def btree_page(self, page: bytes, number: int, types: tuple[int, int]) -> str | None:
        """What is wrong with one b-tree page (its header, cell pointers, freeblocks, child pointers), or None."""
        at = 100 if number == 1 else 0
        kind = page[at]
        if kind not in types:
            return f"type {kind:#x}, expected {types[0]:#x} or {types[1]:#x}"
        interior = kind == types[0]
        first_free, cells, start, fragments = struct.unpack(">HHHB", page[at + 1 : at + 8])
        start = start or 65536
        pointers = at + (12 if interior else 8)
        if pointers + 2 * cells > start or start > self.usable:
            return f"{cells} cells do not fit (content from offset {start})"
        if fragments > 60:
            return f"{fragments} fragmented bytes (at most 60)"
        for i in range(cells):
            (offset,) = struct.unpack(">H", page[pointers + 2 * i : pointers + 2 * i + 2])
            if not start <= offset <= self.usable - 4:
                return f"cell {i} points to offset {offset}, outside the cell content area"
            if interior:
                (child,) = struct.unpack(">I", page[offset : offset + 4])
                if not 2 <= child <= self.pages:
                    return f"cell {i} points to page {child}, outside the file"
        free, hops = first_free, 0
        while free:
            hops += 1
            if free < start or free > self.usable - 4 or hops > self.usable // 4:
                return f"a freeblock at offset {free} is outside the cell content area"
            following, length = struct.unpack(">HH", page[free : free + 4])
            if length < 4 or free + length > self.usable or (following and following <= free + length):
                return f"the freeblock at offset {free} ({length} bytes) is malformed"
            free = following
        return None

    def freelist(self, trunk: int, total: int) -> str | None:
        """Walk the freelist's trunk pages: each inside the file, the count of free pages adding up to the header's."""
        seen: set[int] = set()
        counted = 0
        while trunk:
            if not 2 <= trunk <= self.pages or trunk in seen:
                return f"the freelist is damaged (trunk page {trunk} is outside the file or repeated)"
            seen.add(trunk)
            page = self.read(trunk)
            if len(page) < 8:
                return f"the freelist is damaged (trunk page {trunk} is cut short)"
            following, leaves = struct.unpack(">II", page[:8])
            if leaves > self.usable // 4 - 2:
                return f"the freelist is damaged (trunk page {trunk} claims {leaves} free pages)"
            counted += 1 + leaves
            if counted > total:
                return f"the freelist is damaged (more free pages than the header's {total})"
            trunk = following
        if counted != total:
            return f"the freelist is damaged (its trunks hold {counted} pages, the header says {total})"
        return None


# --- the full check ----------------------------------------------------------------------------


def file_check(conn: sqlite3.Connection) -> FileCheck:
    """``PRAGMA integrity_check`` on a read-only connection: every page, every index against its table."""
    rows = conn.execute("PRAGMA integrity_check(100)").fetchall()
    lines = [line for (text,) in rows for line in str(text).splitlines()]
    problems = [] if lines == ["ok"] else [line for line in lines if not line.startswith("***")][:_MAX_PROBLEMS]
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return FileCheck(ok=not problems, pages=pages, free_pages=free, page_size=size, problems=problems)
