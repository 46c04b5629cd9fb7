"""MCP servers by name: one session each, started when first needed, restarted after a failure, closed with the runs.

Owns `McpServers`: the servers of one registry, each a `McpServerConfig`.
`list_tools` and `call` start a server's session when it has none (and
again after it failed); `hold(run)` keeps them open while a run lasts, and
the end of the last run holding them closes them all (the next call starts
them again); `close` closes them at once; `running` names those with a live
session. A process that exits on its own while idle is noticed and started
again on the next call.

Failures are `ToolError`s naming the server and the tool (`RegistryError`
when listing): a server that cannot start, a call the server refused, a
server that exited during a call ("exited (code N)", with its last words
on stderr), a call past the server's `timeout`. A call cancelled from
outside (its step's timeout, a cancelled run) closes the session too, since
a server may be stuck in it: every failure but a refused call leaves the
next call a new session. Calls in flight on a session that closes fail,
saying why.

Why a thread of its own: a session is an anyio task group, entered and
left by one task, and it must outlive any one event loop (the tools are
listed when the registry is built, before or inside a caller's loop, and
`run_sync` gives each run a new loop). Every session of the process lives
in one daemon thread's event loop (`_McpLoop`); a call from any loop
crosses over with `asyncio.run_coroutine_threadsafe`, and cancelling the
caller cancels the call there. At exit, the servers still open are closed.

Imports `config`, `errors` and `mcp.transport`.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
import weakref
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from planexec.config import McpServerConfig
from planexec.errors import RegistryError, ToolError
from planexec.mcp.transport import STOP_GRACE, Transport, open_transport

__all__ = ["McpServers"]

log = logging.getLogger("planexec.mcp")

T = TypeVar("T")

_CLOSE_WAIT = 4 * STOP_GRACE + 2  # stdin, SIGTERM and SIGKILL each get STOP_GRACE, plus the pipes


class _McpLoop:
    """The daemon thread whose event loop holds every MCP session of the process, started on first use."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        """The loop, started when there is none."""
        with cls._lock:
            if cls._loop is None or cls._thread is None or not cls._thread.is_alive():
                loop = asyncio.new_event_loop()
                cls._thread = threading.Thread(target=loop.run_forever, name="planexec-mcp", daemon=True)
                cls._thread.start()
                cls._loop = loop
            return cls._loop

    @classmethod
    def inside(cls) -> bool:
        """True when called from the loop's own thread (where waiting for it would deadlock)."""
        return threading.current_thread() is cls._thread

    @classmethod
    def submit(cls, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coro` in the loop; its future, which a caller may wait for or cancel."""
        return asyncio.run_coroutine_threadsafe(coro, cls.get())

    @classmethod
    def wait(cls, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run `coro` in the loop and wait for its result (from any thread but the loop's)."""
        if cls.inside():
            coro.close()
            raise RuntimeError("cannot wait for the MCP loop from inside it")
        future = cls.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g}s") from None


class _Connection:
    """One session with one server, owned by one task of the MCP loop from its start to its close."""

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self.config = config
        self.session: Any = None
        self.transport: Transport | None = None
        self.dropped: str | None = None  # why we closed it: a call that failed or was cancelled, the runs' end
        self._wake = asyncio.Event()  # set by the transport when the server ends, or by `drop`
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # read here too: when the call that waited for the start was cancelled, no one else reads its failure
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._task = asyncio.create_task(self._own(), name=f"planexec-mcp-{name}")

    @property
    def alive(self) -> bool:
        """True while the session may take calls: not dropped, its server not ended."""
        return self.dropped is None and not self._wake.is_set() and not self._task.done()

    async def ready(self) -> Any:
        """The session once the handshake is done; what went wrong otherwise."""
        await asyncio.shield(self._ready)
        return self.session

    def drop(self, reason: str) -> None:
        """Close the session (its server stops); calls in flight on it fail."""
        if self.dropped is None:
            self.dropped = reason
            log.debug("MCP server %s: closing (%s)", self.name, reason)
        self._wake.set()

    async def closed(self) -> None:
        """Wait (bounded) until the session and its server are gone."""
        await asyncio.wait({self._task}, timeout=_CLOSE_WAIT)

    async def _own(self) -> None:
        import anyio
        from mcp import ClientSession

        try:
            async with open_transport(self.name, self.config, self._wake) as transport:
                self.transport = transport
                read, write = transport.streams
                async with ClientSession(read, write, logging_callback=self._server_log) as session:
                    with anyio.fail_after(self.config.start_timeout):
                        await session.initialize()
                    self.session = session
                    self._ready.set_result(None)
                    await self._wake.wait()
        except Exception as exc:  # delivered to whoever waits for the session; logged once it had started
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:
                log.debug("MCP server %s: session ended with %s: %s", self.name, type(exc).__name__, exc)
        finally:
            self._wake.set()
            if not self._ready.done():  # cancelled before the handshake
                self._ready.set_exception(ConnectionError("closed before it started"))

    async def _server_log(self, params: Any) -> None:
        """A log message the server sends over MCP: to the ``planexec.mcp`` logger, like its stderr."""
        log.debug("MCP server %s [%s]: %s", self.name, getattr(params, "level", "?"), getattr(params, "data", params))

    def describe_start(self) -> str:
        """How the server is reached, for an error message."""
        if self.config.url is not None:
            return f"at {self.config.url}"
        return "with " + " ".join([self.config.command or "", *self.config.args]).strip()


class McpServers:
    """Named MCP servers and their sessions; see the module docstring."""

    def __init__(self, servers: Mapping[str, McpServerConfig]) -> None:
        self.configs: dict[str, McpServerConfig] = dict(servers)
        self._connections: dict[str, _Connection] = {}  # read and written in the MCP loop only
        self._lock = threading.Lock()
        self._holds = 0
        self._cancelled: set[str] = set()  # servers a call on which was cancelled: their session is replaced
        _OPEN.add(self)

    def __repr__(self) -> str:
        return f"McpServers({sorted(self.configs)!r})"

    # --- from any thread or loop -----------------------------------------------------------------

    def list_tools(self, server: str) -> list[Any]:
        """The server's tools (the SDK's `Tool` records), starting it if needed; `RegistryError` when it cannot answer."""
        config = self._config(server)
        try:
            return _McpLoop.wait(self._list(server), timeout=2 * config.start_timeout + _CLOSE_WAIT)
        except TimeoutError:
            raise RegistryError(f"MCP server {server!r} did not list its tools within {2 * config.start_timeout:g}s", name=server) from None

    async def call(self, server: str, tool: str, arguments: dict[str, Any], *, name: str) -> Any:
        """Call `tool` on `server` with `arguments`; the SDK's `CallToolResult`. `name` is the planexec tool's, for errors."""
        self._config(server)
        future = _McpLoop.submit(self._call(server, tool, arguments, name))
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # marked here, at once: the cancellation reaches the MCP loop later, maybe after this caller's next call
            with self._lock:
                self._cancelled.add(server)
            raise

    def hold(self, run: Any) -> None:
        """Keep the servers open until `run` (anything with ``subscribe``) emits ``run_finished``; the last run's end closes them."""
        with self._lock:
            self._holds += 1
        released = threading.Event()

        def on_event(event: Any) -> None:
            if getattr(event, "type", None) == "run_finished" and not released.is_set():
                released.set()
                self._release()

        run.subscribe(on_event)

    def close(self) -> None:
        """Close every session now and wait for the servers to stop (from any thread but the MCP loop's)."""
        if self._connections:
            _McpLoop.wait(self._close_all("closed"), timeout=_CLOSE_WAIT + 1)

    async def aclose(self) -> None:
        """`close` for async code."""
        if self._connections:
            await asyncio.wrap_future(_McpLoop.submit(self._close_all("closed")))

    def running(self) -> list[str]:
        """The servers with a live session, by name."""
        return sorted(name for name, c in list(self._connections.items()) if c.alive)

    def _config(self, server: str) -> McpServerConfig:
        try:
            return self.configs[server]
        except KeyError:
            raise RegistryError(f"no MCP server {server!r}; known: {', '.join(sorted(self.configs)) or 'none'}", name=server) from None

    def _release(self) -> None:
        with self._lock:
            self._holds -= 1
            last = self._holds <= 0
            self._holds = max(self._holds, 0)
        if last:
            _McpLoop.submit(self._close_all("the last run using it ended"))

    # --- in the MCP loop ---------------------------------------------------------------------------

    async def _connect(self, server: str, *, tool: str | None) -> _Connection:
        """The server's live connection, started when there is none; an error naming the server (and `tool`) otherwise."""
        conn = self._connections.get(server)
        with self._lock:
            cancelled = server in self._cancelled
            self._cancelled.discard(server)
        if conn is not None and cancelled:
            conn.drop("a call on it was cancelled")
        if conn is None or not conn.alive:
            if conn is not None:
                conn.drop("replaced")
            conn = self._connections[server] = _Connection(server, self.configs[server])
        try:
            await conn.ready()
        except Exception as exc:
            if self._connections.get(server) is conn:
                del self._connections[server]
            conn.drop("it did not start")
            reason = _reason(exc, conn)
            message = f"cannot start MCP server {server!r} ({conn.describe_start()}): {reason}"
            if tool is None:
                raise RegistryError(message, name=server) from None
            raise ToolError(message, tool=tool) from None
        return conn

    async def _list(self, server: str) -> list[Any]:
        conn = await self._connect(server, tool=None)
        tools: list[Any] = []
        cursor = None
        try:
            with _timeout(self.configs[server].start_timeout):
                while True:
                    params = _page(cursor)
                    listing = await conn.session.list_tools(params=params)
                    tools.extend(listing.tools)
                    cursor = listing.next_cursor
                    if not cursor:
                        return tools
        except Exception as exc:
            conn.drop("listing its tools failed")
            raise RegistryError(f"MCP server {server!r} did not list its tools: {_reason(exc, conn)}", name=server) from None

    async def _call(self, server: str, tool: str, arguments: dict[str, Any], name: str) -> Any:
        conn = await self._connect(server, tool=name)
        timeout = self.configs[server].timeout
        said = conn.transport.said if conn.transport is not None else 0
        try:
            with _timeout(timeout):
                return await conn.session.call_tool(tool, arguments)
        except asyncio.CancelledError:
            conn.drop(f"a call of {tool!r} was cancelled")
            raise
        except TimeoutError:
            conn.drop(f"{tool!r} did not answer within {timeout:g}s")
            raise ToolError(
                f"MCP server {server!r} did not answer {tool!r} within {timeout:g}s; it was stopped and starts again for the next call",
                tool=name,
            ) from None
        except Exception as exc:
            raise await self._failure(conn, tool, name, exc, said) from None

    async def _failure(self, conn: _Connection, tool: str, name: str, exc: Exception, said: int) -> ToolError:
        """The error a failed call raises: the server ended, it was closed meanwhile, it refused the call, or its answer is unusable."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        server = conn.name
        if conn.dropped is not None:
            return ToolError(f"MCP server {server!r} was closed while {tool!r} ran ({conn.dropped})", tool=name)
        transport = conn.transport
        lost = isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED
        if transport is not None and (transport.ended.is_set() or lost):
            conn.drop("it ended")
            code = await transport.wait_exit(STOP_GRACE)
            how = f"exited (code {code})" if code is not None else "closed its connection"
            words = transport.last_words(since=said)
            return ToolError(
                f"MCP server {server!r} {how} during {tool!r}{f'; its last words on stderr: {words}' if words else ''}; "
                "it starts again for the next call",
                tool=name,
            )
        if isinstance(exc, MCPError):  # a JSON-RPC error answer: the session is fine
            return ToolError(f"MCP server {server!r} refused {tool!r}: {exc}", tool=name)
        if isinstance(exc, RuntimeError | ValueError):  # the SDK rejects the answer (its output schema, its shape)
            return ToolError(f"MCP server {server!r} answered {tool!r} with a result that cannot be used: {exc}", tool=name)
        conn.drop(f"{tool!r} failed")
        return ToolError(f"MCP server {server!r} failed on {tool!r}: {_reason(exc, conn)}", tool=name)

    async def _close_all(self, reason: str) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        for conn in connections:
            conn.drop(reason)
        await asyncio.gather(*(conn.closed() for conn in connections))


def _reason(exc: BaseException, conn: _Connection) -> str:
    """An exception as a short reason, with the server's last words on stderr when it said something."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        text = f"no answer within {conn.config.start_timeout:g}s"
    elif isinstance(exc, BaseExceptionGroup):  # anyio's task groups wrap what went wrong inside them
        text = "; ".join(_reason(e, conn) for e in exc.exceptions)
    said = conn.transport.last_words() if conn.transport is not None else ""
    return f"{text}; its last words on stderr: {said}" if said and said not in text else text


def _timeout(seconds: float | None) -> Any:
    """An anyio deadline (None: none); anyio's, so the SDK's own scopes inside it are cancelled cleanly."""
    import anyio

    return anyio.fail_after(seconds)


def _page(cursor: str | None) -> Any:
    import mcp_types

    return mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None


_OPEN: weakref.WeakSet[McpServers] = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    """Stop every server still open when the interpreter exits (the MCP thread is a daemon and stops with it)."""
    for servers in list(_OPEN):
        try:
            servers.close()
        except Exception:  # exiting anyway: a server that does not stop in time is left to its session's end
            pass
