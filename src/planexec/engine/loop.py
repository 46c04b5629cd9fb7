"""Running a coroutine to completion without waiting for tasks that were abandoned.

Owns `run_to_end`, what every synchronous entry point (`Engine.run_sync`,
`Team.run_sync`, the commands) uses instead of `asyncio.run`. Both run the
coroutine in a new event loop and cancel what it left running; `asyncio.run`
then waits for those tasks for ever, so one tool that swallows its
cancellation (already recorded as abandoned by the run, see
`Attempts.abandon`) kept `run_sync` from returning and ``planexec run`` from
exiting. Here each leftover task is waited for at most the cancel grace, and
the loop closes without one that ignores it (a warning names it). Such a
task is kept for the life of the process, never destroyed: the garbage
collector would close its coroutine outside the task's context, and its
cleanup would fail noisily. Imports `engine.config`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import signal
import threading
from collections.abc import Coroutine, Iterator
from types import FrameType
from typing import Any, TypeVar

from planexec.engine.config import EngineConfig

__all__ = ["run_to_end"]

log = logging.getLogger("planexec.engine")

T = TypeVar("T")


def run_to_end(main: Coroutine[Any, Any, T], *, grace: float = EngineConfig.cancel_grace) -> T:
    """Run `main` in a new event loop and return its result, as `asyncio.run` does, but never hang on leftover tasks.

    Once `main` ends, every task it left running is cancelled and waited for
    at most `grace` seconds; a task that was already cancelled before `main`
    ended and still runs has ignored a cancellation once (the run gave it the
    cancel grace already) and is not waited for again. Tasks still running
    are left behind when the loop closes, named in a warning. Ctrl-C while
    `main` runs cancels it and raises `KeyboardInterrupt`, as with `asyncio.run`.
    """
    if not asyncio.iscoroutine(main):
        raise ValueError(f"a coroutine was expected, got {main!r}")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        main.close()
        raise RuntimeError("run_to_end() cannot be called from a running event loop")
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        task = loop.create_task(main)
        with _sigint_cancels(loop, task) as interrupted:
            try:
                return loop.run_until_complete(task)
            except asyncio.CancelledError:
                if interrupted() and task.uncancel() == 0:
                    raise KeyboardInterrupt from None
                raise
    finally:
        try:
            _stop_leftovers(loop, grace)
            loop.run_until_complete(loop.shutdown_asyncgens())
            _shutdown_executor(loop, grace)
        finally:
            asyncio.set_event_loop(None)
            loop.close()


@contextlib.contextmanager
def _sigint_cancels(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> Iterator[Any]:
    """While the main task runs, the first Ctrl-C cancels it and a second raises at once (`asyncio.Runner`'s rule)."""
    count = 0

    def interrupted() -> bool:
        return count > 0

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal count
        count += 1
        if count == 1 and not task.done():
            task.cancel()
            loop.call_soon_threadsafe(lambda: None)  # wake the loop up
            return
        raise KeyboardInterrupt()

    # only where Python's own handler is in place: a program that set its own keeps it
    ours = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if ours:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        yield interrupted
    finally:
        if ours and signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _stop_leftovers(loop: asyncio.AbstractEventLoop, grace: float) -> None:
    """Cancel the tasks still running; wait at most `grace` for those not cancelled before; name those that never stop."""
    leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not leftovers:
        return
    # a task already cancelled that still runs ignored it: whoever cancelled it gave it its grace
    fresh = [t for t in leftovers if t.cancelling() == 0]
    for t in leftovers:
        t.cancel()
    if fresh:
        loop.run_until_complete(asyncio.wait(fresh, timeout=grace))
    else:
        loop.run_until_complete(asyncio.sleep(0))  # one turn, so a task that does stop on cancellation does
    for t in leftovers:
        if t.done() and not t.cancelled() and t.exception() is not None:
            loop.call_exception_handler(
                {"message": "unhandled exception in a task cancelled at the end of the run", "exception": t.exception(), "task": t}
            )
    stuck = [t for t in leftovers if not t.done()]
    if stuck:
        for t in stuck:
            # never destroyed, not even at exit: a pending task's coroutine closed by the garbage collector runs
            # its cleanup outside the task's context (context variables fail to reset, the run logs an internal error)
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(t))
        names = ", ".join(f"{t.get_name()} ({getattr(t.get_coro(), '__qualname__', '?')})" for t in stuck)
        log.warning("%d task(s) ignored their cancellation and were abandoned when the event loop closed: %s", len(stuck), names)


def _shutdown_executor(loop: asyncio.AbstractEventLoop, grace: float) -> None:
    """Shut the default executor down, waiting at most `grace` for its threads (they are joined at exit regardless)."""
    try:
        loop.run_until_complete(asyncio.wait_for(loop.shutdown_default_executor(), grace))
    except TimeoutError:
        log.warning("the default executor's threads did not finish within %.1fs of the end of the run", grace)
