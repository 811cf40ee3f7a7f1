"""Every file argument is read with a cap (never more than cap + 1 bytes): `/dev/zero` or a
huge file is refused at once in one line, writing nothing; and JSONL splits on `\\n` only."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from qinglong_dispatcher import bounded_files
from qinglong_dispatcher.domain import canonical
from tests.support.cli import json_out, run_cli

TABLES = ("action_plans", "approval_requests", "security_audit_events")
PLAN_ARGS = ("approval", "create", "--action", "run.create", "--requested-by", "w", "--plan")
JSONL_ARGS = ("submit", "run-create", "--from-jsonl")
GOOD = {"projectId": "p1", "taskId": "t1", "taskRevision": 1}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("files")
    assert run_cli("migrate", cwd=path).returncode == 0
    return path


def _written(workdir: Path) -> tuple[int, ...]:
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    try:
        return tuple(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES)
    finally:
        conn.close()


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr[-500:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]


def _sparse(path: Path, size: int) -> Path:
    """A file of `size` zero bytes that costs no disk."""
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


@pytest.mark.parametrize(
    ("args", "cap", "code"),
    [
        (PLAN_ARGS, canonical.PLAN_MAX_BYTES, 2),
        (JSONL_ARGS, bounded_files.JSONL_MAX_BYTES, 2),
        (("--config",), bounded_files.CONFIG_MAX_BYTES, 78),
    ],
    ids=["plan", "from-jsonl", "config"],
)
@pytest.mark.parametrize("source", ["dev-zero", "big-file"])
def test_an_endless_or_oversized_file_argument_is_one_line_and_writes_nothing(
    workdir: Path, args: tuple[str, ...], cap: int, code: int, source: str
) -> None:
    if source == "dev-zero":
        if args == ("--config",):
            pytest.skip("--config refuses anything but a regular file before reading it")
        path = Path("/dev/zero")
    else:
        path = _sparse(workdir / f"big-{args[-1].lstrip('-')}", cap + 1)
    before = _written(workdir)
    command = (*args, str(path)) if args != ("--config",) else ("--config", str(path), "status")
    # The timeout is the bound's proof: an unbounded read of /dev/zero never returns.
    line = _one_line(run_cli(*command, cwd=workdir, timeout=30), code)
    assert str(path) in line
    assert f"larger than {cap} bytes" in line
    assert _written(workdir) == before


def test_a_file_at_its_cap_is_read_whole(workdir: Path) -> None:
    # The config cap: a valid TOML comment padding the file to exactly the cap is accepted.
    config = workdir / "at-cap.toml"
    head = b'log_level = "info"\n#'
    config.write_bytes(head + b"x" * (bounded_files.CONFIG_MAX_BYTES - len(head)))
    assert run_cli("--config", str(config), "status", cwd=workdir).returncode == 0


@pytest.mark.parametrize("separator", ["\x85", "\u2028", "\u2029"])
def test_a_unicode_line_separator_inside_a_json_string_does_not_split_the_line(
    workdir: Path, separator: str
) -> None:
    path = workdir / "separator.jsonl"
    line = json.dumps({**GOOD, "taskName": f"a{separator}b"}, ensure_ascii=False)
    path.write_text(json.dumps(GOOD) + "\n" + line + "\n", encoding="utf-8")
    before = _written(workdir)
    refusal = _one_line(run_cli(*JSONL_ARGS, str(path), cwd=workdir), 2)
    # Parsed whole, the line reaches the field check; cut in two it would be bad JSON.
    assert f"{path}:2:" in refusal
    assert "taskName" in refusal
    assert _written(workdir) == before


@pytest.mark.parametrize("separator", ["\v", "\f", "\x1c", "\x1d", "\x1e"])
def test_an_ascii_separator_inside_a_json_string_is_one_bad_line_not_two(
    workdir: Path, separator: str
) -> None:
    path = workdir / "control.jsonl"
    line = '{"projectId":"p1","taskId":"t1","taskRevision":1,"taskName":"a' + separator + 'b"}'
    path.write_text(json.dumps(GOOD) + "\n" + line + "\n", encoding="utf-8")
    before = _written(workdir)
    refusal = _one_line(run_cli(*JSONL_ARGS, str(path), cwd=workdir), 2)
    # JSON forbids a raw control character in a string; the position proves the whole
    # line was parsed (a split would report an unterminated string instead).
    assert f"{path}:2:" in refusal
    assert "Invalid control character" in refusal
    assert f"character {line.index(separator)})" in refusal
    assert _written(workdir) == before


def test_crlf_line_ends_are_accepted_and_a_lone_vertical_tab_is_not_blank(
    workdir: Path,
) -> None:
    path = workdir / "crlf.jsonl"
    path.write_bytes(
        b"".join(json.dumps({**GOOD, "taskId": f"c{i}"}).encode() + b"\r\n" for i in range(3))
    )
    rows = json_out(run_cli(*JSONL_ARGS, str(path), "--json", cwd=workdir))
    assert len(rows) == 3
    path.write_text(json.dumps({**GOOD, "taskId": "v1"}) + "\n\v\n", encoding="utf-8")
    before = _written(workdir)
    refusal = _one_line(run_cli(*JSONL_ARGS, str(path), cwd=workdir), 2)
    assert f"{path}:2:" in refusal
    assert _written(workdir) == before
