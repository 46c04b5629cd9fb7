"""The database under the run store: one connection, its transactions, its SQL dialect and its clock.

Owns `Database`, what every part of the store (`log`, `approvals`,
`templates`, `leases`, `queue`) writes through. A backend (`sqlite`,
`postgres`) subclasses it with a connection: `_transaction(write=...)`, a
context that yields a DB-API cursor, commits on exit, rolls back and
raises a `StoreError` on any failure; `q` to turn ``?`` into its own
placeholder; `raw` to read a column as stored; `_close_connection`. The
rest is shared: `tx` (a transaction under the store's lock, refused once
closed), `one` and `all` (a statement's rows), `now` (the database's
clock: leases and the queue agree on time across machines), a run's audit
chain head (`chain`, `save_chain`: read, locked where the backend can, and
written back in the same transaction) and `require_run`. Imports
`errors` and the store's `audit`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from planexec.errors import RunNotFoundError, StoreError
from planexec.store.audit import GENESIS, Chain, ChainHead

__all__ = ["Database"]

_NOW = {
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
    "postgres": "EXTRACT(EPOCH FROM clock_timestamp())::double precision",
}


class Database(ABC):
    """A connection to the store's database (see the module docstring); backends subclass it."""

    dialect = "sql"
    location = "?"
    for_update = ""  # how a read locks the rows it reads until the transaction ends, where the backend can

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.closed = False

    # --- what a backend supplies ------------------------------------------------

    @abstractmethod
    def _transaction(self, *, write: bool) -> AbstractContextManager[Any]:
        """A transaction yielding a DB-API cursor: committed when the block ends, rolled back when it raises."""

    @abstractmethod
    def _close_connection(self) -> None:
        """Close the backend's connection(s)."""

    def q(self, sql: str) -> str:
        """`sql` with the backend's placeholders."""
        return sql

    def raw(self, column: str) -> str:
        """`column` read as it is stored (a backend that may hold text that is not UTF-8 reads its bytes)."""
        return column

    # --- shared -----------------------------------------------------------------

    @contextmanager
    def tx(self, *, write: bool) -> Iterator[Any]:
        """One transaction under the store's lock: a cursor, committed when the block ends; `StoreError` once closed."""
        if self.closed:
            raise StoreError(f"{self.location}: the run store is closed", location=self.location)
        with self.lock, self._transaction(write=write) as cur:
            yield cur

    def one(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first row of `sql` (None when there is none)."""
        cur.execute(self.q(sql), params)
        return cur.fetchone()

    def all(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row of `sql`."""
        cur.execute(self.q(sql), params)
        return list(cur.fetchall())

    def now(self, cur: Any) -> float:
        """The database's clock, in seconds since the epoch."""
        return float(self.one(cur, f"SELECT {_NOW[self.dialect]}")[0])

    def require_run(self, cur: Any, run_id: str) -> None:
        """`RunNotFoundError` naming the run when the store has no such run."""
        if self.one(cur, "SELECT 1 FROM runs WHERE run_id = ?", (run_id,)) is None:
            raise RunNotFoundError(run_id, location=self.location)

    def chain(self, cur: Any, run_id: str) -> Chain:
        """The run's chain head, locked until the transaction ends; a new chain for a run that has none yet."""
        select = self.q("SELECT link, seq, hash FROM audit_heads WHERE run_id = ?" + self.for_update)
        cur.execute(select, (run_id,))
        row = cur.fetchone()
        if row is None:
            cur.execute(
                self.q("INSERT INTO audit_heads (run_id, link, seq, hash) VALUES (?, -1, -1, ?) ON CONFLICT (run_id) DO NOTHING"),
                (run_id, GENESIS),
            )
            cur.execute(select, (run_id,))
            row = cur.fetchone()
        return Chain(run_id, ChainHead(link=row[0], seq=row[1], hash=row[2]))

    def save_chain(self, cur: Any, chain: Chain) -> None:
        """Write the head back (in the transaction that added the records)."""
        if chain.changed:
            cur.execute(
                self.q("UPDATE audit_heads SET link = ?, seq = ?, hash = ? WHERE run_id = ?"),
                (chain.link, chain.seq, chain.hash, chain.run_id),
            )

    def close_database(self) -> None:
        """Close the connection once; later transactions raise `StoreError`."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self._close_connection()
