"""The bench's API phase: submit → approve → succeeded through a real daemon's own HTTP API.

A control plane's path, beside the in-process one `enqueue` measures: tokens from the store
(a submitter and an approver, so separation of duties holds as in production), a real `run`
daemon serving the API on loopback with its write limits raised for the load, and a few
keep-alive clients that submit (`POST /dispatches`) and approve (`POST /approvals/{id}/approve`)
every dispatch. Every request's latency is recorded; the phase ends when the store counts every
dispatch succeeded with its Run.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from qinglong_dispatcher import clock
from qinglong_dispatcher.bench import phases
from qinglong_dispatcher.bench.scratch import Scratch
from qinglong_dispatcher.domain import errors, principals
from qinglong_dispatcher.domain.states import EffectiveStatus

CLIENTS = 8
"""Concurrent keep-alive clients (one connection each)."""
SETTLE_TIMEOUT_S = 300.0
ROLES = {"submitter": principals.TokenRole.SUBMITTER, "approver": principals.TokenRole.APPROVER}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _tokens(made: Scratch) -> dict[str, str]:
    store = await made.open()
    try:
        secrets: dict[str, str] = {}
        for kind, role in ROLES.items():
            token, secret = principals.NewToken.issue(
                principal=f"bench_{kind}", role=role, ttl_ms=3_600_000, created_by="bench"
            )
            await store.create_token(token)
            secrets[kind] = secret
        return secrets
    finally:
        await store.close()


async def _settled(made: Scratch, count: int) -> None:
    store = await made.open()
    try:
        with anyio.fail_after(SETTLE_TIMEOUT_S):
            while True:
                counts = await store.counts(now_ms=clock.SystemClock().now_ms())
                if counts.executions[EffectiveStatus.SUCCEEDED] >= count:
                    if counts.runs != count:
                        raise errors.StoreError(
                            f"bench verification failed: {counts.runs} runs of {count}",
                            code="bench_unverified",
                        )
                    return
                await anyio.sleep(0.02)
    finally:
        await store.close()


async def api_path(made: Scratch, workdir: Path, count: int) -> dict[str, Any]:
    """`count` dispatches submitted and approved over HTTP: requests per second and their
    latency percentiles, and submit → succeeded per second."""
    secrets = await _tokens(made)
    port = _free_port()
    process = phases.start_daemon(
        made,
        workdir / "api-daemon.log",
        api_listen=f"127.0.0.1:{port}",
        api_writes_per_second="1000000",
        api_write_burst="1000000",
        cadence_seconds="0.02",
    )
    base = f"http://127.0.0.1:{port}/api/v1"
    latencies: list[float] = []
    try:
        connector = aiohttp.TCPConnector(limit=CLIENTS)
        async with aiohttp.ClientSession(connector=connector) as session:
            await _wait_for(session, base)
            plan_list = phases.run_create_plans(count, project="bench-api")
            headers = {k: {"Authorization": f"Bearer {v}"} for k, v in secrets.items()}

            async def request(path: str, who: str, body: dict[str, Any] | None = None) -> Any:
                began = time.perf_counter()
                async with session.post(base + path, json=body, headers=headers[who]) as answer:
                    found = await answer.json(content_type=None)
                    if answer.status not in (200, 201):
                        raise errors.StoreError(
                            f"bench API answered {answer.status} to {path.split('/')[1]}",
                            code="bench_api_refused",
                        )
                latencies.append(time.perf_counter() - began)
                return found

            async def client(n: int) -> None:
                for plan in plan_list[n::CLIENTS]:
                    body = {"action": plan.ACTION_TYPE, "plan": plan.to_canonical_dict()}
                    made_request = await request("/dispatches", "submitter", body)
                    approval = made_request["approval"]["approval_request_id"]
                    await request(f"/approvals/{approval}/approve", "approver")

            started = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for n in range(CLIENTS):
                    tg.start_soon(client, n)
            requested = time.perf_counter() - started
            await _settled(made, count)
            succeeded = time.perf_counter() - started
    finally:
        await anyio.to_thread.run_sync(phases.stop_daemon, process)
    return {
        "dispatches": count,
        "clients": CLIENTS,
        "requests_per_s": 2 * count / requested,
        "request_p50_ms": phases.percentile(latencies, 0.50) * 1000,
        "request_p99_ms": phases.percentile(latencies, 0.99) * 1000,
        "approved_per_s": count / requested,
        "succeeded_per_s": count / succeeded,
    }


async def _wait_for(session: aiohttp.ClientSession, base: str) -> None:
    with anyio.fail_after(60):
        while True:
            try:
                async with session.get(base + "/healthz") as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await anyio.sleep(0.05)
