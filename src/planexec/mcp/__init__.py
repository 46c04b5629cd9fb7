"""Tools from MCP servers: load them into a registry, and they plan, run and are recorded like any tool.

The servers come from ``[planexec.mcp.servers.NAME]`` in planexec.toml
(`Team` and the commands load them), or from Python::

    from planexec import Registry
    from planexec.mcp import McpServerConfig, load

    registry = Registry.default()
    servers = load(registry, {"time": McpServerConfig(command="mcp-server-time")})

Needs the mcp SDK (``pip install 'planexec[mcp]'``), imported only when a
server starts. `servers` (see `planexec.mcp.servers`) starts, restarts and
closes the sessions; `tools` makes their tools ours; `transport` reaches a
server over stdio or streamable HTTP; `testing` is a small server for tests.
"""

from planexec.config import McpServerConfig
from planexec.mcp.servers import McpServers
from planexec.mcp.tools import McpTool, hold_servers, load, servers_in, tool_name, tool_output

__all__ = ["McpServerConfig", "McpServers", "McpTool", "hold_servers", "load", "servers_in", "tool_name", "tool_output"]
