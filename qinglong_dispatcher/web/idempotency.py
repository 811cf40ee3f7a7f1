"""`Idempotency-Key` of `POST /dispatches`, as the IETF httpapi draft has it, kept in memory."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

HEADER: Final = "Idempotency-Key"
REPLAYED: Final = "Idempotent-Replayed"
"""The marker header of a response served again for a repeated key."""

MAX_KEYS: Final = 10_000
TTL_S: Final = 86_400.0

_KEY = re.compile(r'"?([A-Za-z0-9._~:+/=-]{1,255})"?')
"""A structured-field string (quoted, as the draft writes it) or the same characters bare."""


class Outcome(enum.Enum):
    """What `Keys.begin` decided."""

    STARTED = "started"
    """The key is new: run the request, then `finish` (or `abandon`) it."""
    REPLAY = "replay"
    """The same key with the same body finished before: answer its response again."""
    MISMATCH = "mismatch"
    """The same key with another body: 422."""
    IN_FLIGHT = "in_flight"
    """The same key is still being answered: 409."""


@dataclasses.dataclass(slots=True)
class _Entry:
    fingerprint: str
    at_s: float
    status: int | None = None
    body: bytes = b""


@dataclasses.dataclass(frozen=True, slots=True)
class Begun:
    """The decision and, for a replay, the stored response."""

    outcome: Outcome
    status: int = 0
    body: bytes = b""


def parse_key(text: str) -> str | None:
    """The key of an `Idempotency-Key` header value; None when it is not one."""
    found = _KEY.fullmatch(text.strip())
    return None if found is None else found.group(1)


def fingerprint(body: object) -> str:
    """The SHA-256 of the body's JSON with sorted members (spacing and order do not count)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Keys:
    """Keys per principal, each with its body's fingerprint and, once answered with a 2xx,
    that response. A refused request releases its key (the client may retry with it).

    Only this process knows them: a daemon restart, or another replica, forgets them; at most
    `MAX_KEYS` (the oldest go first) for at most `TTL_S`."""

    def __init__(
        self,
        *,
        max_keys: int = MAX_KEYS,
        ttl_s: float = TTL_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._max_keys = max_keys
        self._ttl_s = ttl_s
        self._now = now

    def _expire(self, now: float) -> None:
        while self._entries:
            oldest_key, oldest = next(iter(self._entries.items()))
            expired = now - oldest.at_s >= self._ttl_s
            if not expired and (len(self._entries) < self._max_keys or oldest.status is None):
                return  # a fresh request in flight is never dropped for room
            del self._entries[oldest_key]

    def begin(self, principal: str, key: str, print_: str) -> Begun:
        """Claim `key` for this body, or say why not."""
        now = self._now()
        self._expire(now)
        entry = self._entries.get((principal, key))
        if entry is None:
            self._entries[(principal, key)] = _Entry(fingerprint=print_, at_s=now)
            return Begun(Outcome.STARTED)
        if entry.fingerprint != print_:
            return Begun(Outcome.MISMATCH)
        if entry.status is None:
            return Begun(Outcome.IN_FLIGHT)
        return Begun(Outcome.REPLAY, entry.status, entry.body)

    def finish(self, principal: str, key: str, status: int, body: bytes) -> None:
        """Keep the response of a claimed key."""
        entry = self._entries.get((principal, key))
        if entry is not None:
            entry.status = status
            entry.body = body

    def abandon(self, principal: str, key: str) -> None:
        """Release a claimed key whose request was refused or failed."""
        entry = self._entries.get((principal, key))
        if entry is not None and entry.status is None:
            del self._entries[(principal, key)]
