"""`mcp.call`'s own settings: the operator's MCP servers file."""

from __future__ import annotations

from pydantic import Field

from qinglong_dispatcher.actions import settings


class McpCallSettings(settings.ActionSettings):
    """Read like the global settings (`QINGLONG_MCP_SERVERS_FILE`, `mcp_servers_file`)."""

    mcp_servers_file: settings.RegularFile | None = Field(
        None,
        description="mcp.call: the TOML file of MCP servers a plan may name (none: the "
        "action has no handler)",
    )
