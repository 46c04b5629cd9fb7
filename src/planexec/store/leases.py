"""One owner per run: the lease a process holds on each run it runs, kept alive by a heartbeat.

Owns `Lease` (a row of ``leases``: who holds a run, since when, until
when), `Holder` (this process, as a lease names it), `LeaseBook`, the
store's leases over its `database.Database` (`acquire_lease`,
`renew_lease`, `release_lease`, `lease`, and `hold`/`let_go`, which keep
a lease renewed by one heartbeat thread per store, every lease it holds
in one transaction a beat; `take`, `keep`, `leases_of` and `check_lease`
inside a transaction of the queue or the event log), `held` (a run held
for a block, by anything that `engine.recording.Holds`) and `lease_ttl`, how long a lease
outlives its last heartbeat (``PLANEXEC_LEASE_TTL`` seconds, default 30).

A lease is taken in one write transaction: a run nobody holds, or whose
lease expired, or whose holder is a process of this machine that is gone
(its pid no longer runs, or runs another program since), is taken; any
other is refused with `LeaseHeldError` naming the holder. Times are the
database's clock (SQLite: this machine's; PostgreSQL: the server's), so
processes on machines whose clocks differ still agree on expiry. A
process is recognised as this machine's by its boot id and pid namespace,
so a pid from another container or from before a reboot is never looked
up here. The store fences its own writes: an append to a run this store
holds checks, in the same transaction, that the lease still names it
(`LeaseLostError` otherwise), so a process that lost its run (stopped
longer than the lease, then taken over) never writes into it again.
Imports `errors`, `records` and the store's `database`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from planexec.engine.recording import Holds
from planexec.errors import LeaseHeldError, LeaseLostError, StoreError
from planexec.store.base import Lease
from planexec.store.database import Database

__all__ = ["LEASE_TTL_ENV", "Holder", "Lease", "LeaseBook", "held", "lease_ttl"]

log = logging.getLogger("planexec.store")

LEASE_TTL_ENV = "PLANEXEC_LEASE_TTL"
_DEFAULT_TTL = 30.0
_COLUMNS = "run_id, owner, host, pid, machine, started, command, acquired_at, heartbeat_at, expires_at"


def lease_ttl() -> float:
    """How long a lease outlives its holder's last heartbeat: ``PLANEXEC_LEASE_TTL`` seconds, default 30."""
    raw = os.environ.get(LEASE_TTL_ENV, "").strip()
    if not raw:
        return _DEFAULT_TTL
    try:
        ttl = float(raw)
    except ValueError:
        raise StoreError(f"{LEASE_TTL_ENV}={raw!r} is not a number of seconds") from None
    if not 0.5 <= ttl <= 86_400:
        raise StoreError(f"{LEASE_TTL_ENV}={raw!r}: a lease lasts between 0.5 and 86400 seconds")
    return ttl


@cache
def _machine() -> str:
    """This machine and process namespace: pids are comparable only between processes that share it."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""  # no /proc: liveness by expiry only
    return f"{boot}/{namespace}"


def _started(pid: int) -> str:
    """When process `pid` started (clock ticks since boot, from /proc); '' when it is not running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
    if len(fields) < 20 or fields[0] == "Z":  # a zombie has exited
        return ""
    return fields[19]


@dataclass(frozen=True, slots=True)
class Holder:
    """This process as a lease names it: a token for this hold, the host, the pid and what it runs."""

    owner: str
    host: str
    pid: int
    machine: str
    started: str
    command: str

    @classmethod
    def me(cls) -> Holder:
        """A new holder for this process (each hold gets its own token, so two holds in one process are told apart)."""
        pid = os.getpid()
        program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
        name = program.parent.name if program.name == "__main__.py" else program.name  # python -m planexec: planexec
        argv = [name, *sys.argv[1:4]]
        return cls(
            owner=uuid.uuid4().hex,
            host=socket.gethostname(),
            pid=pid,
            machine=_machine(),
            started=_started(pid),
            command=" ".join(argv)[:200],
        )


def _lease(row: Any, now: float) -> Lease:
    run_id, owner, host, pid, machine, started, command, acquired, beat, expires = row
    live = float(expires) > now and not _gone(int(pid), str(machine), str(started))
    return Lease(
        run_id=run_id,
        owner=owner,
        host=host,
        pid=int(pid),
        command=command,
        acquired_at=_time(acquired),
        heartbeat_at=_time(beat),
        expires_at=_time(expires),
        live=live,
    )


def _gone(pid: int, machine: str, started: str) -> bool:
    """True when the holder is a process of this machine that has exited (or whose pid now runs another process)."""
    if not machine or machine != _machine():
        return False  # another machine, container or boot: only its lease's expiry tells
    return _started(pid) != started


def _time(epoch: Any) -> datetime:
    return datetime.fromtimestamp(float(epoch), UTC)


class LeaseBook:
    """The leases of a store (see the module docstring), over its `database.Database`; one heartbeat thread for all it holds."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.lease_ttl = lease_ttl()
        self._lock = threading.RLock()
        self._held: dict[str, Holder] = {}
        self._lost: dict[str, Callable[[LeaseLostError], None]] = {}
        self._heartbeat: _Heartbeat | None = None

    def acquire_lease(self, run_id: str, holder: Holder | None = None, *, ttl: float | None = None) -> Lease:
        """Take run `run_id` for `holder` (this process by default); `LeaseHeldError` naming the holder when another live process has it."""
        holder = holder or Holder.me()
        with self.db.tx(write=True) as cur:
            return self.take(cur, run_id, holder, self.lease_ttl if ttl is None else ttl)

    def take(self, cur: Any, run_id: str, holder: Holder, ttl: float) -> Lease:
        """`acquire_lease` inside the caller's write transaction (the run queue claims a run and its lease in one)."""
        now = self.db.now(cur)
        select = self.db.q(f"SELECT {_COLUMNS} FROM leases WHERE run_id = ?" + self.db.for_update)
        cur.execute(select, (run_id,))
        row = cur.fetchone()
        if row is None:
            cur.execute(
                self.db.q("INSERT INTO leases (" + _COLUMNS + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING"),
                _row(run_id, holder, now, ttl),
            )
            if cur.rowcount == 1:
                return _lease(_row(run_id, holder, now, ttl), now)
            cur.execute(select, (run_id,))  # another process took it in the meantime: judge its lease
            row = cur.fetchone()
        current = _lease(row, now)
        if current.live and current.owner != holder.owner:
            raise LeaseHeldError(
                f"run {run_id!r} is being run by {current.describe()}; it can be resumed once that process stops "
                f"(at once when it ran on this machine, else when its lease expires, {ttl:g}s after its last heartbeat)",
                run_id=run_id,
                holder=current,
                location=self.db.location,
            )
        cur.execute(
            self.db.q(
                "UPDATE leases SET owner = ?, host = ?, pid = ?, machine = ?, started = ?, command = ?, "
                "acquired_at = ?, heartbeat_at = ?, expires_at = ? WHERE run_id = ? AND owner = ?"
            ),
            (*_row(run_id, holder, now, ttl)[1:], run_id, current.owner),
        )
        if cur.rowcount != 1:  # cannot happen under the row lock; refuse rather than share
            raise LeaseHeldError(
                f"run {run_id!r} was taken by another process just now", run_id=run_id, holder=None, location=self.db.location
            )
        if not current.live and current.owner != holder.owner:
            log.info("run %s: took over the lease of %s (expired or gone)", run_id, current.describe())
        return _lease(_row(run_id, holder, now, ttl), now)

    def renew_lease(self, run_id: str, holder: Holder, *, ttl: float | None = None) -> None:
        """Move the lease's expiry forward; `LeaseLostError` when `holder` no longer holds it."""
        ttl = self.lease_ttl if ttl is None else ttl
        with self.db.tx(write=True) as cur:
            now = self.db.now(cur)
            cur.execute(
                self.db.q("UPDATE leases SET heartbeat_at = ?, expires_at = ? WHERE run_id = ? AND owner = ?"),
                (now, now + ttl, run_id, holder.owner),
            )
            if cur.rowcount != 1:
                raise self._lost_error(cur, run_id)

    def release_lease(self, run_id: str, holder: Holder) -> bool:
        """Give the run up (only if `holder` still holds it); True when a lease was released."""
        with self.db.tx(write=True) as cur:
            cur.execute(self.db.q("DELETE FROM leases WHERE run_id = ? AND owner = ?"), (run_id, holder.owner))
            return bool(cur.rowcount == 1)

    def lease(self, run_id: str) -> Lease | None:
        """The run's lease as it stands (None when nobody holds it); `live` says whether it still binds."""
        with self.db.tx(write=False) as cur:
            now = self.db.now(cur)
            row = self.db.one(cur, f"SELECT {_COLUMNS} FROM leases WHERE run_id = ?", (run_id,))
            return None if row is None else _lease(row, now)

    def leases(self) -> dict[str, Lease]:
        """Every lease in the store, by run id (a released lease is gone; an expired one stays until taken)."""
        with self.db.tx(write=False) as cur:
            now = self.db.now(cur)
            cur.execute(f"SELECT {_COLUMNS} FROM leases")
            return {row[0]: _lease(row, now) for row in cur.fetchall()}

    def leases_of(self, cur: Any, run_ids: list[str]) -> dict[str, Lease]:
        """The leases of these runs (inside the caller's transaction), by run id."""
        if not run_ids:
            return {}
        now = self.db.now(cur)
        found: dict[str, Lease] = {}
        for start in range(0, len(run_ids), 100):
            chunk = run_ids[start : start + 100]
            cur.execute(self.db.q(f"SELECT {_COLUMNS} FROM leases WHERE run_id IN ({', '.join('?' * len(chunk))})"), chunk)
            found.update((row[0], _lease(row, now)) for row in cur.fetchall())
        return found

    # --- holding: a lease kept alive for as long as this process runs the run ----------------

    def hold(self, run_id: str, *, on_lost: Callable[[LeaseLostError], None] | None = None) -> Lease:
        """Take the run's lease and keep it renewed (every third of the lease's life) until `let_go`; `LeaseHeldError` when another process has it.

        Holding a run this store holds already returns its lease.
        `on_lost` is called (from the heartbeat thread) if the lease is ever
        found taken by another process; the store's appends to the run are
        refused from then on.
        """
        with self._lock:
            if run_id in self._held:  # held already (the engine takes a resumed run before reading it)
                if on_lost is not None:
                    self._lost[run_id] = on_lost
                current = self.lease(run_id)
                if current is not None and current.owner == self._held[run_id].owner:
                    return current
                self._held.pop(run_id)
        holder = Holder.me()
        lease = self.acquire_lease(run_id, holder)
        self.keep(run_id, holder, on_lost)
        return lease

    def keep(self, run_id: str, holder: Holder, on_lost: Callable[[LeaseLostError], None] | None = None) -> None:
        """Keep the lease `holder` took on `run_id` renewed until `let_go`, as `hold` does (the run queue's claim takes it first)."""
        with self._lock:
            self._held[run_id] = holder
            if on_lost is not None:
                self._lost[run_id] = on_lost
            if self._heartbeat is None:
                self._heartbeat = _Heartbeat(self, self.lease_ttl / 3)

    def let_go(self, run_id: str) -> None:
        """Release the run's lease held with `hold` (a no-op when it is not held)."""
        with self._lock:
            holder = self._held.pop(run_id, None)
            self._lost.pop(run_id, None)
        if holder is not None:
            try:
                self.release_lease(run_id, holder)
            except StoreError as exc:  # it expires on its own
                log.warning("run %s: could not release its lease: %s", run_id, exc)

    def holding(self) -> list[str]:
        """The runs this store holds with `hold`."""
        with self._lock:
            return list(self._held)

    def beat(self) -> None:
        """Renew every held lease once (the heartbeat thread calls this): one transaction for them all, a hundred a statement.

        A worker holding hundreds of runs renews them in one commit per beat,
        not one each (measured in `benchmarks/fleet.py`: a renewal is a
        fraction of a millisecond of the database's time, and a fleet of
        10,000 runs at the default TTL would make 1,000 a second). A lease
        not renewed so is renewed alone, which names whoever took it.
        """
        with self._lock:
            held = list(self._held.items())
        if not held:
            return
        try:
            renewed = self._renew_all(held)
        except StoreError as exc:  # the store is down: the next beat tries again; the leases may expire meanwhile
            log.warning("could not renew the leases of %d run(s): %s", len(held), exc)
            return
        for run_id, holder in held:
            if run_id in renewed or self._held.get(run_id) is not holder:  # renewed, or let go meanwhile
                continue
            try:
                self.renew_lease(run_id, holder)
            except LeaseLostError as exc:
                with self._lock:
                    self._held.pop(run_id, None)
                    callback = self._lost.pop(run_id, None)
                log.error("run %s: %s", run_id, exc)
                if callback is not None:
                    callback(exc)
            except StoreError as exc:  # the store is down: the next beat tries again; the lease may expire meanwhile
                log.warning("run %s: could not renew its lease: %s", run_id, exc)

    def _renew_all(self, held: list[tuple[str, Holder]]) -> set[str]:
        """Move the expiry of every lease in `held` that its holder still holds; the runs renewed."""
        renewed: set[str] = set()
        with self.db.tx(write=True) as cur:
            now = self.db.now(cur)
            for start in range(0, len(held), 100):
                chunk = held[start : start + 100]
                marks = ", ".join("?" * len(chunk))
                cur.execute(
                    self.db.q(
                        f"UPDATE leases SET heartbeat_at = ?, expires_at = ? WHERE run_id IN ({marks}) AND owner IN ({marks}) RETURNING run_id"
                    ),
                    (now, now + self.lease_ttl, *(run_id for run_id, _ in chunk), *(holder.owner for _, holder in chunk)),
                )
                renewed.update(row[0] for row in cur.fetchall())
        return renewed

    def check_lease(self, cur: Any, run_id: str) -> None:
        """Inside an append's transaction: refuse to write a held run whose lease another process took."""
        holder = self._held.get(run_id)
        if holder is None:
            return
        row = self.db.one(cur, "SELECT owner FROM leases WHERE run_id = ?", (run_id,))
        if row is None or row[0] != holder.owner:
            raise self._lost_error(cur, run_id)

    def _lost_error(self, cur: Any, run_id: str) -> LeaseLostError:
        row = self.db.one(cur, f"SELECT {_COLUMNS} FROM leases WHERE run_id = ?", (run_id,))
        by = f"it is now held by {_lease(row, self.db.now(cur)).describe()}" if row is not None else "nobody holds it now"
        return LeaseLostError(
            f"this process lost run {run_id!r}: its lease expired (no heartbeat in {self.lease_ttl:g}s) and {by}",
            run_id=run_id,
            location=self.db.location,
        )

    def stop_heartbeat(self) -> None:
        with self._lock:
            beat, self._heartbeat = self._heartbeat, None
            held = list(self._held.items())
            self._held.clear()
            self._lost.clear()
        if beat is not None:
            beat.stop()
        for run_id, holder in held:  # closing the store gives its runs up
            with contextlib.suppress(StoreError):
                self.release_lease(run_id, holder)


def _row(run_id: str, holder: Holder, now: float, ttl: float) -> tuple[Any, ...]:
    return (run_id, holder.owner, holder.host, holder.pid, holder.machine, holder.started, holder.command, now, now, now + ttl)


class _Heartbeat:
    """A daemon thread that renews a store's held leases every `period` seconds."""

    def __init__(self, store: LeaseBook, period: float) -> None:
        self._store = store
        self._period = period
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"planexec lease heartbeat {store.db.location}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stopping.wait(self._period):
            self._store.beat()


@contextlib.contextmanager
def held(store: Holds, run_id: str) -> Iterator[Lease]:
    """Hold run `run_id` for the block's duration (for tools and tests: the engine holds through `record_run`)."""
    lease = store.hold(run_id)
    try:
        yield lease
    finally:
        store.let_go(run_id)
