"""The `command.run` handler: inspect checks the plan against the configuration; execute runs it.

`inspect` only reads: the plan, the configured command, whether its executable is there now.
`execute` re-reads the approved plan, checks it again (the configuration may have changed
since), reads the secrets, and runs `executable + argv + args` once. Until the process is
spawned nothing has happened, so every refusal up to there is an explicit failure. After it,
only an exit status 0 proves success, and a non-zero one proves nothing changed only for a
command configured `fails_cleanly`; anything else (another exit, a kill, a timeout) is
`uncertain`: the dispatcher writes nothing and recovery settles it by the check or an operator.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

import anyio.to_thread
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract, secrets
from qinglong_dispatcher.actions.command_run import commands, plan, process
from qinglong_dispatcher.domain import errors, records

log = structlog.get_logger("qinglong_dispatcher.actions.command_run.handler")

ACTION_TYPE = plan.ACTION_TYPE

Kind = ports.ExecuteKind


def receipt(command: commands.Command, outcome: process.Outcome) -> dict[str, object]:
    """What the run left, as canonical-JSON values: digests, counts and a redacted stderr head
    — never an argument value marked sensitive nor a secret (the head is redacted of both)."""
    return {
        "commandName": command.name,
        "exitCode": outcome.exit_code,
        "timedOut": outcome.timed_out,
        "stdoutDigest": outcome.stdout_sha256,
        "stdoutBytes": outcome.stdout_bytes,
        "stderrDigest": outcome.stderr_sha256,
        "stderrBytes": outcome.stderr_bytes,
        "stderrHead": outcome.stderr_head.decode("utf-8", errors="replace"),
        "truncated": outcome.stdout_truncated or outcome.stderr_truncated,
    }


def lost_track(command: commands.Command, outcome: process.Outcome) -> dict[str, object]:
    """What an uncertain end leaves for the operator: the receipt's members with the signal
    and the duration (redacted like the receipt)."""
    return {
        **receipt(command, outcome),
        "signal": outcome.signal,
        "durationMs": outcome.duration_ms,
    }


def verdict(command: commands.Command, outcome: process.Outcome) -> ports.ExecuteResult:
    """Map how the process ended to what the dispatcher records (see the module docstring)."""
    if outcome.timed_out:
        kind, code = Kind.UNCERTAIN, "command_timeout"
    elif outcome.exit_code is None:
        kind, code = Kind.UNCERTAIN, "command_killed"
    elif outcome.exit_code == 0:
        kind, code = Kind.SUCCEEDED, "command_succeeded"
    elif command.fails_cleanly:
        kind, code = Kind.FAILED, f"command_exit_{outcome.exit_code}"
    else:
        kind, code = Kind.UNCERTAIN, "command_exit_uncertain"
    evidence = lost_track(command, outcome) if kind is Kind.UNCERTAIN else None
    return ports.ExecuteResult(
        kind=kind, code=code, receipt=receipt(command, outcome), evidence=evidence
    )


def _failed(code: str) -> ports.ExecuteResult:
    return ports.ExecuteResult(kind=Kind.FAILED, code=code)


class CommandRunHandler:
    """Runs a configured command with a plan's arguments, once per dispatch."""

    action_type = ACTION_TYPE

    def __init__(
        self,
        plans: contract.PlanReader,
        commands: commands.CommandSet,
        clock: ports.Clock,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._plans = plans
        self._commands = commands
        self._clock = clock
        self._environ = environ
        """The daemon's environment (None: `os.environ`, read at each run)."""

    def _configured(self, run_plan: plan.CommandRunPlan) -> commands.Command | str:
        """The plan's command, or the code refusing it."""
        command = self._commands.get(run_plan.command)
        if command is None:
            return "command_unknown"
        return command.refusal(run_plan.args) or command

    async def prefetch(self, dispatches: Sequence[records.Dispatch]) -> None:
        """A page's plans in one read (`ports.PrefetchingHandler`)."""
        await self._plans.prefetch(dispatches)

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        """The digest of a plan the configuration admits; blocked for one it never will."""
        try:
            run_plan, digest = await self._plans.resolve(dispatch, plan.CommandRunPlan)
        except errors.PlanInvalid as exc:
            return ports.InspectResult(kind=ports.InspectKind.BLOCKED, code=exc.code)
        found = self._configured(run_plan)
        if isinstance(found, str):
            return ports.InspectResult(kind=ports.InspectKind.BLOCKED, code=found)
        # Removed or not executable right now (a package upgrade): not now, maybe later.
        if not await anyio.to_thread.run_sync(os.access, found.executable, os.X_OK):
            return ports.InspectResult(kind=ports.InspectKind.TRANSIENT, code="command_unavailable")
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        """Run the approved command once; the mapping of its end is `verdict`."""
        dispatch = ctx.dispatch
        try:
            run_plan = await self._plans.approved(dispatch, plan.CommandRunPlan)
        except errors.QinglongError as exc:  # nothing ran: an explicit failure
            return _failed(exc.code)
        found = self._configured(run_plan)
        if isinstance(found, str):
            return _failed(found)
        remaining_s = (ctx.deadline_ms - self._clock.now_ms()) / 1000
        if remaining_s <= 0:
            return _failed("command_deadline_passed")
        try:
            invocation = process.prepare(
                found,
                found.argv_for(run_plan.args),
                run_plan.args,
                timeout_s=min(found.timeout_seconds, remaining_s),
                environ=self._environ,
            )
        except (secrets.SecretUnavailable, process.SecretInvalid) as exc:
            return _failed(exc.code)
        if ctx.traceparent is not None:
            # The command joins the dispatch's trace: W3C trace context in the environment
            # (what OpenTelemetry's environment-carrier convention reads), over any daemon value.
            invocation = dataclasses.replace(
                invocation, env={**invocation.env, "TRACEPARENT": ctx.traceparent}
            )
        try:
            outcome = await process.run(invocation)
        except process.SpawnFailed as exc:
            log.warning(
                "command_run.spawn_failed",
                dispatch_id=dispatch.dispatch_id,
                command=found.name,
                reason=exc.reason,
            )
            return _failed(exc.code)
        result = verdict(found, outcome)
        log.info(
            "command_run.executed",
            dispatch_id=dispatch.dispatch_id,
            command=found.name,
            code=result.code,
            exit_code=outcome.exit_code,
        )
        return result
