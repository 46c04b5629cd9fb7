"""planexec as an MCP server: other agents and editors plan goals, start runs, follow them and list approvals.

``planexec mcp`` (stdio) or ``planexec mcp --http`` (streamable HTTP on
loopback, behind a token) serves the tools of `server` over a `Service`
(`service`): a `Team` that plans and reviews, the run store, and a
`Launcher` (`launch`) that runs each approved plan in a process of its own
(``planexec resume``). What the tools answer is typed in `answers`; runs
and approvals are read back by `views`. A plan never runs before a person
(or a policy, which can only deny) decides: the calling model has no way to
approve (see `server`). Needs the ``mcp`` extra: ``pip install 'planexec[mcp]'``.
"""

from planexec.mcp_server.launch import Launcher
from planexec.mcp_server.server import build_server, serve_http, serve_stdio
from planexec.mcp_server.service import RequestError, Service

__all__ = ["Launcher", "RequestError", "Service", "build_server", "serve_http", "serve_stdio"]
