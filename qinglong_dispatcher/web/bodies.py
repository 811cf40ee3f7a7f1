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
    """One JSON value of a request, or 400 naming `field`, nested at most `MAX_DEPTH` deep.
    The parser recurses: a value deep enough to exhaust its stack raises RecursionError (a
    500 if let through), and one just under that would recurse again in whoever walks it."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise problems.BadField(field, f"{field}: nested deeper than {MAX_DEPTH}") from None
    except ValueError:
        raise problems.BadField(field, f"{field}: not valid JSON") from None
    if _deeper_than(value, MAX_DEPTH):
        raise problems.BadField(field, f"{field}: nested deeper than {MAX_DEPTH}")
    return value


def _deeper_than(value: object, limit: int) -> bool:
    """Whether parsed JSON nests arrays and objects deeper than `limit`, walked level by level
    without recursion (the top-level container is depth 1)."""
    level: list[dict[str, object] | list[object]] = (
        [value] if isinstance(value, dict | list) else []
    )
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list[dict[str, object] | list[object]] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            below.extend(child for child in children if isinstance(child, dict | list))
        level, depth = below, depth + 1
    return False
