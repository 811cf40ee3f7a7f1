"""`Idempotency-Key`s in memory: per principal, released on refusal, bounded in count and age."""

from __future__ import annotations

from qinglong_dispatcher.web import idempotency

Outcome = idempotency.Outcome


def test_keys_replay_refuse_and_age_out() -> None:
    now = [0.0]
    keys = idempotency.Keys(max_keys=3, ttl_s=10.0, now=lambda: now[0])
    assert keys.begin("sam", "k", "a").outcome is Outcome.STARTED
    assert keys.begin("sam", "k", "a").outcome is Outcome.IN_FLIGHT
    assert keys.begin("sam", "k", "b").outcome is Outcome.MISMATCH
    assert keys.begin("ann", "k", "b").outcome is Outcome.STARTED
    keys.finish("sam", "k", 201, b"{}")
    assert keys.begin("sam", "k", "a") == idempotency.Begun(Outcome.REPLAY, 201, b"{}")
    keys.abandon("ann", "k")
    assert keys.begin("ann", "k", "c").outcome is Outcome.STARTED
    now[0] = 11.0
    assert keys.begin("sam", "k", "z").outcome is Outcome.STARTED  # the old one aged out
    assert idempotency.parse_key('"k-1"') == "k-1"
    assert idempotency.parse_key("has space") is None
    assert idempotency.fingerprint({"b": 1, "a": 2}) == idempotency.fingerprint({"a": 2, "b": 1})


def test_at_the_cap_the_oldest_answered_key_goes_and_one_in_flight_stays() -> None:
    keys = idempotency.Keys(max_keys=1, ttl_s=10.0, now=lambda: 0.0)
    keys.begin("sam", "a", "x")
    assert keys.begin("sam", "b", "y").outcome is Outcome.STARTED  # "a" in flight: kept
    assert keys.begin("sam", "a", "x").outcome is Outcome.IN_FLIGHT
    keys.finish("sam", "a", 201, b"{}")
    keys.finish("sam", "b", 201, b"{}")
    assert keys.begin("sam", "c", "z").outcome is Outcome.STARTED
    assert keys.begin("sam", "a", "other").outcome is Outcome.STARTED  # "a" went for room
