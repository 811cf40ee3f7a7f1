"""The evidence of an uncertain `command.run` in the API and in a real browser (Debian's
Chromium, headless, driven by Playwright), on both dialects: a real command exits 1 after
writing a secret and a sensitive argument to stderr; the dispatcher keeps what it knew; the
dispatch page shows the exit code, signal, duration and redacted stderr head, recovery's
verdict in words and the ledger's `recovery_required` line beside the settle form; an
operator settles it there and the ledger names the operator's principal. Neither secret is in
the database's evidence, the API's answer, the page or the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import structlog.testing
from playwright.async_api import async_playwright

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.command_run import commands, evidence, handler, plan
from qinglong_dispatcher.domain import plans
from qinglong_dispatcher.recovery import reconciler
from tests.e2e.test_ui_browser import VIEWPORT, Ui, served, shots
from tests.support import system_tools
from tests.support.actions import make_api
from tests.support.api_writes import Served
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher

__all__ = ["served", "shots"]  # the fixtures of the browser test, shared

MODELS: plans.PlanModels = {plan.ACTION_TYPE: plan.CommandRunPlan}
SECRET = "tok-evidence-9c41"
HIDDEN = "pa55-hidden-arg"


def _commands(tmp_path: Path) -> commands.CommandSet:
    script = tmp_path / "fail-loud"
    script.write_text('#!/bin/sh\necho "token=$TOKEN arg=$2 refused" >&2\nexit 1\n')
    script.chmod(0o755)
    table: dict[str, Any] = {
        "fail-loud": {
            "executable": str(script),
            "args": [{"pattern": "[a-z-]+"}, {"pattern": ".*", "sensitive": True}],
            "env_secrets": {"TOKEN": "env:QL_TEST_TOKEN"},
        }
    }
    return commands.parse({"commands": table}, source="test")


async def _uncertain_run(it: Served, tmp_path: Path, past: ManualClock) -> tuple[str, str]:
    """Dispatch one failing command through the real dispatcher: its id and the log text."""
    run_plan = plans.parse_plan(
        plan.ACTION_TYPE,
        {
            "schemaVersion": 1,
            "actionRef": "evidence-1",
            "projectId": "shop",
            "command": "fail-loud",
            "args": ["route", HIDDEN],
        },
        models=MODELS,
    )
    (consumed,) = await make_api(it.harness.approver_store, past).submit(
        [run_plan], requested_by="tester", approved_by="approver"
    )
    reader = contract.PlanReader(it.harness.store, MODELS)
    configured = _commands(tmp_path)
    environ = {"QL_TEST_TOKEN": SECRET, "PATH": "/usr/bin:/bin"}
    run = handler.CommandRunHandler(reader, configured, past, environ=environ)
    handlers: dict[str, ports.ApprovedActionHandler] = {plan.ACTION_TYPE: run}
    # The command has no check: its provider can only say that no automatic evidence exists.
    providers = {plan.ACTION_TYPE: evidence.CommandRunEvidence(reader, configured)}
    with structlog.testing.capture_logs() as logs:
        done = await make_dispatcher(it.harness.store, past, handlers=handlers).dispatch_batch()
        assert done.outcomes == {"uncertain": 1}
        # The lease ran out an hour ago on the real clock: the recovery pass observes it.
        passed = await reconciler.Reconciler(it.harness.store, providers, it.clock).reconcile_pass()
        assert passed.observed == 1
    return consumed.dispatch_id, json.dumps(logs, default=str)


async def test_an_uncertain_command_shows_its_evidence_beside_the_settle_form(
    served: Served, shots: Path, tmp_path: Path
) -> None:
    chromium = system_tools.chromium()
    it = served
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    dispatch_id, logged = await _uncertain_run(it, tmp_path, past)
    stored = json.dumps(
        [
            await it.harness.raw(f"SELECT * FROM {it.table(name)}")
            for name in ("uncertain_outcomes", "recovery_observations", "recovery_required_marks")
        ],
        default=str,
    )
    assert "[redacted]" in stored

    # The API gives what the daemon knew and recovery's verdict, to a viewer.
    status, _, body = await it.call("GET", f"/dispatches/{dispatch_id}", "vic")
    assert status == 200, body
    assert body["execution"]["effective_status"] == "recovery_required"
    lost = body["uncertain"]
    assert (lost["result_code"], lost["evidence"]["exitCode"], lost["evidence"]["signal"]) == (
        "command_exit_uncertain",
        1,
        None,
    )
    assert isinstance(lost["evidence"]["durationMs"], int)
    assert lost["evidence"]["stderrHead"] == "token=[redacted] arg=[redacted] refused\n"
    assert body["verdicts"][0].startswith("no automatic evidence for this action: check the target")
    assert [e["to_status"] for e in body["events"]][-2:] == ["executing", "recovery_required"]
    assert body["events"][-1]["noticed_by"] == "recovery_pass"

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(15_000)
            ui = Ui(page, it, shots)
            # A viewer sees the evidence and no settle form.
            await ui.sign_in("vic")
            await page.goto(f"{ui.base}/ui/dispatches/{dispatch_id}")
            seen = await page.locator("section.evidence").text_content() or ""
            assert "token=[redacted] arg=[redacted] refused" in seen
            assert await page.locator("section.evidence form").count() == 0
            await ui.sign_out()
            await ui.sign_in("carol")
            await page.goto(f"{ui.base}/ui/dispatches/{dispatch_id}")
            section = page.locator("section.evidence")
            text = await section.text_content() or ""
            for shown in (
                "no automatic evidence for this action: check the target",
                "What the daemon knew when it lost track",
                "command_exit_uncertain",
                "exit code",
                "token=[redacted] arg=[redacted] refused",
                "duration (ms)",
            ):
                assert shown in text, shown
            timeline = await page.text_content("ol.timeline") or ""
            assert "recovery_required" in timeline
            html = await page.content()
            await page.locator("#evidence-h").evaluate("h => h.scrollIntoView()")
            await ui.shot("evidence")

            # The settle form sits beside the evidence: the operator settles it there.
            await section.locator("select[name=as]").select_option("failed")
            await section.locator("input[name=reason]").fill("checked_target")
            await section.locator("button", has_text="Settle…").click()
            await page.click("main button:has-text('Settle')")
            assert await page.text_content("h1") == "Settled"
            await page.goto(f"{ui.base}/ui/dispatches/{dispatch_id}")
            last = await page.locator("ol.timeline li").last.text_content() or ""
            assert "failed" in last
            assert it.names["carol"] in last, last
            assert "settled by" in last
            html += await page.content()
        finally:
            await browser.close()

    status, _, after = await it.call("GET", f"/dispatches/{dispatch_id}", "vic")
    assert after["events"][-1]["settled_principal"] == it.names["carol"]
    assert after["events"][-1]["lease_owner"] != it.names["carol"]
    for secret in (SECRET, HIDDEN):
        for where, text in (
            ("database", stored),
            ("api", json.dumps(body) + json.dumps(after)),
            ("page", html),
            ("log", logged),
        ):
            assert secret not in text, where
