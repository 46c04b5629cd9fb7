"""The embedded run store: one SQLite file in WAL mode, one writer, any number of readers.

Owns `SqliteRunStore`: opening a file safely (a file that is not SQLite,
an SQLite database of another application, a damaged one, or one written
by a newer planexec gets a `StoreError` naming the file and what is wrong,
and is never modified). Before its write connection, each open reads the
file through a read-only connection that leaves nothing behind: the header
checked for consistency before its application_id is trusted (a damaged
header is damaged, not another application's), then, for a store of ours,
`integrity.open_check` (``PRAGMA quick_check`` up to 32 MiB, the pages
that matter above that: measured there). A damaged store's `StoreError`
says it is damaged, names the file and how to repair it. A file this
process has open already (a console's team writing while each page opens
the store to read) is not read again: a Python file opened and closed
beside SQLite's drops SQLite's POSIX locks on it, and a reader's close
would then checkpoint and delete the WAL the writer still writes to, so
its writes would be lost. Then the pragmas
(WAL, ``synchronous=NORMAL``: a committed write survives a killed process;
a busy timeout), migrations on open, and the transactions
`sql.SqlRunStore` runs in (``BEGIN IMMEDIATE`` for a write: one writer at
a time, so a run's audit head needs no row lock). Checkpoints (copying the
WAL back into the database, with an fsync) run on a background connection
every few hundred commits instead of inside a commit, so a run's steps
never wait for one. Imports the store's `sql`, `schema` and `integrity`,
`errors`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from planexec.errors import StoreError
from planexec.store.integrity import damaged, is_corrupt, open_check, read_header, read_only, repair_hint
from planexec.store.rows import now
from planexec.store.schema import SCHEMA_VERSION, SQLITE_APPLICATION_ID, installed_version, migrate
from planexec.store.sql import SqlRunStore

__all__ = ["SqliteRunStore"]

_CHECKPOINT_EVERY = 256  # commits between background checkpoints (each commit adds a page or two to the WAL)
_TRUNCATE_WAIT = 0.2  # seconds a truncating checkpoint waits for readers before it gives up
_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"


# the store files this process has open, by device and inode, with how many stores hold each (see `SqliteRunStore.__init__`)
_OPEN: dict[tuple[int, int], int] = {}
_OPEN_LOCK = threading.Lock()


_OPENING: dict[str, threading.Lock] = {}  # by resolved path: the opens of one file in this process take turns


def _opening(path: Path) -> threading.Lock:
    with _OPEN_LOCK:
        return _OPENING.setdefault(str(path.resolve()), threading.Lock())


def _key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class SqliteRunStore(SqlRunStore):
    """The run store in the SQLite file `path` (created with its folder unless `create` is False).

    `timeout` is how long a write waits for another writer (seconds).
    Safe to read from other processes while one process writes; use one
    writer per file. Thread-safe within a process.
    """

    dialect = "sqlite"

    def __init__(self, path: str | Path, *, create: bool = True, timeout: float = 5.0) -> None:
        super().__init__()
        self.path = Path(path).expanduser()
        self.location = str(self.path)
        self._timeout = timeout
        self._commits = 0
        self._checkpointer: _Checkpointer | None = None
        self._key: tuple[int, int] | None = None
        self._counted = False  # this store is counted in `_OPEN`
        with _opening(self.path):  # one open of a file at a time in this process: see `_open`
            self._open(create, timeout)

    def _open(self, create: bool, timeout: float) -> None:
        """Check the file (unless this process has it open, whole, already), connect, migrate, count it as open here.

        A file this process has open already was checked then; reading it
        again here (a Python file opened and closed beside SQLite's) would drop
        SQLite's POSIX locks on it, and another connection's WAL with them. Two
        opens of one file here take turns, so the second never reads the file
        while the first migrates it.
        """
        self._key = _key(self.path)
        with _OPEN_LOCK:
            here = self._key is not None and _OPEN.get(self._key, 0) > 0
        version = SCHEMA_VERSION if here else self._inspect(create)
        conn = None
        try:
            conn = self._conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
            self._cur = self._conn.cursor()
            self._cur.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            mode = self._cur.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            self._cur.execute("PRAGMA synchronous = NORMAL")
            self._cur.execute("PRAGMA wal_autocheckpoint = 0")  # see _Checkpointer
            self._cur.execute("PRAGMA journal_size_limit = 67108864")
        except sqlite3.Error as exc:
            if conn is not None:  # a file that cannot be opened for writing (read-only) keeps no descriptor open here
                conn.close()
            raise self._error(exc, "cannot open") from exc
        if str(mode).lower() != "wal":
            self._conn.close()
            raise StoreError(f"{self.location}: cannot use WAL mode here (journal mode {mode!r})", location=self.location)
        if version < SCHEMA_VERSION:
            self.migrate()
        self._key = self._key or _key(self.path)  # a new file has one now
        with _OPEN_LOCK:  # counted once it is whole (migrated): another open here may then skip reading the file
            if self._key is not None:
                _OPEN[self._key] = _OPEN.get(self._key, 0) + 1
                self._counted = True

    # --- opening -------------------------------------------------------------------

    def _inspect(self, create: bool) -> int:
        """The schema version in the file (0: new or empty), reading only; `StoreError` when it is not ours."""
        path, where = self.path, self.location
        if not path.exists():
            if not create:
                raise StoreError(f"no run store at {where} (no run has been recorded there)", location=where)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the folder of the run store {where}: {exc.strerror or exc}", location=where) from None
            return 0
        if path.is_dir():
            raise StoreError(f"{where} is a folder, not a run store file", location=where)
        header = read_header(path, where)  # a damaged header is damaged, whatever its application_id says
        if header is None:
            return self._fresh(create)
        app = header.application_id
        if app not in (0, SQLITE_APPLICATION_ID):
            raise StoreError(
                f"{where} is not a planexec run store: it is the SQLite database of another application (application_id {app:#x})",
                location=where,
            )
        try:
            with read_only(path, self._timeout) as ro:
                cur = ro.cursor()
                tables = {name for (name,) in cur.execute(_TABLES)}
                version = installed_version(cur, tables, where)
                if version:  # ours: checked before anything is written to it (see `integrity`)
                    open_check(ro, path, header, where)
        except sqlite3.Error as exc:
            if app == SQLITE_APPLICATION_ID and is_corrupt(exc):  # ours by its header, and SQLite cannot read it
                raise damaged(path, f"SQLite cannot read it: {exc}", where) from None
            raise self._error(exc, "cannot read") from exc
        return version if version else self._fresh(create)

    def _fresh(self, create: bool) -> int:
        if not create:
            raise StoreError(f"no run store at {self.location} (the file holds no runs)", location=self.location)
        return 0

    def migrate(self, target: int = SCHEMA_VERSION) -> list[int]:
        """Apply the missing migrations up to `target` in one transaction; the versions applied."""
        with self.tx(write=True) as cur:
            tables = {name for (name,) in cur.execute(_TABLES)}
            version = installed_version(cur, tables, self.location)  # again, under the write lock: another process may have done it
            if version == 0:
                cur.execute(f"PRAGMA application_id = {SQLITE_APPLICATION_ID}")
            return migrate(cur, "sqlite", version, now(), target=target)

    # --- transactions ----------------------------------------------------------------

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Any]:
        cur = self._cur
        try:
            cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            raise self._error(exc, "cannot begin a transaction on") from exc
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException as exc:
            if self._conn.in_transaction:
                try:
                    cur.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            if isinstance(exc, sqlite3.Error):
                raise self._error(exc, "cannot write" if write else "cannot read") from exc
            raise
        if write:
            self._commits += 1
            if self._commits % _CHECKPOINT_EVERY == 0:
                if self._checkpointer is None:
                    self._checkpointer = _Checkpointer(self.path, self._timeout)
                self._checkpointer.poke()

    def raw(self, column: str) -> str:
        # SQLite keeps whatever bytes were written into a TEXT column: read them as bytes, so a damaged one is reported, not raised
        return f"CAST({column} AS BLOB)"

    def _error(self, exc: sqlite3.Error, doing: str) -> StoreError:
        text = str(exc)
        where = self.location
        if is_corrupt(exc):
            return StoreError(
                f"{where} is damaged or not a planexec run store: {text}. If it is a damaged store, to repair it: {repair_hint(self.path)}",
                location=where,
            )
        if "locked" in text or "busy" in text:
            return StoreError(f"{where} is locked by another writer (waited {self._timeout:g}s): {text}", location=where)
        return StoreError(f"{doing} the run store {where}: {text}", location=where)

    def let_go(self, run_id: str) -> None:
        """Release the run's lease, then (in the background) copy the WAL back and cut it to nothing: a run that
        ended here leaves no WAL behind it, even while this store stays open for the next run."""
        super().let_go(run_id)
        if self.closed:
            return
        if self._checkpointer is None:
            self._checkpointer = _Checkpointer(self.path, self._timeout)
        self._checkpointer.poke(truncate=True)

    def _close_connection(self) -> None:
        with _OPEN_LOCK:
            if self._counted and self._key is not None:
                _OPEN[self._key] -= 1
                self._counted = False
        if self._checkpointer is not None:
            self._checkpointer.stop()
        try:
            # copy the WAL back and cut it to nothing: a closed store leaves no WAL behind (a reader that holds it
            # keeps it whole; the next writer's checkpoint catches up)
            self._conn.execute(f"PRAGMA busy_timeout = {int(_TRUNCATE_WAIT * 1000)}")  # a reader holds the WAL: give up soon
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass
        self._conn.close()


class _Checkpointer:
    """A thread with its own connection that copies the WAL into the database when poked (PASSIVE: never blocks a
    writer; TRUNCATE when a run ended: the WAL cut to nothing, waiting for the writer and readers)."""

    def __init__(self, path: Path, timeout: float) -> None:
        self._path = path
        self._timeout = timeout
        self._wake = threading.Event()
        self._stopping = False
        self._truncate = False
        self._thread = threading.Thread(target=self._loop, name=f"planexec checkpoint {path.name}", daemon=True)
        self._thread.start()

    def poke(self, *, truncate: bool = False) -> None:
        """Ask for a checkpoint soon; `truncate`: then cut the WAL to nothing (waits for readers and the writer)."""
        if truncate:
            self._truncate = True
        self._wake.set()

    def stop(self) -> None:
        """End the thread (after the checkpoint in progress, if any)."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=self._timeout + 5)

    def _loop(self) -> None:
        try:
            # TRUNCATE holds new writers back while it waits for readers: wait little, it is only housekeeping
            # (PASSIVE never waits)
            conn = sqlite3.connect(self._path, timeout=_TRUNCATE_WAIT, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            return
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                mode, self._truncate = ("TRUNCATE" if self._truncate else "PASSIVE"), False
                try:
                    conn.execute(f"PRAGMA wal_checkpoint({mode})")
                except sqlite3.Error:
                    pass  # a checkpoint is only housekeeping; the next one catches up
        finally:
            conn.close()
