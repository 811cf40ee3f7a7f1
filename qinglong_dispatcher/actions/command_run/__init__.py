"""`command.run`: run one command the operator configured, with a plan's arguments, at most once.

- `plan`: `CommandRunPlan` — the configured command's name and its arguments, nothing else
  (no executable, path, environment or secret is ever in a plan);
- `settings`: its own, `QINGLONG_COMMANDS_FILE` (none: the action has no handler);
- `commands`: the operator's TOML file, `[commands.NAME]` tables — executable, fixed argv,
  one pattern per plan argument (some marked sensitive), folder, allowed environment,
  secrets by reference, timeout, output cap, user, `fails_cleanly` and the evidence `check`;
- `process`: one argv without a shell, a scrubbed environment, its own process group killed
  whole on timeout or cancellation, output digested and capped, a redacted stderr head;
- `handler`: inspect refuses a command or arguments the configuration does not admit;
  execute runs it after the start barrier and answers succeeded, failed (only when nothing
  can have changed) or uncertain (recovery decides), with a receipt of digests and counts;
- `evidence`: the command's read-only check, or `missing`/`manual_only` for the operator.

A configuration, for example::

    [commands.deploy-site]
    executable = "/usr/local/bin/deploy"
    argv = ["--site"]
    args = [{ pattern = "[a-z0-9-]{1,64}" }, { pattern = ".{1,256}", sensitive = true }]
    env = ["HTTPS_PROXY"]
    env_secrets = { DEPLOY_TOKEN = "credential:deploy-token" }
    timeout_seconds = 60
    user = "deploy"              # only switched to when the daemon runs as root
    fails_cleanly = true         # a non-zero exit proves nothing changed
    check = { argv = ["/usr/local/bin/deploy-status", "{0}"], expect = "^deployed$" }

What the plan may not choose stays with the operator: the plan above can name only
`deploy-site` and two arguments that fullmatch their patterns. After the start barrier a
run is never repeated: an end that does not prove what happened is `uncertain`, and the
dispatch waits in `recovery_required` for the check (or an operator) to settle it.

See `docs/actions.md`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.command_run import plan, settings

if TYPE_CHECKING:
    from qinglong_dispatcher.actions.command_run import commands, evidence, handler

ACTION_TYPE = plan.ACTION_TYPE


def build(
    commands: commands.CommandSet, plans: contract.PlanReader, clock: ports.Clock
) -> tuple[handler.CommandRunHandler, evidence.CommandRunEvidence]:
    """The handler and the evidence provider over one loaded configuration; no I/O."""
    # Imported here: a process that only reads its settings (`status`) never loads them.
    from qinglong_dispatcher.actions.command_run import evidence, handler

    return (
        handler.CommandRunHandler(plans, commands, clock),
        evidence.CommandRunEvidence(plans, commands, clock=clock),
    )


def _commands(ctx: contract.BuiltInContext) -> commands.CommandSet | None:
    # Read at startup: a broken file is a configuration error (exit 78), not a dead dispatch.
    path = ctx.settings_of(settings.CommandRunSettings).commands_file
    if path is None:
        return None
    from qinglong_dispatcher.actions.command_run import commands

    loaded = commands.load(path)
    loaded.require_within(ctx.execute_timeout_s)
    return loaded


ACTION = contract.configured_spec(
    plan_model=plan.CommandRunPlan,
    settings=settings.CommandRunSettings,
    load=_commands,
    handler=lambda config, plans, clock: build(config, plans, clock)[0],
    evidence=lambda config, plans, clock: build(config, plans, clock)[1],
    unconfigured="commands_unconfigured",
)
