"""The bench's MCP server, written with the `mcp` SDK: one tool, `record`, over stdio.

Run as `python -m qinglong_dispatcher.bench.mcp_server FOLDER`; the replicas start one process
per session (each inspect and each execute). Each start appends a line to
`FOLDER/sessions.txt`; each call of `record` appends the idempotency key the dispatcher sends in
`_meta` to `FOLDER/calls.txt` (the server-side count the bench verifies). Only the bench's
`mixed_mcp` phase runs it, and only where the `[mcp]` extra is installed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

KEY_META = "io.qinglong/idempotencyKey"
"""`actions.mcp_call.client.KEY_META`, spelled again: the client is not this process's."""

FOLDER = Path(sys.argv[1])

server = MCPServer("qinglong-bench")


def _append(name: str, line: str) -> None:
    # One write of one short line in append mode: concurrent servers never interleave it.
    with (FOLDER / name).open("a", encoding="utf-8") as file:
        file.write(line + "\n")


@server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
def record(n: int, ctx: Context) -> dict[str, int]:
    """Record one call under the dispatcher's idempotency key."""
    meta = ctx.request_context.meta or {}
    _append("calls.txt", str(meta.get(KEY_META)))
    return {"recorded": n}


if __name__ == "__main__":
    _append("sessions.txt", str(os.getpid()))
    server.run("stdio")
