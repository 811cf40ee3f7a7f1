"""Every command group's `--help` lists each of its subcommands with a line of help."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.cli import run_cli

GROUPS = {
    "approval": {"create", "approve", "vote", "reject", "consume", "show", "list"},
    "submit": {"run-create", "tool-invoke"},
    "dispatch": {"list", "show", "cancel", "resubmit", "lift-freeze"},
    "freeze": {"add", "list", "end"},
    "recovery": {"list", "resolve"},
}


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_groups_help_lists_every_subcommand_with_its_help(tmp_path: Path, group: str) -> None:
    result = run_cli(group, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    listed = set(re.findall(r"^ {4}([a-z-]+) {2,}\S", result.stdout, flags=re.MULTILINE))
    assert listed == GROUPS[group], result.stdout
