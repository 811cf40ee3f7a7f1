"""OpenTelemetry is the `otel` extra: with the `OTEL_*` variables set and the extra missing, a
command says in one line which extra it needs (exit 78), never a traceback; with a variable
naming what cannot be exported, one line naming the variable (exit 78).

As in test_cluster_extra, the command runs in a new process whose import system answers for
`opentelemetry` exactly what a missing package answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WITHOUT_OTEL = """
import sys

class NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] != "opentelemetry":
            return None
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoOpenTelemetry())
sys.argv[0] = "qinglong-dispatcher"
from qinglong_dispatcher import console
sys.exit(console.main())
"""


def _run(tmp_path: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("QINGLONG_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL, *argv],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


STATUS = ("--profile", "edge", "--database", "sqlite:///q.db", "status", "--json")


def test_without_the_variables_a_command_runs_without_the_extra(tmp_path: Path) -> None:
    assert _run(tmp_path, {}, "--profile", "edge", "--database", "sqlite:///q.db", "migrate")
    done = _run(tmp_path, {}, *STATUS)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "qinglong-dispatcher[otel]"),
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "PROTOCOL"),
    ],
)
def test_tracing_that_cannot_run_is_one_line_and_exit_78(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    done = _run(tmp_path, env, *STATUS)
    assert done.returncode == 78, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert named in lines[0]
    assert "Traceback" not in done.stderr
