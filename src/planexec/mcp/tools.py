"""MCP tools as planexec tools: listed from their servers, registered, called, their results made data.

Owns `McpTool` (a `Tool` whose handler calls one tool of one server),
`load` (list each server's tools, keep those in its ``tools`` allow-list,
register them), `tool_output` (a result as JSON data), `tool_name` and
`servers_in` / `hold_servers` (a run keeps the servers its registry's tools
use open until it ends).

An MCP tool becomes a planexec tool named ``SERVER__TOOL`` (model APIs allow
letters, digits, ``_`` and ``-`` in a tool's name, not dots; any other
character becomes ``_``), with the server's input schema as its schema, so
the planner's catalogue and the validator read it like any tool's. Its
annotations, which are the server's own claims, map onto ours:
``readOnlyHint`` → `read_only`, ``idempotentHint`` → `idempotent`,
``destructiveHint`` (when not read-only) → `requires_approval`,
``openWorldHint`` → `network` (true when absent, as the MCP specification
says), so its arguments that name a destination are sensitive. Its output is
always `untrusted_output`: it comes from outside. From there a call goes
through the same capabilities, policies, approvals, provenance, timeouts,
output bounds and usage as a local tool's.

A result is its ``structuredContent`` when it has one, else the text of
its one text block, else its content blocks as JSON; a result marked
``isError`` is a `ToolError` naming the server and the tool.
Imports `config`, `errors`, `workers` and `mcp.servers`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from planexec.config import McpServerConfig
from planexec.errors import RegistryError, ToolError
from planexec.mcp.servers import McpServers
from planexec.workers.registry import Registry
from planexec.workers.tools import Tool

__all__ = ["McpTool", "Subscribable", "hold_servers", "load", "servers_in", "tool_name", "tool_output"]


class Subscribable(Protocol):
    """A run, as `hold_servers` sees it: it calls back with each of its events."""

    def subscribe(self, callback: Callable[[Any], None]) -> None:
        """Call `callback(event)` for every later event."""
        ...


R = TypeVar("R", bound=Subscribable)

SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_ERROR_TEXT = 2000  # characters of a tool's error text kept in the step's error


def tool_name(server: str, tool: str) -> str:
    """The planexec name of `tool` on `server`: ``server__tool``, other characters than letters, digits, _ and - made _."""
    return f"{server}{SEPARATOR}{_UNSAFE.sub('_', tool)}"


class McpTool(Tool):
    """A tool of an MCP server: `server`, `mcp_name` (its name there) and the `servers` that call it."""

    def __init__(self, servers: McpServers, server: str, spec: Any) -> None:
        self.servers = servers
        self.server = server
        self.mcp_name: str = spec.name
        name = tool_name(server, spec.name)
        hints = spec.annotations
        read_only = bool(hints is not None and hints.read_only_hint)
        schema = dict(spec.input_schema or {"type": "object"})

        async def call_mcp_tool(**arguments: Any) -> Any:
            result = await servers.call(server, spec.name, arguments, name=name)
            return tool_output(result, server=server, tool=spec.name, name=name)

        super().__init__(
            call_mcp_tool,
            name=name,
            description=(spec.description or spec.title or "").strip(),
            idempotent=bool(hints is not None and hints.idempotent_hint),
            read_only=read_only,
            requires_approval=bool(hints is not None and hints.destructive_hint and not read_only),
            untrusted_output=True,  # whatever the server says of it: it comes from outside
            network=hints is None or hints.open_world_hint is None or bool(hints.open_world_hint),  # the spec's default: open
            input_schema=schema,
        )

    def __repr__(self) -> str:
        return f"McpTool({self.name!r})"


def tool_output(result: Any, *, server: str, tool: str, name: str) -> Any:
    """A `CallToolResult` as JSON data (see the module docstring); `ToolError` when it says ``isError``."""
    content = list(getattr(result, "content", None) or [])
    if getattr(result, "is_error", False):
        text = " ".join(str(getattr(block, "text", "")) for block in content).strip() or "no message"
        if len(text) > _ERROR_TEXT:
            text = text[:_ERROR_TEXT] + f"… ({len(text):,} characters)"
        raise ToolError(f"MCP server {server!r}: tool {tool!r} failed: {text}", tool=name)
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return structured
    if len(content) == 1 and getattr(content[0], "type", None) == "text":
        return content[0].text
    return [block.text if getattr(block, "type", None) == "text" else _block(block) for block in content]


def _block(block: Any) -> Any:
    """A non-text content block (an image, a resource ...) as its JSON form."""
    dump = getattr(block, "model_dump", None)
    return dump(mode="json", by_alias=True, exclude_none=True) if callable(dump) else str(block)


def load(registry: Registry, servers: Mapping[str, McpServerConfig] | McpServers) -> McpServers:
    """Register the tools of each server (its ``tools`` allow-list, or all) in `registry`; returns the `McpServers`.

    Each server is started to list its tools and stays open for the calls
    to come (a run that `hold_servers` closes it when it ends; the next call
    starts it again). `RegistryError` names a server that cannot start, a
    tool of an allow-list it does not have, or a name already taken; the
    servers started so far are closed then.
    """
    pool = servers if isinstance(servers, McpServers) else McpServers(servers)
    try:
        for server, config in pool.configs.items():
            for tool in _allowed(server, config, pool.list_tools(server)):
                registry.add_tool(McpTool(pool, server, tool))
    except Exception:
        pool.close()
        raise
    return pool


def _allowed(server: str, config: McpServerConfig, listed: list[Any]) -> list[Any]:
    if config.tools is None:
        return listed
    names = {t.name for t in listed}
    missing = [t for t in config.tools if t not in names]
    if missing:
        raise RegistryError(
            f"MCP server {server!r} has no tool {', '.join(map(repr, missing))} (it has: {', '.join(sorted(names)) or 'none'})",
            name=server,
        )
    return [t for t in listed if t.name in config.tools]


def servers_in(tools: Registry | Iterable[Tool]) -> list[McpServers]:
    """The `McpServers` behind the MCP tools of a registry (or of some tools), each once."""
    found = tools.tools.values() if isinstance(tools, Registry) else tools
    return list({id(t.servers): t.servers for t in found if isinstance(t, McpTool)}.values())


def hold_servers(registry: Registry, run: R) -> R:
    """Keep the MCP servers of `registry` open while `run` lasts (closed when the last run holding them ends); returns `run`."""
    for pool in servers_in(registry):
        pool.hold(run)
    return run
