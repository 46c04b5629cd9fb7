"""The two ways to reach an MCP server: a process over stdio, or a streamable HTTP endpoint.

Owns `Transport` (what a connection holds of its server: the message streams
an `mcp.ClientSession` runs on, whether the server has ended, its process,
exit code and last lines on stderr), `open_transport` and `require_sdk`.

The stdio transport is ours, not the SDK's `stdio_client`: that one hides
its process, and the exit code of a server that died is what its step's
error names. The protocol stays the SDK's (`SessionMessage`, its JSON-RPC
message adapter, `get_default_environment`). The server starts in a session
of its own (a Ctrl-C meant for planexec does not reach it), with the SDK's
minimal environment plus the configured one; its stderr goes to the
``planexec.mcp`` logger at DEBUG, never to the terminal, and its last lines
are kept for error messages; a reply of many megabytes in one line is
joined once, not re-split per chunk. It stops as the MCP specification
says: stdin closed, then SIGTERM to its process group, then SIGKILL, each
after `STOP_GRACE`. The HTTP transport is the SDK's `streamable_http_client`.

The SDK (``pip install 'planexec[mcp]'``) is imported inside the functions
that use it, so planexec imports without it. Imports `config` and `errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from planexec.config import McpServerConfig
from planexec.errors import RegistryError

__all__ = ["INSTALL_HINT", "STOP_GRACE", "Transport", "open_transport", "require_sdk"]

log = logging.getLogger("planexec.mcp")

INSTALL_HINT = "MCP servers need the mcp SDK: pip install 'planexec[mcp]'"
STOP_GRACE = 2.0
"""Seconds a server has to exit once its stdin is closed, and again after SIGTERM (the SDK's own figures)."""
_TAIL = 20  # lines of a server's stderr kept for the message of its failure
_LONG_LINE = 64 * 1024  # a stderr "line" longer than this is logged in pieces, so a chatty server cannot grow it for ever


def require_sdk() -> None:
    """`RegistryError` with the install hint when the mcp SDK is missing."""
    try:
        import mcp  # noqa: F401  # the optional SDK, checked before a server starts
    except ImportError as exc:
        raise RegistryError(f"{INSTALL_HINT} ({exc})") from None


class Transport:
    """A live way to one server: `streams` for the session, `ended` set when the server closes its end.

    `process` is the server's process for stdio (None over HTTP); `stderr`
    keeps its last lines.
    """

    def __init__(self, name: str, ended: asyncio.Event) -> None:
        self.name = name
        self.ended = ended
        self.streams: tuple[Any, Any] = (None, None)
        self.process: Any = None
        self.stderr: deque[str] = deque(maxlen=_TAIL)
        self.said = 0  # lines the server has written to stderr so far

    @property
    def exit_code(self) -> int | None:
        """The process's exit code once it exited (negative: the signal that ended it); None while it runs, or over HTTP."""
        return self.process.returncode if self.process is not None else None

    async def wait_exit(self, seconds: float) -> int | None:
        """The exit code, waiting up to `seconds` for the process to be reaped (polled: see `_exited`)."""
        if self.process is not None:
            await _exited(self.process, seconds)
        return self.exit_code

    def last_words(self, *, since: int = 0, lines: int = 3) -> str:
        """The server's last lines on stderr, written after its first `since` lines, for an error message ('' when none)."""
        recent = list(self.stderr)[-min(lines, max(self.said - since, 0)) :] if self.said > since else []
        text = " | ".join(recent)
        return text if len(text) <= 500 else "…" + text[-499:]


@contextlib.asynccontextmanager
async def open_transport(name: str, config: McpServerConfig, ended: asyncio.Event) -> AsyncIterator[Transport]:
    """Start (stdio) or reach (HTTP) the server; on leaving, stop it. `ended` is set when the server closes its end."""
    require_sdk()
    opened = _http(name, config, ended) if config.url is not None else _stdio(name, config, ended)
    async with opened as transport:
        yield transport


@contextlib.asynccontextmanager
async def _http(name: str, config: McpServerConfig, ended: asyncio.Event) -> AsyncIterator[Transport]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    assert config.url is not None
    # the SDK's own defaults: 30 s to connect or send, 5 minutes to read (a server may hold a stream open)
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=dict(config.headers), timeout=timeout) as client,
        streamable_http_client(config.url, http_client=client) as streams,
    ):
        transport = Transport(name, ended)
        transport.streams = streams
        yield transport


@contextlib.asynccontextmanager
async def _stdio(name: str, config: McpServerConfig, ended: asyncio.Event) -> AsyncIterator[Transport]:
    import anyio
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    assert config.command is not None
    env = {**get_default_environment(), **config.env}
    process = await anyio.open_process([config.command, *config.args], env=env, cwd=config.cwd, start_new_session=True)
    pipe_in, pipe_out, pipe_err = process.stdin, process.stdout, process.stderr
    assert pipe_in is not None and pipe_out is not None and pipe_err is not None  # all three are pipes by default
    transport = Transport(name, ended)
    transport.process = process
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    transport.streams = (read_receive, write_send)

    async def stdout() -> None:
        try:
            async with read_send:
                try:
                    await _read_messages(pipe_out, read_send)
                finally:
                    ended.set()  # before the read stream closes: a call that fails on it finds the server ended
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # the session is gone, or our own stop closed the pipe

    async def stdin() -> None:
        try:
            async with write_receive:
                async for message in write_receive:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await pipe_in.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            ended.set()  # the server no longer reads: the session must see the end, not wait for a reply
            await read_send.aclose()

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(stdout)
            tasks.start_soon(stdin)
            tasks.start_soon(_read_stderr, pipe_err, transport)
            try:
                yield transport
            finally:
                with anyio.CancelScope(shield=True):  # the process must stop even when the caller is cancelled
                    await _stop(process)
                tasks.cancel_scope.cancel()
    finally:
        for stream in (read_send, read_receive, write_send, write_receive):
            stream.close()


async def _read_messages(pipe: Any, send: Any) -> None:
    """Each line of the server's stdout, parsed as a JSON-RPC message (or the parse error), to the session."""
    import mcp_types
    from mcp.shared.message import SessionMessage

    pending: list[bytes] = []
    async for chunk in pipe:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending.append(chunk[start:end])
            line = b"".join(pending)
            pending.clear()
            start = end + 1
            if line.strip():
                try:
                    item: Any = SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
                except ValueError as exc:  # the session reports it; the connection goes on
                    item = exc
                await send.send(item)
        if start < len(chunk):
            pending.append(chunk[start:])


async def _read_stderr(pipe: Any, transport: Transport) -> None:
    """The server's stderr, line by line, to the log and the transport's tail; read to the end so the server never blocks on it."""
    pending = b""
    with contextlib.suppress(Exception):  # a closed pipe at the end: nothing more to read
        async for chunk in pipe:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > _LONG_LINE:
                lines.append(pending)
                pending = b""
            for raw in lines:
                text = " ".join(raw.decode(errors="replace").split())  # a rich console's padding, collapsed
                if text:
                    transport.stderr.append(text[:1000])
                    transport.said += 1
                    log.debug("MCP server %s: %s", transport.name, text)


async def _stop(process: Any) -> None:
    """Close stdin, wait; SIGTERM the process group, wait; SIGKILL it, wait; then release the pipes."""
    with contextlib.suppress(Exception):
        await process.stdin.aclose()
    if not await _exited(process, STOP_GRACE):
        _signal(process, signal.SIGTERM)
        if not await _exited(process, STOP_GRACE):
            _signal(process, getattr(signal, "SIGKILL", signal.SIGTERM))
            if not await _exited(process, STOP_GRACE):
                log.warning("MCP server process %d did not stop after SIGKILL; left behind", process.pid)
    for pipe in (process.stdout, process.stderr):
        with contextlib.suppress(Exception):
            await pipe.aclose()
    with contextlib.suppress(Exception), _move_on(STOP_GRACE):  # reaps the process and closes its transport (no ResourceWarning)
        await process.wait()


def _signal(process: Any, sig: int) -> None:
    """Signal the server's whole process group (it was started in a session of its own), or the process on Windows."""
    try:
        if sys.platform == "win32":  # pragma: no cover
            process.kill()
        else:
            os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        pass


async def _exited(process: Any, seconds: float) -> bool:
    """True once the process has exited, polling for up to `seconds`.

    Polled, not `process.wait()`: on asyncio that also waits for the pipes to
    close, which a grandchild holding them delays for ever.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while process.returncode is None:
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _move_on(seconds: float) -> Any:
    import anyio

    return anyio.move_on_after(seconds)
