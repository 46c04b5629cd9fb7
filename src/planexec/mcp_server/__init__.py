"""planexec as an MCP server: other agents and editors plan goals, submit runs, follow them and list approvals.

``planexec mcp`` (stdio) or ``planexec mcp --http`` (streamable HTTP on
loopback, behind a token) serves the tools of `server` over a `Service`
(`service`): a `Team` that plans, reviews and submits each plan to the run
store's queue, and the worker that runs approved runs from it (one in a
thread of the server's process, `planexec.fleet.local`, unless
``--no-worker`` leaves them to a ``planexec worker`` fleet). What the tools
answer is typed in `answers`; runs and approvals are read back by `views`.
A plan never runs before a person (or a policy, which can only deny)
decides: the calling model has no way to approve (see `server`). Needs the
``mcp`` extra: ``pip install 'planexec[mcp]'`` for the server; `Service`
needs none, so the A2A face (`planexec.a2a_server`) shares it without the
MCP SDK: the server's names are imported when first asked for.
"""

from typing import TYPE_CHECKING, Any

from planexec.mcp_server.service import RequestError, Service

if TYPE_CHECKING:
    from planexec.mcp_server.server import build_server, serve_http, serve_stdio

_SERVER = ("build_server", "serve_http", "serve_stdio")


def __getattr__(name: str) -> Any:
    """The server's names, imported on first use (they need the mcp SDK, an optional dependency)."""
    if name in _SERVER:
        from planexec.mcp_server import server

        return getattr(server, name)
    raise AttributeError(f"module 'planexec.mcp_server' has no attribute {name!r}")


__all__ = ["RequestError", "Service", "build_server", "serve_http", "serve_stdio"]
