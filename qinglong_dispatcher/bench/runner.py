"""Runs the bench phases in one process and assembles the report (exactly the issue's keys)."""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

from qinglong_dispatcher.bench import (
    api_path,
    mixed,
    mixed_http,
    mixed_mcp,
    notify_path,
    phases,
    policy_path,
    scratch,
)
from qinglong_dispatcher.bootstrap import tools
from qinglong_dispatcher.config.settings import Settings

SUBMIT_ONE = 1_000
"""At most this many plans are submitted one at a time (a transaction each)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Options:
    """What `bench` was asked to do."""

    dispatches: int = 5_000
    mixed_dispatches: int = 5_000
    """The batch of each mixed phase (90 % run.create, 10 % tool.invoke or http.request); 0
    skips both."""
    mcp_dispatches: int = 100
    """The mixed MCP phase's batch (90 % run.create, 10 % mcp.call to a stdio server, two
    Python starts per mcp.call); 0 skips it."""
    api_dispatches: int = 1_000
    """Submitted and approved through a daemon's HTTP API (edge only); 0 skips it."""
    approval_policy: int = 1
    """The approvals of the policy phase's policy (a submit under a policy); 0 skips it."""
    notify_dispatches: int = 0
    """The notification phase's batch (failure kinds subscribed, or none); 0 skips it."""
    replicas: int = 1
    scan_rows: int = 1_000_000
    idle_seconds: float = 30.0
    raw_seconds: float = 2.0
    trickle_seconds: float = 3.0
    trickle_rate: float = 20.0


def _progress(text: str) -> None:
    if sys.stderr.isatty():
        print(f"bench: {text}", file=sys.stderr, flush=True)


async def run(settings: Settings, options: Options) -> dict[str, Any]:
    """Every measurement, each phase on scratch stores created and removed here."""
    with tempfile.TemporaryDirectory(prefix="qinglong-bench-") as tmp:
        workdir = Path(tmp)
        async with scratch.scratch(settings) as made:
            _progress("raw commit loop")
            raw, raw_stdlib = await phases.raw_commits(made, options.raw_seconds)
            _progress(f"enqueue {options.dispatches}")
            enqueue_per_s = await phases.enqueue(made, options.dispatches)
            _progress(f"dispatch with {options.replicas} replica(s)")
            dispatched = await phases.dispatch(made, options.dispatches, options.replicas)
            _progress("trickle latency")
            latency = await phases.trickle(
                made, workdir, seconds=options.trickle_seconds, rate=options.trickle_rate
            )
            _progress("wake-up latency at the profile's cadence")
            wakeup = await phases.wakeup_latency(
                made, workdir, seconds=options.trickle_seconds, rate=options.trickle_rate
            )
            _progress(f"idle for {options.idle_seconds:g} s")
            idle = await phases.idle(made, workdir, seconds=options.idle_seconds)
        _progress(f"enqueue and dispatch {options.dispatches} with plans sealed at rest")
        sealed = await _sealed(settings, workdir, options, dispatched)
        mixed_entry: dict[str, Any] | None = None
        if options.mixed_dispatches:
            async with scratch.scratch(settings) as made:
                _progress(f"mixed {options.mixed_dispatches} with {options.replicas} replica(s)")
                mixed_entry = _mixed_entry(
                    await mixed.mixed(made, workdir, options.mixed_dispatches, options.replicas),
                    options.mixed_dispatches,
                )
        mixed_http_entry: dict[str, Any] | None = None
        if options.mixed_dispatches:
            async with scratch.scratch(settings) as made:
                _progress(
                    f"mixed http {options.mixed_dispatches} with {options.replicas} replica(s)"
                )
                mixed_http_entry = _mixed_http_entry(
                    await mixed_http.mixed_http(
                        made, workdir, options.mixed_dispatches, options.replicas
                    ),
                    options.mixed_dispatches,
                    run_create_per_s=dispatched["dispatch_per_s"],
                )
        mcp_entry = await mixed_mcp_entry(settings, workdir, options, dispatched)
        api_entry: dict[str, Any] | None = None
        if options.api_dispatches and settings.profile == "edge":
            async with scratch.scratch(settings) as made:
                _progress(f"{options.api_dispatches} through the HTTP API")
                api_entry = _api_entry(
                    await api_path.api_path(made, workdir, options.api_dispatches),
                    enqueue_per_s=enqueue_per_s,
                )
        async with scratch.scratch(settings) as made:
            _progress(f"submit {min(options.dispatches, SUBMIT_ONE)} one at a time")
            submit_one_per_s = await phases.submit_one(made, min(options.dispatches, SUBMIT_ONE))
        policy_entry: dict[str, Any] | None = None
        if options.approval_policy:
            plans = min(options.dispatches, SUBMIT_ONE)
            _progress(f"{plans} plans with and without a policy of {options.approval_policy}")
            policy_entry = await policy_path.policy_ratio(settings, plans, options.approval_policy)
        notify_entry: dict[str, Any] | None = None
        if options.notify_dispatches:
            _progress(f"{options.notify_dispatches} with and without notifications of failures")
            notify_entry = await notify_path.notify_ratio(
                settings, options.notify_dispatches, options.replicas
            )
        async with scratch.scratch(settings) as made:
            _progress(f"scan cost with {options.scan_rows} terminal rows")
            scan_ratio = await phases.scan_cost(made, options.scan_rows)
    return {
        "raw_commits_per_s": round(raw, 1),
        "raw_commits_per_s_stdlib": None if raw_stdlib is None else round(raw_stdlib, 1),
        "enqueue_per_s": round(enqueue_per_s, 1),
        "submit_one_per_s": round(submit_one_per_s, 1),
        "dispatch_per_s": round(dispatched["dispatch_per_s"], 1),
        "ratio_to_raw_commit": round(dispatched["dispatch_per_s"] / raw, 3),
        "ratio_to_raw_commit_stdlib": None
        if raw_stdlib is None
        else round(dispatched["dispatch_per_s"] / raw_stdlib, 3),
        "commits_per_dispatch": round(dispatched["commits_per_dispatch"], 3),
        "latency_ms": {k: round(v, 1) for k, v in latency.items()},
        "wakeup_latency_ms": None
        if wakeup is None
        else {k: round(v, 1) if k != "cadence_s" else v for k, v in wakeup.items()},
        "cpu_s_per_1000": round(dispatched["cpu_s_per_1000"], 3),
        "rss_mib_peak": round(dispatched["rss_mib_peak"], 1),
        "costs_per_dispatch": dispatched["costs"],
        "scan_cost_ratio": round(scan_ratio, 3),
        "idle": {k: round(v, 3) for k, v in idle.items()},
        "sealed": sealed,
        "mixed": mixed_entry,
        "mixed_http": mixed_http_entry,
        "mixed_mcp": mcp_entry,
        "api": api_entry,
        "approval_policy": policy_entry,
        "notifications": notify_entry,
    }


async def _sealed(
    settings: Settings, workdir: Path, options: Options, clear: dict[str, float]
) -> dict[str, Any]:
    """The enqueue and dispatch phases again with every plan sealed under a fresh key ring
    (AES-256-GCM at write, opened at inspect), beside the clear figures of the same run."""
    ring = workdir / "plan-keys"
    tools.write_plan_keys(ring, add=False)
    async with scratch.scratch(settings, plan_keyring=ring) as made:
        enqueue_per_s = await phases.enqueue(made, options.dispatches)
        dispatched = await phases.dispatch(made, options.dispatches, options.replicas)
    return {
        "enqueue_per_s": round(enqueue_per_s, 1),
        "dispatch_per_s": round(dispatched["dispatch_per_s"], 1),
        "ratio_to_dispatch_per_s": round(dispatched["dispatch_per_s"] / clear["dispatch_per_s"], 3),
        "cpu_s_per_1000": round(dispatched["cpu_s_per_1000"], 3),
        "cpu_s_per_1000_clear": round(clear["cpu_s_per_1000"], 3),
    }


async def mixed_mcp_entry(
    settings: Settings, workdir: Path, options: Options, clear: dict[str, Any]
) -> dict[str, Any] | None:
    """The mixed MCP phase's entry: None when skipped by its flag, the reason when the
    `[mcp]` extra is not installed, else its figures (it raises unless every dispatch was
    verified), with its rate over the pure run.create rate of the same run."""
    count = options.mcp_dispatches
    if not count:
        return None
    missing = mixed_mcp.sdk_missing()
    if missing is not None:
        return {"dispatches": count, "skipped": missing}
    async with scratch.scratch(settings) as made:
        _progress(f"mixed mcp {count} with {options.replicas} replica(s)")
        figures = await mixed_mcp.mixed_mcp(made, workdir, count, options.replicas)
    counted = (
        "run_create",
        "mcp_call",
        "succeeded",
        "runs_created",
        "keys_called_once",
        "server_calls",
        "server_sessions",
    )
    return {
        "dispatches": count,
        **{key: int(figures[key]) for key in counted},
        "verified": True,
        "dispatch_per_s": round(figures["dispatch_per_s"], 1),
        "ratio_to_dispatch_per_s": round(figures["dispatch_per_s"] / clear["dispatch_per_s"], 3),
        "commits_per_dispatch": round(figures["commits_per_dispatch"], 3),
        "cpu_s_per_1000": round(figures["cpu_s_per_1000"], 3),
        "rss_mib_peak": round(figures["rss_mib_peak"], 1),
        "sessions_per_call": round(figures["sessions_per_call"], 2),
        "execute_p50_ms": round(figures["execute_p50_ms"], 1),
        "execute_p99_ms": round(figures["execute_p99_ms"], 1),
        "costs_per_dispatch": figures["costs"],
    }


def _api_entry(figures: dict[str, Any], *, enqueue_per_s: float) -> dict[str, Any]:
    """The API phase's figures, with its submit-and-approve rate over the in-process one."""
    return {
        "dispatches": figures["dispatches"],
        "clients": figures["clients"],
        **{
            key: round(figures[key], 1)
            for key in (
                "requests_per_s",
                "request_p50_ms",
                "request_p99_ms",
                "approved_per_s",
                "succeeded_per_s",
            )
        },
        "ratio_to_enqueue_per_s": round(figures["approved_per_s"] / enqueue_per_s, 3),
    }


def _mixed_entry(figures: dict[str, Any], count: int) -> dict[str, Any]:
    """The mixed phase's figures (it raises unless every dispatch was verified)."""
    counted = (
        "run_create",
        "tool_invoke",
        "succeeded",
        "runs_created",
        "tool_steps_succeeded",
        "files_written",
    )
    return {
        "dispatches": count,
        **{key: int(figures[key]) for key in counted},
        "verified": True,
        "dispatch_per_s": round(figures["dispatch_per_s"], 1),
        "commits_per_dispatch": round(figures["commits_per_dispatch"], 3),
        "cpu_s_per_1000": round(figures["cpu_s_per_1000"], 3),
        "rss_mib_peak": round(figures["rss_mib_peak"], 1),
        "costs_per_dispatch": figures["costs"],
    }


def _mixed_http_entry(
    figures: dict[str, Any], count: int, *, run_create_per_s: float
) -> dict[str, Any]:
    """The mixed http phase's figures (it raises unless every dispatch was verified), with its
    rate over the pure run.create rate of the same run."""
    counted = (
        "run_create",
        "http_request",
        "receivers",
        "succeeded",
        "runs_created",
        "keys_executed_once",
        "receiver_requests",
        "receiver_replayed",
    )
    rounded = (
        "send_p50_ms",
        "send_p99_ms",
        "execute_p50_ms",
        "execute_p99_ms",
        "receiver_rss_mib",
    )
    return {
        "dispatches": count,
        **{key: int(figures[key]) for key in counted},
        "verified": True,
        "dispatch_per_s": round(figures["dispatch_per_s"], 1),
        "ratio_to_dispatch_per_s": round(figures["dispatch_per_s"] / run_create_per_s, 3),
        "commits_per_dispatch": round(figures["commits_per_dispatch"], 3),
        "cpu_s_per_1000": round(figures["cpu_s_per_1000"], 3),
        "rss_mib_peak": round(figures["rss_mib_peak"], 1),
        **{key: round(figures[key], 1) for key in rounded},
        "receiver_cpu_s_per_1000": round(figures["receiver_cpu_s_per_1000"], 3),
        "costs_per_dispatch": figures["costs"],
    }


def _flat(prefix: str, value: object) -> list[tuple[str, object]]:
    if isinstance(value, dict):
        return [row for key, inner in value.items() for row in _flat(f"{prefix}.{key}", inner)]
    if isinstance(value, list):
        return [row for n, inner in enumerate(value) for row in _flat(f"{prefix}.{n}", inner)]
    return [(prefix, value)]


def table(report: dict[str, Any]) -> str:
    """A short human-readable table: one figure a line, nested ones as `phase.figure` (and
    deeper ones as `phase.part.figure`)."""
    rows = [row for key, value in report.items() for row in _flat(key, value)]
    width = max(len(label) for label, _ in rows) + 2
    return "\n".join(f"{label:<{width}}{value}" for label, value in rows)
