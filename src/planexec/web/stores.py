"""The console's open stores: one a thread of its pool, kept from one request to the next.

Owns `StorePool`. Opening a SQLite store checks the file first (up to 32
MiB, SQLite's whole quick check: `store.integrity`), about 14 ms for a
13 MB store, half of what a page of the runs list costs, and the list
refreshes itself every two seconds. So each thread that serves requests
opens the store once and keeps it; a store is opened again, and checked
again, when its file is another (replaced: a restore, ``planexec store
repair``; deleted: no store, as before its first run) or when a request
failed on it (`drop`). Each thread has its own store, so no connection
is shared between threads. Imports the store.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from planexec.store import RunStore, open_store, sqlite_path

__all__ = ["StorePool"]


class StorePool:
    """The store at `target` (a path or URL, as ``--store`` takes), opened once a thread; see the module docstring."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._path: Path | None = sqlite_path(target)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[RunStore] = []  # every store a thread holds, to close at the end

    def get(self) -> RunStore | None:
        """This thread's store, opened (and checked) when it has none or its file changed; None when there is no store yet."""
        identity = self._identity()
        if identity is False:
            self.drop()
            return None  # nothing recorded yet: the console never creates a store
        kept: RunStore | None = getattr(self._local, "store", None)
        if kept is not None and self._local.identity == identity:
            return kept
        self.drop()
        opened = open_store(self.target, create=False)
        self._local.store, self._local.identity = opened, identity
        with self._lock:
            self._open.append(opened)
        return opened

    def drop(self) -> None:
        """Close this thread's store (a request failed on it, or its file changed): the next request opens it again."""
        kept: RunStore | None = getattr(self._local, "store", None)
        self._local.store = None
        if kept is not None:
            with self._lock:
                if kept in self._open:
                    self._open.remove(kept)
            kept.close()

    def close(self) -> None:
        """Close every thread's store (the console stops)."""
        with self._lock:
            stores, self._open = self._open, []
        for s in stores:
            s.close()

    def _identity(self) -> tuple[int, int] | bool:
        """The SQLite file's (device, inode), False when it does not exist; True for a store that is not a file."""
        if self._path is None:
            return True
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return False
        return st.st_dev, st.st_ino
