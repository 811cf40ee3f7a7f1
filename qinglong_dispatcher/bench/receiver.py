"""The bench's HTTP receiver, its own process: one stored answer per `Idempotency-Key`, in memory.

`python -m qinglong_dispatcher.bench.receiver --port-file FILE` listens on 127.0.0.1 (a free
port, written to FILE once it accepts) until SIGTERM, SIGINT or the death of its parent, so
no receiver outlives a bench that was killed. It is the minimum a receiver that dedupes must
do: a `POST /bench/…` with a new key executes (counted) and is answered 201 with a small JSON
body stored under the key; a resend with the same key and the same bytes is answered from
the store (`Idempotency-Replayed: true`), other bytes under a used key get 422. It stamps each
request's arrival (wall clock, `time.time()`, at the handler's entry) so the bench can measure
the send latency against the dispatcher's start barrier in the ledger.

`GET /_bench/stats` answers the counts and the first arrival per key. Only the standard library
and aiohttp are imported: its CPU, read from /proc by the bench, is the receiver's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import time
from pathlib import Path

from aiohttp import web

PARENT_POLL_S = 0.2
SHUTDOWN_GRACE_S = 1.0
EFFECT_PREFIX = "/bench/"
STATS_PATH = "/_bench/stats"


def parse_key(values: list[str]) -> str | None:
    """The key of one `Idempotency-Key` line holding one non-empty sf-string, else None."""
    if len(values) != 1:
        return None
    value = values[0].strip()
    if len(value) < 3 or value[0] != '"' or value[-1] != '"':
        return None
    inner = value[1:-1]
    # The dispatcher's keys are dispatch ids: nothing to unescape, so refuse what would need it.
    return None if '"' in inner or "\\" in inner else inner


class Store:
    """What the receiver has done: answers per key, executions, requests and arrivals."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[str, bytes]] = {}
        """Key → (fingerprint of method, path and body, the stored 201 body)."""
        self.executed: dict[str, int] = {}
        self.arrived: dict[str, float] = {}
        """Key → the first request's arrival, seconds since the epoch."""
        self.requests = 0
        self.replayed = 0
        self.refused = 0

    def stats(self) -> dict[str, object]:
        """The figures the bench reads after its drain."""
        return {
            "requests": self.requests,
            "replayed": self.replayed,
            "refused": self.refused,
            "executed": self.executed,
            "arrived": self.arrived,
            "pid": os.getpid(),
        }


def _problem(status: int, title: str) -> web.Response:
    body = json.dumps({"title": title, "status": status})
    return web.Response(status=status, text=body, content_type="application/problem+json")


def app(store: Store) -> web.Application:
    """The receiver's routes over `store`."""

    async def effect(request: web.Request) -> web.Response:
        arrived = time.time()
        store.requests += 1
        body = await request.read()
        key = parse_key(request.headers.getall("Idempotency-Key", []))
        if key is None:
            store.refused += 1
            return _problem(400, "Idempotency-Key is missing or not one sf-string")
        fingerprint = f"{request.method} {request.raw_path} {hashlib.sha256(body).hexdigest()}"
        # No await between the lookup and the store: one event loop, so two requests with one
        # key cannot both find it absent, and no in-flight state is needed.
        found = store.answers.get(key)
        if found is not None:
            if found[0] != fingerprint:
                store.refused += 1
                return _problem(422, "Idempotency-Key is already used for another request")
            store.replayed += 1
            return web.Response(
                status=201,
                body=found[1],
                content_type="application/json",
                headers={"Idempotency-Replayed": "true"},
            )
        store.arrived[key] = arrived
        store.executed[key] = store.executed.get(key, 0) + 1
        answer = json.dumps({"key": key, "effect": len(store.answers) + 1}).encode()
        store.answers[key] = (fingerprint, answer)
        return web.Response(status=201, body=answer, content_type="application/json")

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(store.stats())

    application = web.Application()
    application.router.add_post(EFFECT_PREFIX + "{tail:.+}", effect)
    application.router.add_get(STATS_PATH, stats)
    return application


def _watch_parent(loop: asyncio.AbstractEventLoop, parent: int, stop: asyncio.Event) -> None:
    # Reparenting is how a dead parent shows: a killed bench leaves no receiver behind.
    if os.getppid() != parent:
        stop.set()
    else:
        loop.call_later(PARENT_POLL_S, _watch_parent, loop, parent, stop)


async def serve(port_file: Path, parent: int) -> None:
    """Listen on 127.0.0.1 until SIGTERM, SIGINT or the parent's death."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    _watch_parent(loop, parent, stop)
    runner = web.AppRunner(app(Store()), access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        partial = port_file.with_name(port_file.name + ".partial")
        partial.write_text(f"{runner.addresses[0][1]}\n", encoding="ascii")
        os.replace(partial, port_file)  # the bench never reads half a number
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    """Parse the flags and serve until stopped."""
    parser = argparse.ArgumentParser(prog="qinglong_dispatcher.bench.receiver")
    parser.add_argument("--port-file", type=Path, required=True, help="the bound port, once up")
    parser.add_argument("--parent-pid", type=int, help="exit once this is no longer the parent")
    options = parser.parse_args(argv)
    parent = options.parent_pid if options.parent_pid is not None else os.getppid()
    asyncio.run(serve(options.port_file, parent))


if __name__ == "__main__":
    main()
