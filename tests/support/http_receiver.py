"""A real idempotent HTTP receiver for the `http.request` tests: its own process, SQLite state.

`python tests/support/http_receiver.py --port 0 --state FILE` prints the bound port (and writes
it to `--port-file`). It follows the IETF httpapi idempotency-key-header draft; faults set by
`POST /_control/faults` or `--fault` break the answer around the commit. Only the standard
library and aiohttp are imported, so it runs by path as well as with `-m`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import hmac
import json
import os
import re
import signal
import sqlite3
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

EFFECT_METHODS = ("POST", "PUT", "PATCH", "DELETE")
FAULT_MODES = frozenset(
    {"drop_after_commit", "stall", "error_after_commit", "close_mid_body", "huge"}
    | {"error_before", "hold_in_flight", "status"}
)
HUGE_BYTES = 3 * 1024 * 1024
WEBHOOK_TOLERANCE_S = 300
PARENT_POLL_S = 0.2
SHUTDOWN_GRACE_S = 1.0
"""A stalled handler must not hold a stop for long: the tests stop and restart freely."""

_CHR = r'(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])'
_BARE_ITEM = (
    rf'(?:-?\d{{1,15}}(?:\.\d{{1,3}})?|"{_CHR}*"|[A-Za-z*][!#$%&\'*+\-.^_`|~0-9A-Za-z:/]*'
    r"|:[A-Za-z0-9+/=]*:|\?[01])"
)
_SF_STRING_ITEM = re.compile(rf' *"({_CHR}*)"((?:; *[a-z*][a-z0-9_\-.*]*(?:={_BARE_ITEM})?)*) *')
"""An RFC 8941 Item whose bare item is a String; its parameters are parsed and ignored."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (effect_id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL, method TEXT NOT NULL, path TEXT NOT NULL, body_sha256 TEXT NOT NULL,
    body_length INTEGER NOT NULL, executed_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS effects_by_key ON effects (key);
CREATE TABLE IF NOT EXISTS idempotency_keys (key TEXT PRIMARY KEY,
    status TEXT NOT NULL CHECK (status IN ('in_flight', 'completed')), method TEXT NOT NULL,
    path TEXT NOT NULL, body_sha256 TEXT NOT NULL, first_seen_at REAL NOT NULL,
    effect_id INTEGER REFERENCES effects (effect_id), response_status INTEGER,
    response_body BLOB);
"""


def parse_key(values: list[str]) -> str | None:
    """The key of the `Idempotency-Key` field lines (one sf-string, not empty), or None."""
    match = _SF_STRING_ITEM.fullmatch(values[0]) if len(values) == 1 else None
    if match is None or not match.group(1):
        return None
    return re.sub(r'\\(["\\])', r"\1", match.group(1))


Fingerprint = tuple[str, str, str]
"""Method, path with query, body SHA-256: what makes two requests with one key the same."""


@dataclasses.dataclass
class Fault:
    """An armed fault: the next `count` valid effect requests take it."""

    mode: str
    count: int = 1
    seconds: float = 0.0
    status: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Fault:
        """From the control JSON (or the `--fault*` flags); ValueError says what is wrong."""
        status = raw.get("status")
        fault = cls(raw["mode"], int(raw.get("count", 1)), float(raw.get("seconds", 0)), status)
        if fault.mode not in FAULT_MODES or fault.count < 1 or fault.seconds < 0:
            raise ValueError(f"mode in {sorted(FAULT_MODES)}, count >= 1 and seconds >= 0")
        if fault.mode == "status" and not (isinstance(status, int) and 200 <= status <= 599):
            raise ValueError("mode status needs a status from 200 to 599")
        return fault


class State:
    """The SQLite file: effects executed and keys seen, committed before any answer byte."""

    def __init__(self, path: Path, retention_s: float) -> None:
        self.retention_s = retention_s
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=10.0)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.executescript(SCHEMA)
        # An in-flight key left by a killed process executed nothing: the effect row and the
        # completion commit together. Forgetting it lets a retry execute, as the draft allows.
        self.conn.execute("DELETE FROM idempotency_keys WHERE status = 'in_flight'")

    @contextlib.contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        # BEGIN IMMEDIATE takes the write lock before the read: two requests with one key
        # cannot both see it absent, even from two processes on one file.
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _forget_expired(self, conn: sqlite3.Connection) -> None:
        conn.execute(
            "DELETE FROM idempotency_keys WHERE status = 'completed' AND first_seen_at <= ?",
            (time.time() - self.retention_s,),
        )

    def claim(self, key: str, fingerprint: Fingerprint) -> sqlite3.Row | None:
        """The key's existing row, or None after marking it in flight for this request."""
        with self._immediate() as conn:
            self._forget_expired(conn)
            row: sqlite3.Row | None = conn.execute(
                "SELECT *, (method, path, body_sha256) = (?, ?, ?) AS same"
                " FROM idempotency_keys WHERE key = ?",
                (*fingerprint, key),
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO idempotency_keys (key, status, method, path, body_sha256,"
                    " first_seen_at) VALUES (?, 'in_flight', ?, ?, ?, ?)",
                    (key, *fingerprint, time.time()),
                )
        return row

    def execute(self, key: str, fingerprint: Fingerprint, body_length: int) -> bytes:
        """Run the effect and store its 201 answer in one transaction; the answer's body."""
        with self._immediate() as conn:
            effect_id = conn.execute(
                "INSERT INTO effects (key, method, path, body_sha256, body_length, executed_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (key, *fingerprint, body_length, time.time()),
            ).lastrowid
            body = json.dumps({"effect_id": effect_id, "key": key}).encode()
            conn.execute(
                "UPDATE idempotency_keys SET status = 'completed', effect_id = ?,"
                " response_status = 201, response_body = ? WHERE key = ?",
                (effect_id, body, key),
            )
        return body

    def lookup(self, key: str) -> dict[str, Any] | None:
        """What `GET /idempotency/{key}` answers, or None for an unknown (or forgotten) key."""
        self._forget_expired(self.conn)
        columns = "key, status, response_status, body_sha256 AS body_digest, effect_id"
        sql = f"SELECT {columns} FROM idempotency_keys WHERE key = ?"
        row = self.conn.execute(sql, (key,)).fetchone()
        return None if row is None else dict(row)

    def effects(self) -> list[dict[str, Any]]:
        """Every effect row, oldest first."""
        return [dict(r) for r in self.conn.execute("SELECT * FROM effects ORDER BY effect_id")]


def problem(
    status: int, slug: str, title: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    """An RFC 9457 problem answer; `type` names the case so a test can tell two 400s apart."""
    body = {"type": f"https://receiver.invalid/problems/{slug}", "title": title, "status": status}
    kind = "application/problem+json"
    return web.Response(status=status, text=json.dumps(body), content_type=kind, headers=headers)


def webhook_refusal(secret: str, headers: Mapping[str, str], body: bytes) -> str | None:
    """Why a Standard Webhooks signature fails, or None when one `v1` signature matches."""
    msg_id, stamp, signatures = (
        headers.get(f"webhook-{n}", "") for n in ("id", "timestamp", "signature")
    )
    if not (msg_id and stamp and signatures):
        return "webhook-id, webhook-timestamp and webhook-signature are required"
    if not stamp.isdigit() or abs(time.time() - int(stamp)) > WEBHOOK_TOLERANCE_S:
        return "webhook-timestamp is not within five minutes of now"
    key = base64.b64decode(secret.strip().removeprefix("whsec_"), validate=True)
    signed = f"{msg_id}.{stamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
    for signature in signatures.split():
        version, _, value = signature.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected):
            return None
    return "no v1 signature matches"


class Receiver:
    """The routes, one instance per process: effects, the key lookup, and `/_control/` (test
    set-up, no auth: faults, the effect rows, health)."""

    def __init__(self, options: argparse.Namespace, state: State) -> None:
        self.options = options
        self.state = state
        self.fault: Fault | None = None
        if options.fault is not None:
            self.fault = Fault.parse(
                {"mode": options.fault, "count": options.fault_count}
                | {"seconds": options.fault_seconds, "status": options.fault_status}
            )

    def app(self) -> web.Application:
        """The aiohttp application serving these routes."""
        app = web.Application()
        for method in EFFECT_METHODS:
            app.router.add_route(method, "/effects/{tail:.+}", self._effect)
        app.router.add_get("/idempotency/{key:.+}", self._lookup)
        app.router.add_post("/_control/faults", self._set_fault)
        app.router.add_get("/_control/effects", self._effects)
        app.router.add_get("/_control/health", self._health)
        return app

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self.options.bearer_file is None:
            return None
        # Read on each request, so a test can rotate the token under a running receiver.
        token = self.options.bearer_file.read_text(encoding="utf-8").strip().encode()
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if token and scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token):
            return None
        challenge = {"WWW-Authenticate": "Bearer"}
        return problem(401, "unauthorized", "a bearer token is required", challenge)

    def _take_fault(self) -> Fault:
        taken = self.fault
        if taken is None:
            return Fault("none")
        taken.count -= 1
        if taken.count == 0:
            self.fault = None
        return taken

    async def _effect(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._unauthorized(request)) is not None:
            return refused
        body = await request.read()
        if self.options.webhook_secret_file is not None:
            secret = self.options.webhook_secret_file.read_text(encoding="utf-8")
            if (reason := webhook_refusal(secret, request.headers, body)) is not None:
                return problem(401, "webhook-signature", reason)
        values = request.headers.getall("Idempotency-Key", [])
        if not values:
            return problem(400, "idempotency-key-missing", "Idempotency-Key is missing")
        if (key := parse_key(values)) is None:
            return problem(400, "idempotency-key-malformed", "Idempotency-Key is not an sf-string")
        fault = self._take_fault()
        if fault.mode == "status" and fault.status is not None:
            return injected_status(fault.status)
        if fault.mode == "error_before":
            return problem(500, "injected-error-before", "injected failure, nothing executed")
        fingerprint = (request.method, request.raw_path, hashlib.sha256(body).hexdigest())
        existing = self.state.claim(key, fingerprint)
        if existing is None:
            try:
                if fault.mode == "hold_in_flight":
                    await asyncio.sleep(fault.seconds)
                answer = self.state.execute(key, fingerprint, len(body))
            except BaseException:  # nothing committed: a retry may execute
                self.state.conn.execute("DELETE FROM idempotency_keys WHERE key = ?", (key,))
                raise
            return await deliver(request, 201, answer, {}, fault)
        if not existing["same"]:
            return problem(422, "idempotency-key-reused", "Idempotency-Key is already used")
        if existing["status"] == "in_flight":
            return problem(409, "idempotency-key-in-flight", "the first request is in flight")
        replayed = {"Idempotency-Replayed": "true"}
        stored = bytes(existing["response_body"])
        return await deliver(request, existing["response_status"], stored, replayed, fault)

    async def _lookup(self, request: web.Request) -> web.Response:
        if (refused := self._unauthorized(request)) is not None:
            return refused
        found = self.state.lookup(request.match_info["key"])
        if found is None:
            return problem(404, "idempotency-key-unknown", "no such Idempotency-Key")
        return web.json_response(found)

    async def _set_fault(self, request: web.Request) -> web.Response:
        try:
            raw = await request.json()
            self.fault = None if raw.get("mode") == "none" else Fault.parse(raw)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return problem(400, "bad-fault", str(exc))
        return web.json_response(dataclasses.asdict(self.fault) if self.fault else None)

    async def _effects(self, request: web.Request) -> web.Response:
        return web.json_response(self.state.effects())

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "pid": os.getpid()})


def injected_status(status: int) -> web.Response:
    """The answer of the `status` fault: nothing executed, the code a test asked for."""
    if status in (204, 304):
        return web.Response(status=status)
    headers = {"Location": "/effects/redirected"} if 300 <= status < 400 else {}
    headers.update({"Retry-After": "1"} if status in (429, 503) else {})
    return problem(status, "injected-status", f"injected status {status}", headers)


async def deliver(
    request: web.Request, status: int, body: bytes, headers: Mapping[str, str], fault: Fault
) -> web.StreamResponse:
    """Send a JSON answer, broken as a delivery fault says (the commit is behind us)."""
    if fault.mode == "error_after_commit":
        return problem(500, "injected-error-after-commit", "injected failure after the commit")
    if fault.mode == "huge":
        padded = {**json.loads(body), "padding": ""}
        padded["padding"] = "x" * (HUGE_BYTES - len(json.dumps(padded).encode()))
        body, status = json.dumps(padded).encode(), 200
    response = web.StreamResponse(status=status, headers=headers)
    response.content_type, response.content_length = "application/json", len(body)
    if fault.mode == "stall":
        await asyncio.sleep(fault.seconds)
    # Closing the transport before the handler returns makes aiohttp's own write fail as a
    # client disconnection: nothing more reaches the client and nothing is logged as an error.
    transport = request.transport
    if transport is None or transport.is_closing() or fault.mode == "drop_after_commit":
        if transport is not None:
            transport.close()
        return response
    await response.prepare(request)
    if fault.mode == "close_mid_body":
        await response.write(body[: len(body) // 2])
        transport.close()
        return response
    await response.write(body)
    return response


def _watch_parent(loop: asyncio.AbstractEventLoop, parent_pid: int, stop: asyncio.Event) -> None:
    # Reparenting is how a dead parent shows: no orphan receiver outlives its test.
    if os.getppid() != parent_pid:
        stop.set()
    else:
        loop.call_later(PARENT_POLL_S, _watch_parent, loop, parent_pid, stop)


async def serve(options: argparse.Namespace) -> None:
    """Listen on 127.0.0.1 until SIGTERM, SIGINT or the parent's death."""
    state = State(options.state, options.key_retention_seconds)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    parent = options.parent_pid if options.parent_pid is not None else os.getppid()
    _watch_parent(loop, parent, stop)
    app = Receiver(options, state).app()
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", options.port)
        await site.start()
        port = runner.addresses[0][1]
        if options.port_file is not None:
            partial = options.port_file.with_name(options.port_file.name + ".partial")
            partial.write_text(f"{port}\n", encoding="ascii")
            os.replace(partial, options.port_file)  # a reader never sees half a number
        print(port, flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
        state.conn.close()


def main(argv: list[str] | None = None) -> None:
    """Parse the flags and serve until stopped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--state", type=Path, required=True, help="the SQLite file")
    parser.add_argument("--port-file", type=Path, help="also write the bound port here")
    parser.add_argument("--key-retention-seconds", type=float, default=86400.0)
    parser.add_argument("--bearer-file", type=Path, help="require this bearer token")
    parser.add_argument("--webhook-secret-file", type=Path, help="whsec_… to verify")
    parser.add_argument("--fault", choices=sorted(FAULT_MODES), help="armed at start")
    parser.add_argument("--fault-count", type=int, default=1)
    parser.add_argument("--fault-seconds", type=float, default=0.0)
    parser.add_argument("--fault-status", type=int)
    parser.add_argument("--parent-pid", type=int, help="exit once this is no longer the parent")
    asyncio.run(serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
