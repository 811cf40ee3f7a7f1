"""`mcp.call`: call one tool of an MCP server the operator configured, once, after the barrier.

- `plan`: `McpCallPlan` — a configured server's name, the tool, its arguments (sensitive), and
  optionally the digest of the tool's input schema as approved; never a command, URL or secret;
- `settings`: its own, `QINGLONG_MCP_SERVERS_FILE` (none: the action has no handler, and the
  `mcp` SDK is never imported);
- `servers`: the operator's TOML file, `[servers.NAME]` tables — a stdio command or a
  streamable HTTP URL, secrets by reference, timeouts, output cap, allowed tools, checks;
- `tools`: a listed tool's schema digest, behaviour hints and argument check;
- `client`: the `mcp` SDK — the only module importing it, imported only by `build`;
- `handler`: inspect lists the tools and refuses what may not run; execute calls once and
  answers succeeded, failed or uncertain (recovery decides);
- `evidence`: the tool's configured read-only check tool, or `missing`/`manual_only`.

See `docs/actions.md`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.mcp_call import plan, settings
from qinglong_dispatcher.domain import errors

if TYPE_CHECKING:
    from qinglong_dispatcher.actions.mcp_call import evidence, handler, servers

ACTION_TYPE = plan.ACTION_TYPE


class McpSdkMissing(errors.ConfigurationError):
    """A servers file is configured but the `mcp` SDK is not installed (the `[mcp]` extra)."""

    code = "mcp_sdk_missing"


def build(
    configured: servers.ServerSet, plans: contract.PlanReader, clock: ports.Clock
) -> tuple[handler.McpCallHandler, evidence.McpCallEvidence]:
    """The handler and the evidence provider over one loaded configuration; no I/O."""
    # Imported here: the SDK is loaded only by a process that has servers to call.
    try:
        from qinglong_dispatcher.actions.mcp_call import evidence, handler
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] in {"mcp", "httpx2", "jsonschema"}:
            raise McpSdkMissing(
                "QINGLONG_MCP_SERVERS_FILE is set but the mcp SDK is not installed "
                "(install qinglong-dispatcher[mcp])"
            ) from None
        raise
    return (
        handler.McpCallHandler(plans, configured, clock),
        evidence.McpCallEvidence(plans, configured, clock=clock),
    )


def _servers(ctx: contract.BuiltInContext) -> servers.ServerSet | None:
    # Read at startup: a broken file is a configuration error (exit 78), not a dead dispatch.
    path = ctx.settings_of(settings.McpCallSettings).mcp_servers_file
    if path is None:
        return None
    from qinglong_dispatcher.actions.mcp_call import servers

    loaded = servers.load(path)
    loaded.require_within(ctx.execute_timeout_s)
    return loaded


ACTION = contract.configured_spec(
    plan_model=plan.McpCallPlan,
    settings=settings.McpCallSettings,
    load=_servers,
    handler=lambda config, plans, clock: build(config, plans, clock)[0],
    evidence=lambda config, plans, clock: build(config, plans, clock)[1],
    unconfigured="mcp_servers_unconfigured",
)
