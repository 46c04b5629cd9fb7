"""A small MCP server for tests, ours and yours: tools that answer, fail, hang, flood and die.

Run it with ``python -m planexec.mcp.testing`` (stdio) or
``python -m planexec.mcp.testing --http PORT`` (streamable HTTP at
``http://127.0.0.1:PORT/mcp``); `stdio_config` and `http_config` give the
`McpServerConfig` for each. Its tools (`build_server` makes them):

- ``echo(text)``: the text (read-only, idempotent); ``pid()``: the server's
  process id, which changes when it was started again;
- ``boom(message)``: raises, so the answer is an error;
- ``hang(seconds)``: blocks, answering nothing for that long;
- ``flood(megabytes)``: that many megabytes of text;
- ``die(code)``: writes a last line on stderr, then exits with `code`
  at once (``os._exit``);
- ``remove(path)``: deletes a file (destructive: its step waits for approval).

The SDK is imported when the server is built, so this module imports
without it. Imports `config`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from planexec.config import McpServerConfig

__all__ = ["build_server", "http_config", "main", "stdio_config"]


def stdio_config(**options: Any) -> McpServerConfig:
    """The test server as a stdio server (this interpreter runs it); `options` are more `McpServerConfig` fields."""
    return McpServerConfig(command=sys.executable, args=["-m", "planexec.mcp.testing"], **options)


def http_config(port: int, **options: Any) -> McpServerConfig:
    """The test server as a streamable HTTP server already listening on 127.0.0.1:`port`."""
    return McpServerConfig(url=f"http://127.0.0.1:{port}/mcp", **options)


def build_server() -> Any:
    """The server (an `mcp.server.mcpserver.MCPServer`) with the tools the module docstring lists."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer("planexec-test", log_level="WARNING")
    safe = ToolAnnotations(read_only_hint=True, idempotent_hint=True)

    @server.tool(annotations=safe)
    def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool(annotations=safe)
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def boom(message: str = "boom") -> str:
        """Fail with the message."""
        raise ValueError(message)

    @server.tool()
    def hang(seconds: float = 3600.0) -> str:
        """Answer nothing for that many seconds (blocking: like a stuck tool)."""
        time.sleep(seconds)
        return "woke up"

    @server.tool()
    def flood(megabytes: float = 50.0) -> str:
        """That many megabytes of text."""
        return "x" * int(megabytes * 1024 * 1024)

    @server.tool()
    def die(code: int = 1) -> str:
        """Exit the server at once with `code`, after a last line on stderr."""
        print(f"test server: dying with code {code}", file=sys.stderr, flush=True)
        os._exit(code)

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def remove(path: str) -> str:
        """Delete a file."""
        Path(path).unlink()
        return f"removed {path}"

    return server


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio, or over streamable HTTP on 127.0.0.1 with ``--http PORT``."""
    parser = argparse.ArgumentParser(prog="python -m planexec.mcp.testing", description="planexec's MCP test server")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    args = parser.parse_args(argv)
    server = build_server()
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
