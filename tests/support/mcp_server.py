"""A small real MCP server for `mcp.call`'s tests, written with the `mcp` SDK.

Run as `python -m tests.support.mcp_server stdio FOLDER` or `… http FOLDER PORT`. Every call of
an effect tool appends `<tool> <key>` to `FOLDER/calls.txt` first (the server-side count the
tests read), then does what its name says. The variant in `FOLDER/variant` (read at start)
changes `create_ticket`'s input schema, standing for a server upgraded since an approval.
`get_ticket` is the read-only check: `completed` when a call of that key is in the file.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

FOLDER = Path(sys.argv[2])
CALLS = FOLDER / "calls.txt"
VARIANT = (FOLDER / "variant").read_text().strip() if (FOLDER / "variant").exists() else "1"

server = MCPServer("qinglong-test")


def _append(tool: str, key: str) -> None:
    with CALLS.open("a", encoding="utf-8") as file:
        file.write(f"{tool} {key}\n")
        file.flush()
        os.fsync(file.fileno())


def _note_environment() -> None:
    """What a stdio server was started with: the length of its secret (never the secret) and
    which of the daemon's own variables leaked in (none may)."""
    leaked = sorted(n for n in os.environ if n.startswith("QINGLONG_") or n == "MCP_TEST_TOKEN")
    noted = f"token={len(os.environ.get('TICKET_TOKEN', ''))} leaked={','.join(leaked)}\n"
    with (FOLDER / "environment.txt").open("a", encoding="utf-8") as file:
        file.write(noted)


def _called(key: str) -> bool:
    return CALLS.exists() and any(
        line.split(" ", 1)[1] == key for line in CALLS.read_text().splitlines() if " " in line
    )


if VARIANT == "1":

    @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    def create_ticket(title: str, key: str) -> dict[str, Any]:
        """Create a ticket keyed by `key`."""
        _append("create_ticket", key)
        if sys.argv[1] == "stdio":
            _note_environment()
        return {"ticket": f"T-{len(CALLS.read_text().splitlines())}", "title": title}

else:

    @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    def create_ticket(title: str, key: str, priority: int = 0) -> dict[str, Any]:
        """Create a ticket keyed by `key`, with a priority."""
        _append("create_ticket", key)
        return {"ticket": "T-x", "title": title, "priority": priority}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_ticket(key: str) -> dict[str, Any]:
    """Whether a call with this key happened."""
    return {"status": "completed" if _called(key) else "absent"}


@server.tool()
def refuse_ticket(title: str) -> str:
    """Always fails as a tool (isError: true)."""
    raise ValueError(f"no tickets for {title} today")


@server.tool()
async def hang(key: str) -> str:
    """Does its effect, then never answers."""
    _append("hang", key)
    await asyncio.sleep(3600)
    return "late"


@server.tool()
async def slow_ticket(key: str) -> str:
    """Does its effect, then answers half a second later (a window to kill the caller in)."""
    _append("slow_ticket", key)
    await asyncio.sleep(0.5)
    return "done"


@server.tool()
def crash(key: str) -> str:
    """Does its effect, then the server dies mid-call."""
    _append("crash", key)
    os._exit(3)


@server.tool()
def drop_stream(key: str) -> str:
    """Over HTTP the middleware below does its effect and closes the stream instead."""
    return "never reached over http"


@server.tool()
def big(size: int) -> str:
    """An answer of `size` characters."""
    return "x" * size


@server.tool()
async def flood(count: int, ctx: Context) -> str:
    """Floods the client with `count` log notifications, then answers."""
    for n in range(count):
        await ctx.info(f"notification {n}")
    return "flooded"


def _dropping(app: Any) -> Any:
    """ASGI middleware: a `tools/call` of `drop_stream` has its effect, then the connection
    is cut after the response started (the request was received; no answer arrives)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        token = dict(scope["headers"]).get(b"x-ticket-token", b"")
        with (FOLDER / "headers.txt").open("a", encoding="utf-8") as file:
            file.write(f"token={len(token)}\n")
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("method") == "tools/call":
            params = parsed.get("params") or {}
            if params.get("name") == "drop_stream":
                _append("drop_stream", str((params.get("arguments") or {}).get("key")))
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")],
                    }
                )
                await send({"type": "http.response.body", "body": b": x\n\n", "more_body": True})
                raise RuntimeError("the stream is cut")
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if delivered:
                message: dict[str, Any] = await receive()
                return message
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return wrapped


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        uvicorn.run(
            _dropping(server.streamable_http_app()),
            host="127.0.0.1",
            port=int(sys.argv[3]),
            log_level="critical",
        )
