"""The MCP servers `mcp.call`'s tests configure: `tests.support.mcp_server` over stdio (a new
process per session) and over streamable HTTP on loopback (one process for a test), and the
servers file that names them."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOKEN_HEADER = "x-ticket-token"
ENV = {
    # Generous for a loaded machine (starting a Python server takes a second or more there);
    # connect, initialize, call and closing a stdio server fit in the execute timeout.
    "QINGLONG_LEASE_SECONDS": "14",
    "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "12",
}


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def http_server(folder: Path) -> Iterator[str]:
    """The test server over streamable HTTP on loopback; its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.mcp_server", "http", str(folder), str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert process.poll() is None, "the MCP test server did not start"
            assert time.monotonic() < deadline, "the MCP test server never listened"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=10)


def stdio_command(folder: Path) -> list[str]:
    """The argv of the test server over stdio."""
    return [sys.executable, "-m", "tests.support.mcp_server", "stdio", str(folder)]


def servers_file(
    folder: Path, url: str | None, *, call_timeout: float = 2.0, also: tuple[str, ...] = ()
) -> Path:
    """A servers file (its timeouts, 0.5 + 4 + `call_timeout` + 4.5 to close, need an execute
    timeout of 12 s: `ENV`): `tickets` (stdio, with checks), `plain` (stdio, none), and `remote`
    (the HTTP server at `url`, a header secret by reference, with checks); each name in `also`
    is another `tickets` (a server is a target: calls to one name run one at a time)."""

    def s(value: object) -> str:
        return json.dumps(value)  # ASCII JSON is TOML

    timeouts = (
        f"connect_timeout_seconds = 0.5\ninitialize_timeout_seconds = 4\n"
        f"call_timeout_seconds = {call_timeout}\n"
    )
    keyed = '{ tool = "get_ticket", call_key_argument = "key" }'
    text = "".join(
        f"""
[servers.{name}]
command = {s(stdio_command(folder))}
cwd = {s(str(ROOT))}
env_secrets = {{ TICKET_TOKEN = "env:MCP_TEST_TOKEN" }}
tools = ["create_ticket", "get_ticket", "refuse_ticket", "hang", "crash", "big",
         "slow_ticket", "flood", "nope*"]
max_output_bytes = 4096
{timeouts}
[servers.{name}.checks]
create_ticket = {keyed}
hang = {keyed}
crash = {keyed}
slow_ticket = {keyed}
"""
        for name in ("tickets", *also)
    )
    text += f"""
[servers.plain]
command = {s(stdio_command(folder))}
cwd = {s(str(ROOT))}
tools = ["hang"]
{timeouts}
"""
    if url is not None:
        text += f"""
[servers.remote]
url = {s(url)}
header_secrets = {{ {TOKEN_HEADER} = "env:MCP_TEST_TOKEN" }}
tools = ["create_ticket", "drop_stream"]
{timeouts}
[servers.remote.checks]
create_ticket = {keyed}
drop_stream = {keyed}
"""
    path = folder / "mcp-servers.toml"
    path.write_text(text, encoding="utf-8")
    return path


def calls(folder: Path) -> list[str]:
    """Every call the servers received, as `<tool> <key>` lines, in order."""
    ledger = folder / "calls.txt"
    return ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []
