"""Rate limits: token buckets per key (a client address, a principal), bounded in memory."""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Final

AUTH_FAILURE_BURST: Final = 10
AUTH_FAILURES_PER_SECOND: Final = 0.1
"""A client address may fail authentication 10 times at once, then once every 10 s."""

AUTH_AUDIT_BURST: Final = 60
AUTH_AUDITS_PER_SECOND: Final = 1.0
"""Failed authentications written to the audit table, whatever their address: 60 at once,
then one a second; the rest are logged and counted only (`api_auth_failures_unaudited`)."""
AUTH_AUDIT_KEY: Final = "all"

MAX_KEYS: Final = 10_000
"""Buckets kept at most; the least recently used goes first (memory stays bounded)."""


@dataclasses.dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class Limiter:
    """Token buckets: each key holds up to `burst` tokens, refilled at `rate` per second.

    `take` spends a token when one is there (the write limiter: a request is the cost);
    `retry_after` and `spend` split that for the authentication limiter, where only a failure
    costs: a client is refused while its bucket is empty, and each failure empties it further.
    """

    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1 or max_keys < 1:
            raise ValueError("rate, burst and max_keys must be positive")
        self.rate = rate
        self.burst = burst
        self._max_keys = max_keys
        self._clock = clock
        self._buckets: collections.OrderedDict[str, _Bucket] = collections.OrderedDict()

    def _bucket(self, key: str) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(tokens=float(self.burst), at=now)
            self._buckets[key] = bucket
            while len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
        else:
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
            self._buckets.move_to_end(key)
        return bucket

    def retry_after(self, key: str) -> float:
        """Seconds until `key` has a whole token again (0.0: it has one now)."""
        bucket = self._bucket(key)
        if bucket.tokens >= 1.0:
            return 0.0
        return (1.0 - bucket.tokens) / self.rate

    def spend(self, key: str) -> None:
        """Spend one token of `key` (never below zero)."""
        bucket = self._bucket(key)
        bucket.tokens = max(0.0, bucket.tokens - 1.0)

    def take(self, key: str) -> float:
        """Spend a token of `key` if it has one and return 0.0; else the seconds to wait."""
        wait = self.retry_after(key)
        if wait == 0.0:
            self.spend(key)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


def auth_failure_limiter() -> Limiter:
    """The per-client-address limiter of failed authentications."""
    return Limiter(rate=AUTH_FAILURES_PER_SECOND, burst=AUTH_FAILURE_BURST)


def auth_audit_limiter() -> Limiter:
    """The one bucket of failed authentications recorded in the database."""
    return Limiter(rate=AUTH_AUDITS_PER_SECOND, burst=AUTH_AUDIT_BURST, max_keys=1)


def write_limiter(*, rate: float, burst: int) -> Limiter:
    """The per-principal limiter of writes (`QINGLONG_API_WRITES_PER_SECOND`, `_WRITE_BURST`)."""
    return Limiter(rate=rate, burst=burst)
