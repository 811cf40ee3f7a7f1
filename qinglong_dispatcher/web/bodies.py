"""Request bodies of the write endpoints: one JSON object, capped in size, read in bounded time."""

from __future__ import annotations

import asyncio
import json
from typing import Final

from aiohttp import web

from qinglong_dispatcher.domain import canonical
from qinglong_dispatcher.web import context, problems

JSON_TYPES: Final = frozenset({"application/json"})

MAX_DEPTH: Final = canonical.MAX_DEPTH + 1
"""Deepest nesting of a body: a plan (itself at most `canonical.MAX_DEPTH`) one level down."""


class BodyTimeout(Exception):
    """The body did not arrive within the read timeout."""


async def read_object(request: web.Request) -> dict[str, object]:
    """The body as a JSON object. Over `QINGLONG_API_MAX_BODY_BYTES` it is 413 (aiohttp stops
    reading at the cap); slower than the read timeout, `BodyTimeout` (408, connection closed);
    another type or anything but one JSON object, 400 naming `body`."""
    if request.content_type not in JSON_TYPES:
        raise problems.BadField("body", "body: must be application/json")
    try:
        async with asyncio.timeout(context.of(request).read_timeout_s):
            raw = await request.read()
    except TimeoutError:
        raise BodyTimeout from None
    value = parse_json(raw, "body")
    if not isinstance(value, dict):
        raise problems.BadField("body", "body: must be a JSON object")
    return value


def parse_json(raw: bytes | str, field: str) -> object:
    """One JSON value of a request, or 400 naming `field`. Nesting is bounded before parsing:
    the parser recurses, and a deep enough value would end as RecursionError (500)."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise problems.BadField(field, f"{field}: not valid JSON") from None
    if canonical.nesting_exceeds(text, MAX_DEPTH):
        raise problems.BadField(field, f"{field}: nested deeper than {MAX_DEPTH}")
    try:
        return json.loads(text)
    except ValueError:
        raise problems.BadField(field, f"{field}: not valid JSON") from None
