"""The `command.run` evidence provider: the command's configured check, or the operator.

A command's effect lives outside the dispatcher, so only the operator's own probe can prove
it: a `check` argv (never the command itself: the configuration refuses that) run with the
same scrubbed environment, folder, user and output cap, under its own timeout. Its verdict
follows the convention of `grep` and `test`: exit 0 with `expect` found in its stdout is
`verified_succeeded`; exit 0 without it, or exit 1 (the probe's "no"), is `missing`. Any other
end — it cannot start, times out, is killed, exits 2 or more — means it could not look, and
raises: the reconciler records `unavailable`, never `missing`, which would invite an operator
to fail work that may have happened. A command without a check is the operator's to settle
(`missing`, reason `manual_only`).

A "no" counts only once the run cannot still be going: a dispatcher killed mid-run leaves
its command running on its own (it is in a process group of its own), so until its start
plus its timeout (and a margin) has passed, a "no" raises `check_too_early` instead of
answering `missing`. A command that outlives its own timeout after its dispatcher died is
beyond this bound (docs/actions.md says so).
"""

from __future__ import annotations

from collections.abc import Mapping

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract, secrets
from qinglong_dispatcher.actions.command_run import commands, plan, process
from qinglong_dispatcher.domain import digests, errors, recovery

EVIDENCE_TAG = "qinglong/command.run/evidence@v1"

NO_BEFORE_MARGIN_MS = 2_000
"""After its start plus its timeout, a run of a dead dispatcher has ended or been given up;
the margin covers the spawn and the clocks of two replicas."""
ACTION_TYPE = plan.ACTION_TYPE

Kind = recovery.EvidenceKind


class CheckUnavailable(errors.QinglongError):
    """The command's check could not look (not configured now, cannot start, timed out,
    killed, or exited with a status that is neither yes nor no)."""

    code = "check_unavailable"


def evidence_digest(
    dispatch_id: str, action_digest: str, check: commands.Check, outcome: process.Outcome
) -> str:
    """Binds the dispatch, what was approved, the check as configured and what it printed.

    The check's argv is taken as configured (with its `{N}` placeholders): the action digest
    already binds the plan's arguments, and a sensitive one is not hashed on its own.
    """
    return digests.evidence_digest(
        EVIDENCE_TAG,
        {
            "dispatchId": dispatch_id,
            "actionDigest": action_digest,
            "checkArgv": list(check.argv),
            "stdoutDigest": outcome.stdout_sha256,
        },
    )


class CommandRunEvidence:
    """Read-only: runs only the configured check, never the command."""

    action_type = ACTION_TYPE

    def __init__(
        self,
        plans: contract.PlanReader,
        commands: commands.CommandSet,
        *,
        clock: ports.Clock | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._plans = plans
        self._commands = commands
        self._clock = clock
        """None: a "no" is trusted at once (a test that starts no run of its own)."""
        self._environ = environ
        """The daemon's environment (None: `os.environ`, read at each check)."""

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """`verified_succeeded` or `missing` from the check; raises when it cannot look."""
        dispatch = snapshot.dispatch
        run_plan = await self._plans.approved(dispatch, plan.CommandRunPlan)  # raise: unavailable
        command = self._commands.get(run_plan.command)
        if command is None or command.refusal(run_plan.args) is not None:
            # The configuration changed since the run: it no longer says how to look.
            raise CheckUnavailable("the command is no longer configured for this plan")
        check = command.check
        if check is None:
            return recovery.Evidence(kind=Kind.MISSING, reason=recovery.MANUAL_ONLY)
        try:
            invocation = process.prepare(
                command,
                check.argv_for(run_plan.args),
                run_plan.args,
                timeout_s=check.timeout_seconds,
                keep_stdout=True,
                environ=self._environ,
            )
            outcome = await process.run(invocation)
        except (secrets.SecretUnavailable, process.SecretInvalid, process.SpawnFailed) as exc:
            raise CheckUnavailable(f"check cannot run ({exc.code})", code=exc.code) from None
        if outcome.timed_out:
            raise CheckUnavailable("check timed out", code="check_timeout")
        if outcome.exit_code not in (0, 1):
            raise CheckUnavailable("check could not look", code="check_failed")
        found = check.expect.search(outcome.stdout.decode("utf-8", errors="replace"))
        if outcome.exit_code != 0 or found is None:
            started = snapshot.execution.started_at_ms or 0
            settled_by = started + int(command.timeout_seconds * 1000) + NO_BEFORE_MARGIN_MS
            if self._clock is not None and self._clock.now_ms() < settled_by:
                raise CheckUnavailable("the run may still be going", code="check_too_early")
            return recovery.Evidence(kind=Kind.MISSING, reason="check_not_matched")
        return recovery.Evidence(
            kind=Kind.VERIFIED_SUCCEEDED,
            evidence_digest=evidence_digest(
                dispatch.dispatch_id, dispatch.action_digest, check, outcome
            ),
        )
