"""A real webhook receiver for the notification tests: an aiohttp server on loopback that
verifies every delivery with the `standardwebhooks` package, as a subscriber would, and
records what it accepted and what it refused.

`mode` decides the answer: `ok` (204 once verified), `down` (503 for everything), `fail`
(500 for everything); `hang_first` holds the first request until the server closes. A
delivery that fails verification is answered 400 and never recorded as accepted.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import anyio
from aiohttp import web
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


def new_secret() -> str:
    """A fresh `whsec_<base64>` signing secret."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


@dataclasses.dataclass
class Receiver:
    """What the server saw; `url` is where to post."""

    secret: str
    url: str = ""
    mode: str = "ok"
    accepted: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)
    answered: int = 0
    hang_first: bool = False
    """Hold the first request unanswered (a deliverer killed mid-delivery)."""
    hung: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    closing: anyio.Event = dataclasses.field(default_factory=anyio.Event)

    @property
    def ids(self) -> list[str]:
        """The `webhook-id` of every accepted delivery, duplicates kept, in arrival order."""
        return [d["webhook-id"] for d in self.accepted]

    async def handle(self, request: web.Request) -> web.Response:
        self.answered += 1
        body = await request.read()
        if self.hang_first and not self.hung.is_set():
            self.hung.set()
            with anyio.move_on_after(60):
                await self.closing.wait()
        if self.mode == "down":
            return web.Response(status=503)
        if self.mode == "fail":
            return web.Response(status=500)
        try:
            document = Webhook(self.secret).verify(body, dict(request.headers))
        except WebhookVerificationError as exc:
            self.refused.append(str(exc))
            return web.Response(status=400)
        self.accepted.append({"webhook-id": request.headers["webhook-id"], "body": document})
        return web.Response(status=204)


@contextlib.asynccontextmanager
async def serving(secret: str | None = None) -> AsyncIterator[Receiver]:
    """A receiver listening on 127.0.0.1 (an ephemeral port) until the block ends."""
    receiver = Receiver(secret=secret or new_secret())
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server  # the bound port of an ephemeral site
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        receiver.closing.set()
        await runner.cleanup()


def unique(receiver: Receiver) -> dict[str, dict[str, Any]]:
    """Accepted deliveries deduplicated by `webhook-id` (the first kept), as a receiver does."""
    seen: dict[str, dict[str, Any]] = {}
    for delivery in receiver.accepted:
        seen.setdefault(delivery["webhook-id"], delivery["body"])
    return seen


def dumps(document: object) -> bytes:
    """Compact JSON bytes (what a forger would post)."""
    return json.dumps(document, separators=(",", ":")).encode()
