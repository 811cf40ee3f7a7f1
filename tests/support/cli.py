"""Running the real console script as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(sys.executable).with_name("qinglong-dispatcher")


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `qinglong-dispatcher ARGS` in `cwd`; environment without stray QINGLONG_ variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    clean.update(env or {})
    return subprocess.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def json_out(result: subprocess.CompletedProcess[str]) -> Any:
    """The single JSON line a `--json` command printed."""
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


def error_lines(stderr: str) -> list[str]:
    """What a command printed to stderr besides its structured log events (JSON lines)."""
    return [line for line in stderr.strip().splitlines() if not line.startswith("{")]
