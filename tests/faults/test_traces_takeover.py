"""A dispatch's trace across a SIGKILL and a takeover, exported by real edge daemons to a real
OTLP/HTTP receiver: the killed daemon's claims were children of the trace each dispatch was
submitted under; the survivor's takeover of a claim the dead one held starts a new trace,
linked to that one, never a child of the attempt that died; its fresh claims join the
submitted trace as children; one it had started is settled by evidence under a new trace
linked likewise.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest

from qinglong_dispatcher import clock
from tests.support import crash_actions, otlp_receiver, stores
from tests.support import daemon as daemons
from tests.support.actions import make_api

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
GIVEN = f"00-{TRACE}-{CALLER_SPAN}-01"
COUNT = 40


async def _submit(path: Path) -> list[str]:
    system = clock.SystemClock()
    store = await stores.open_sqlite(path)
    try:
        await store.migrate(now_ms=system.now_ms())
        the_api = make_api(store, system, max_attempts=3)
        ids = []
        for i in range(COUNT):
            (consumed,) = await the_api.submit(
                [crash_actions.plan(crash_actions.SLOW_TYPE, f"act-{i}")],
                requested_by="tester",
                approved_by="approver",
                traceparent=GIVEN,
            )
            ids.append(consumed.dispatch_id)
            await anyio.sleep(0.003)
        return ids
    finally:
        await store.close()


async def test_a_takeover_starts_a_new_trace_linked_to_the_one_submitted(tmp_path: Path) -> None:
    path = tmp_path / "qinglong.db"
    site = crash_actions.install(tmp_path / "site")
    ids = await _submit(path)
    async with otlp_receiver.serving() as receiver:
        traced = otlp_receiver.exporting_env(receiver)
        port = daemons.free_port()
        env = crash_actions.daemon_env(path, site, port) | traced | {"QINGLONG_OWNER_ID": "victim"}
        with daemons.running(tmp_path, env, name="victim") as victim:
            await crash_actions.until_ready(victim, port)
            deadline = time.monotonic() + 30
            while crash_actions.leased_by(path, "victim") == 0:
                assert time.monotonic() < deadline, "the victim never held a claim"
                await anyio.sleep(0.05)
            await anyio.sleep(0.3)  # a few of its items done and exported, more held
            victim.send_signal(signal.SIGKILL)
            assert victim.wait(timeout=10) == -signal.SIGKILL
        at_death = crash_actions.rows(path)
        held = {d for d, r in at_death.items() if r["status"] == "leased"}
        assert held, "the victim died holding nothing"
        done = {d for d, r in at_death.items() if r["status"] == "succeeded"}
        started = {d for d, r in at_death.items() if r["status"] == "executing"}

        port = daemons.free_port()
        env = crash_actions.daemon_env(path, site, port) | traced | {"QINGLONG_OWNER_ID": "heir"}
        with daemons.running(tmp_path, env, name="heir") as heir:
            await crash_actions.until_ready(heir, port)
            daemons.wait_until(lambda: crash_actions.settled(path), timeout=60, interval=0.2)
            heir.send_signal(signal.SIGTERM)
            assert heir.wait(timeout=30) == 0  # its spans are exported as it exits
        await receiver.wait_for(
            lambda: (
                {
                    s.attributes["qinglong.dispatch_id"]
                    for s in receiver.named("dispatch.claim")
                    if s.attributes["qinglong.owner"] == "heir"
                }
                >= held
            )
        )

    rows = crash_actions.rows(path)
    assert {r["status"] for r in rows.values()} == {"succeeded"}
    assert {r["starts"] for r in rows.values()} == {1}
    claims = receiver.named("dispatch.claim")
    by_owner: dict[str, list[otlp_receiver.Received]] = {}
    for span in claims:
        by_owner.setdefault(span.attributes["qinglong.owner"], []).append(span)
    taken = [s for s in by_owner["heir"] if s.attributes["qinglong.takeover"]]
    fresh = [s for s in by_owner["heir"] if not s.attributes["qinglong.takeover"]]
    # Every lease the dead daemon held was taken over under a new trace linked to the
    # submitted one: a root span, never a child of the dead attempt.
    assert {s.attributes["qinglong.dispatch_id"] for s in taken} == held
    for span in taken:
        assert span.parent_span_id == ""
        assert span.trace_id != TRACE
        assert span.links == ((TRACE, CALLER_SPAN),)
        assert span.attributes["qinglong.outcome"] == "succeeded"
        steps = {s.name for s in receiver.spans if s.parent_span_id == span.span_id}
        assert steps == {"dispatch.start_barrier", "dispatch.execute", "dispatch.completion"}
    # The rest joined the submitted trace as its children, in either daemon.
    for span in fresh + by_owner.get("victim", []):
        assert (span.trace_id, span.parent_span_id, span.links) == (TRACE, CALLER_SPAN, ())
    # What the dead daemon finished was exported as it went (a span still open, or not yet
    # exported, dies with it); the heir's spans cover every other dispatch.
    assert {s.attributes["qinglong.dispatch_id"] for s in by_owner.get("victim", [])} <= done
    heirs = {s.attributes["qinglong.dispatch_id"] for s in by_owner["heir"]}
    assert heirs == set(ids) - done - started
    # One the dead daemon had started is settled by evidence: a new trace linked likewise.
    settled = [s for s in receiver.named("recovery.settle") if s.attributes["qinglong.outcome"]]
    assert {s.attributes["qinglong.dispatch_id"] for s in settled} == started
    for span in settled:
        assert (span.parent_span_id, span.links) == ("", ((TRACE, CALLER_SPAN),))
        assert span.attributes["qinglong.outcome"] == "resolved_succeeded"
    assert receiver.refused == 0
