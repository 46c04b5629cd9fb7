"""The console's open stores: a few SQLite stores kept between requests, each used by one request at a time.

Owns `StorePool`. Opening a SQLite store checks the file first (up to 32
MiB, SQLite's whole quick check: `store.integrity`), about 14 ms for a
13 MB store, half of what a page of the runs list costs, and the list
refreshes itself every two seconds. So a request takes an idle store of
the pool, or opens one, and gives it back; at most `IDLE_KEPT` wait idle
(the rest are closed), so the open files follow the requests in flight,
not the threads that ever served one. A store is not given back, and the
idle ones are closed, when its file is another (replaced: a restore;
deleted: no store, as before its first run) or when a request failed on
it: the next request opens the file again. A store that is not a file
(PostgreSQL) is opened for each request, as before: a server may end a
kept connection at any time (a restart, an idle timeout). Imports the store.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from planexec.errors import ApprovalError, RunNotFoundError, TamperedError
from planexec.store import RunStore, open_store, sqlite_path

__all__ = ["IDLE_KEPT", "StorePool"]

IDLE_KEPT = 4  # idle stores kept open between requests (the runs list, a run's page and its panels, one more)

# what a request may raise about what the store holds, the store being sound: the store is given back
_ANSWERS = (RunNotFoundError, ApprovalError, TamperedError)


class StorePool:
    """The store at `target` (a path or URL, as ``--store`` takes) for the console's requests; see the module docstring."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._path: Path | None = sqlite_path(target)
        self._lock = threading.Lock()
        self._idle: list[tuple[RunStore, tuple[int, int]]] = []
        self._closed = False

    @contextmanager
    def use(self) -> Iterator[RunStore | None]:
        """A store for one request, used by it alone; None when the file does not exist (nothing recorded yet)."""
        if self._path is None:
            opened = open_store(self.target, create=False)
            try:
                yield opened
            finally:
                opened.close()
            return
        identity = self._identity(self._path)
        if identity is None:
            self._close_idle()
            yield None  # the console never creates a store
            return
        opened = self._take(identity)
        sound = False
        try:
            yield opened
            sound = True
        except _ANSWERS:
            sound = True
            raise
        finally:
            if sound:
                self._give_back(opened, identity)
            else:  # it failed under this request: closed, and so are the idle ones; the next request opens the file again
                opened.close()
                self._close_idle()

    def close(self) -> None:
        """Close the idle stores; one in use is closed when its request ends (the console stops)."""
        with self._lock:
            self._closed = True
        self._close_idle()

    def idle(self) -> int:
        """How many stores wait idle."""
        return len(self._idle)

    def _take(self, identity: tuple[int, int]) -> RunStore:
        """An idle store of the file that has this identity, else a new one; idle ones of another file are closed."""
        stale = []
        found = None
        with self._lock:
            while self._idle and found is None:
                store, of = self._idle.pop()
                if of == identity:
                    found = store
                else:
                    stale.append(store)
        for store in stale:
            store.close()
        return found if found is not None else open_store(self.target, create=False)

    def _give_back(self, store: RunStore, identity: tuple[int, int]) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < IDLE_KEPT:
                self._idle.append((store, identity))
                return
        store.close()

    def _close_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for store, _ in idle:
            store.close()

    @staticmethod
    def _identity(path: Path) -> tuple[int, int] | None:
        """The file's (device, inode), None when it does not exist."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino
