"""MCP client: the configured servers' tools, offered to the agent as ``mcp_<server>_<tool>``."""

from lucidgate.gateway.mcp.manager import McpManager, ServerStatus, probe
from lucidgate.gateway.mcp.tools import McpTool, tool_name

__all__ = ["McpManager", "McpTool", "ServerStatus", "probe", "tool_name"]
