"""`mcp.call`'s plan and servers file: exact shapes, hostile values refused in one line that
names the field and never a value, the SDK imported only where a servers file is set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher.actions.mcp_call import plan, servers, tools
from qinglong_dispatcher.domain import digests, errors, plans

MODELS: plans.PlanModels = {plan.ACTION_TYPE: plan.McpCallPlan}
GOOD: dict[str, Any] = {
    "schemaVersion": 1,
    "actionRef": "act-1",
    "projectId": "p1",
    "server": "tickets",
    "tool": "create_ticket",
    "arguments": {"title": "$(touch x); --help", "n": [1, {"deep": None}]},
}
ROOT = Path(__file__).resolve().parents[2]
DEEP: Any = 1
for _ in range(plan.MAX_DEPTH + 1):
    DEEP = [DEEP]


def _parse(data: dict[str, Any]) -> plans.AnyPlan:
    return plans.parse_plan(plan.ACTION_TYPE, data, models=MODELS)


def test_a_plan_survives_canonical_json_and_its_arguments_are_sensitive() -> None:
    parsed = _parse({**GOOD, "inputSchemaDigest": "a" * 64})
    assert isinstance(parsed, plan.McpCallPlan)
    data = plans.plan_canonical(parsed)
    digest = plans.plan_action_digest(parsed, digests.PLAIN)
    again, _ = plans.resolve_plan(
        plan.ACTION_TYPE, data, approved_digest=digest, models=MODELS, plan_digests=digests.PLAIN
    )
    assert again == parsed
    assert plan.McpCallPlan.SENSITIVE_FIELDS == ("arguments",)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"url": "http://evil"}, "url"),
        ({"server": "../x"}, "server"),
        ({"tool": "a tool; rm -rf"}, "tool"),
        ({"tool": ""}, "tool"),
        ({"arguments": ["not", "an", "object"]}, "arguments"),
        ({"arguments": {"ratio": 0.5}}, None),  # canonical JSON has no floats
        ({"arguments": {"a": DEEP}}, "arguments"),
        ({"inputSchemaDigest": "XYZ"}, "inputSchemaDigest"),
    ],
)
def test_an_inexact_plan_is_refused_without_showing_its_arguments(
    change: dict[str, Any], field: str | None
) -> None:
    with pytest.raises(errors.PlanInvalid) as info:
        _parse({**GOOD, **change})
    if field is not None:
        assert field in str(info.value)
    assert "touch" not in str(info.value)


def _one(table: dict[str, Any]) -> servers.Server:
    loaded = servers.parse({"servers": {"s": {"tools": ["t"], **table}}}, source="f")
    found = loaded.get("s")
    assert found is not None
    return found


def test_a_server_reads_every_field_and_patterns_allow_whole_names() -> None:
    remote = _one(
        {
            "url": "https://mcp.example/mcp",
            "headers": {"x-tenant": "a"},
            "header_secrets": {"Authorization": "credential:mcp-token"},
            "tools": ["tickets_*"],
            "checks": {"tickets_create": {"tool": "tickets_get", "call_key_argument": "key"}},
        }
    )
    assert (remote.transport, remote.allows("tickets_create"), remote.allows("x_tickets_a")) == (
        "http",
        True,
        False,
    )
    assert remote.checks["tickets_create"].key_argument == "key"
    local = _one({"command": [sys.executable, "-m", "x"], "env": ["LANG"]})
    assert (local.transport, local.cwd, local.call_timeout_seconds) == ("stdio", "/", 5.0)
    assert _one({"url": "http://127.0.0.1:8/mcp"}).url == "http://127.0.0.1:8/mcp"
    assert _one({"url": "http://[::1]:8/mcp"}).url == "http://[::1]:8/mcp"


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        ({"url": "http://mcp.example/mcp"}, "servers.s.url: must be https://"),
        ({"url": "http://localhost:8/mcp"}, "servers.s.url: must be https://"),
        ({"url": "https://u:p@mcp.example/"}, "servers.s.url: must not hold a user"),
        ({"url": "https://mcp.example/?token=x"}, "servers.s.url: must have a host and no query"),
        ({"url": "https://a/", "command": ["/bin/true"]}, "exactly one of command and url"),
        ({}, "exactly one of command and url"),
        ({"command": ["sh", "-c", "x"]}, "servers.s.command: must name an absolute"),
        ({"command": ["/nonexistent/x"]}, "servers.s.command: does not start with an executable"),
        ({"url": "https://a/", "env": ["X"]}, "servers.s.env: is for a stdio command only"),
        ({"command": ["/bin/true"], "headers": {"a": "b"}}, "servers.s.headers: is for a url"),
        ({"url": "https://a/", "headers": {"Host": "b"}}, "servers.s.headers: names a header"),
        ({"url": "https://a/", "headers": {"x": "a\nb"}}, "servers.s.headers: values must be"),
        ({"url": "https://a/", "header_secrets": {"x": "plain-value"}}, "a secret reference"),
        ({"url": "https://a/", "tools": []}, "servers.s.tools: must list"),
        ({"url": "https://a/", "call_timeout_seconds": 0}, "call_timeout_seconds: must be > 0"),
        ({"url": "https://a/", "max_output_bytes": 0}, "max_output_bytes: must be between"),
        ({"url": "https://a/", "checks": {"t": {"tool": "t"}}}, "is the tool itself"),
        ({"url": "https://a/", "checks": {"u": {"tool": "g"}}}, "a tool the server's tools do"),
        ({"url": "https://a/", "shell": True}, "servers.s.shell: unknown field"),
    ],
)
def test_a_bad_server_is_refused_in_one_line_naming_the_field(
    table: dict[str, Any], reason: str
) -> None:
    with pytest.raises(servers.McpConfigInvalid) as info:
        _one(table)
    assert reason in str(info.value)
    assert "\n" not in str(info.value)
    assert "plain-value" not in str(info.value)
    assert "u:p" not in str(info.value)


def test_the_timeouts_must_fit_in_the_execute_timeout_with_room_to_close() -> None:
    loaded = servers.parse({"servers": {"s": {"url": "https://a/", "tools": ["t"]}}}, source="f")
    loaded.require_within(15)  # 2 + 2 + 5 + 4.5 < 15
    with pytest.raises(servers.McpConfigInvalid, match="below the execute timeout"):
        loaded.require_within(13.5)


def test_arguments_are_checked_against_the_schema_and_the_approved_digest() -> None:
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": False,
    }
    listed = tools.ListedTool(name="t", input_schema=schema, hints=tools.hints_of(None))
    assert listed.refusal({"title": "a"}, None) is None
    assert listed.refusal({"title": "a"}, tools.schema_digest(schema)) is None
    assert listed.refusal({"title": 1}, None) == "mcp_arguments_invalid"
    assert listed.refusal({"title": "a", "extra": 1}, None) == "mcp_arguments_invalid"
    assert listed.refusal({"title": "a"}, "0" * 64) == "mcp_schema_drift"
    broken = tools.ListedTool(name="t", input_schema={"type": 5}, hints={})
    assert broken.refusal({}, None) == "mcp_schema_invalid"
    assert tools.hints_of({"readOnlyHint": "yes", "destructiveHint": False}) == {
        "readOnlyHint": None,
        "destructiveHint": False,
        "idempotentHint": None,
        "openWorldHint": None,
    }


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_the_sdk_is_imported_only_by_a_process_with_servers() -> None:
    done = _python(
        "import sys\n"
        "from qinglong_dispatcher import cli, console\n"
        "from qinglong_dispatcher.actions import builtin\n"
        "assert 'mcp' not in sys.modules and 'httpx2' not in sys.modules, 'imported'\n"
    )
    assert done.returncode == 0, done.stderr


def test_without_the_sdk_a_servers_file_is_one_typed_error(tmp_path: Path) -> None:
    config = tmp_path / "mcp.toml"
    config.write_text('[servers.s]\nurl = "https://a/"\ntools = ["t"]\n', encoding="utf-8")
    done = _python(
        "import sys\n"
        "sys.modules['mcp'] = None  # as if the [mcp] extra were not installed\n"
        "from qinglong_dispatcher.actions import contract, mcp_call\n"
        "from qinglong_dispatcher.actions.mcp_call import settings\n"
        "from qinglong_dispatcher import clock\n"
        f"given = settings.McpCallSettings(mcp_servers_file={str(config)!r})\n"
        "ctx = contract.BuiltInContext(store=None, clock=clock.SystemClock(), profile='edge',\n"
        "    settings={settings.McpCallSettings: given})\n"
        "try:\n"
        "    mcp_call.ACTION.handler(ctx)\n"
        "except mcp_call.McpSdkMissing as exc:\n"
        "    print(exc.code, exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("mcp_sdk_missing ")
    assert "qinglong-dispatcher[mcp]" in done.stdout
