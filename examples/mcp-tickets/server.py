"""A small MCP ticket server for `mcp.call`, written with the `mcp` SDK (stdio).

    python3 server.py /var/lib/tickets

`create_ticket(title, key)` creates one ticket per idempotency key: a second call with the
same key returns the first ticket and creates nothing (the file `KEY.json`, written whole
and fsynced, then linked into place, is the ticket). `get_ticket(key)`, marked read-only, is
the check tool `mcp.call`'s recovery asks: `{"status": "completed", …}` when the ticket of
that key exists, `{"status": "absent"}` when it does not. A stdio server is stopped when its
session ends, so a call it did not finish never completes later: `absent` then is final.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

FOLDER = Path(sys.argv[1] if len(sys.argv) > 1 else "tickets")
KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

server = MCPServer("tickets")


def _path(key: str) -> Path:
    if not KEY.fullmatch(key):
        raise ValueError("the key is not an identifier")
    return FOLDER / f"{key}.json"


def _read(key: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = json.loads(_path(key).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return found


@server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
def create_ticket(title: str, key: str) -> dict[str, Any]:
    """Open a ticket; `key` makes a repeated call return the same ticket."""
    existing = _read(key)
    if existing is not None:
        return existing
    ticket = {"ticket": f"T-{key[-8:]}", "title": title, "key": key}
    FOLDER.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=FOLDER, delete=False, encoding="utf-8") as file:
        json.dump(ticket, file)
        file.flush()
        os.fsync(file.fileno())
    try:
        os.link(file.name, _path(key))  # never replaces a ticket another call made first
    except FileExistsError:
        pass
    finally:
        os.unlink(file.name)
    return _read(key) or ticket


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def get_ticket(key: str) -> dict[str, Any]:
    """Whether the ticket of `key` exists: the check `mcp.call`'s recovery calls."""
    found = _read(key)
    return {"status": "absent"} if found is None else {"status": "completed", **found}


if __name__ == "__main__":
    server.run("stdio")
