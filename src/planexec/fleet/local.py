"""The worker a face starts for a single-machine setup: a `QueueWorker` in a thread of its own, beside the face.

Owns `LocalWorker`. The web console and the MCP server submit approved
runs to the store's queue and never run one themselves; on one machine
nobody else may be there to take them, so the face starts one of these
(``planexec serve`` and ``planexec mcp`` do unless told ``--no-worker``,
leaving the runs to a ``planexec worker`` fleet). It runs the worker's
loop in its own thread and event loop, so a run's steps never hold up the
face's requests, and a face's event loop ending does not cut a run off:
`stop` releases the runs in hand at their next step boundary (within the
worker's grace), and the queue hands them to the next worker, as when a
fleet worker stops. A worker that fails (the store gone) says why in
`failed`; `notes` keeps its last lines for a face to show. Imports the
fleet's `worker`.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable

from planexec.fleet.worker import QueueWorker, WorkerReport

__all__ = ["LocalWorker"]

_NOTES = 50  # lines of the worker's notes kept


class LocalWorker:
    """A `QueueWorker` made by `make` (given the line sink) and served in a daemon thread until `stop`; `on_note` hears
    each line it says."""

    def __init__(
        self,
        make: Callable[[Callable[[str], None]], QueueWorker],
        *,
        name: str = "planexec local worker",
        on_note: Callable[[str], None] | None = None,
    ) -> None:
        self._make = make
        self._name = name
        self._on_note = on_note
        self.notes: collections.deque[str] = collections.deque(maxlen=_NOTES)
        self.report: WorkerReport | None = None
        self.failed: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: QueueWorker | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """True while the worker's thread serves."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start serving (once; again after `stop` it starts a new worker)."""
        with self._lock:
            if self.running:
                return
            self._ready.clear()
            self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
            self._thread.start()
        self._ready.wait(timeout=30)

    def _serve(self) -> None:
        try:
            worker = self._make(self._note)
        except Exception as exc:  # it cannot be made (the store cannot be opened): said, not raised in a face's thread
            self.failed = f"{type(exc).__name__}: {exc}"
            self._ready.set()
            return
        loop = asyncio.new_event_loop()
        self._loop, self._worker = loop, worker
        self._ready.set()
        try:
            self.report = loop.run_until_complete(worker.serve())
            self.failed = self.report.store_failed
        except Exception as exc:  # a bug in the loop itself: the face says so instead of waiting for runs that never start
            self.failed = f"{type(exc).__name__}: {exc}"
        finally:
            loop.close()
            self._loop = self._worker = None

    def _note(self, line: str) -> None:
        self.notes.append(line)
        if self._on_note is not None:
            self._on_note(line)

    def wake(self) -> None:
        """Claim at once (a run was just submitted or approved) instead of at the next poll."""
        loop, worker = self._loop, self._worker
        if loop is not None and worker is not None:
            try:
                loop.call_soon_threadsafe(worker.wake)
            except RuntimeError:  # its loop closed meanwhile
                pass

    def stop(self, *, timeout: float | None = None) -> WorkerReport | None:
        """Take no more runs, release the runs in hand at their next step boundary, and wait for the thread; what it did."""
        loop, worker, thread = self._loop, self._worker, self._thread
        if loop is not None and worker is not None:
            try:
                loop.call_soon_threadsafe(worker.stop)
            except RuntimeError:  # its loop closed meanwhile: it stopped on its own
                pass
        if thread is not None:
            thread.join(timeout)
        return self.report
