"""System tools some tests run (promtool, systemd-analyze, Chromium): found, skipped, or
required in CI."""

from __future__ import annotations

import os
import shutil

import pytest


def tool(name: str, *, required_in_ci: bool) -> str:
    """The tool's path; without it the test skips with the reason, except under `CI=true` for
    a tool `.ci/run` installs, where a missing one fails the test."""
    found = shutil.which(name)
    if found is not None:
        return found
    if required_in_ci and os.environ.get("CI") == "true":
        pytest.fail(f"{name} is required under CI=true (.ci/run installs Debian's prometheus)")
    pytest.skip(f"{name} is not installed (Debian: apt-get install prometheus / systemd)")


CHROMIUM = "/usr/bin/chromium"


def chromium() -> str:
    """Debian's Chromium for the browser tests (a browser is never downloaded); skipped when it
    is missing, except under `CI=true`, where `.ci/run` installs it."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    if os.environ.get("CI") == "true":
        pytest.fail(f"{CHROMIUM} is required under CI=true (.ci/run installs Debian's chromium)")
    pytest.skip(f"{CHROMIUM} is not installed (Debian: apt-get install chromium)")
