"""Unknown `QINGLONG_*` variables are refused with a suggestion; every variable the product,
its Makefile, its tests, docs and examples read stays accepted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qinglong_dispatcher.config import environment, settings
from qinglong_dispatcher.domain import errors
from tests.support.cli import error_lines, run_cli

ROOT = Path(__file__).resolve().parents[2]
VARIABLE = re.compile(r"\bQINGLONG_[A-Z0-9_]*[A-Z0-9]\b")
# Tokens that look like variables but are placeholders in prose, or typos a test sets on
# purpose to be refused.
NOT_VARIABLES = {"QINGLONG_NAME", "QINGLONG_PAGESIZE", "QINGLONG_CADENSE_SECONDS"}
NOT_VARIABLES |= {"QINGLONG_NO_SUCH_THING"}


def _error(environ: dict[str, str]) -> str:
    with pytest.raises(errors.ConfigurationError) as caught:
        settings.load_settings(environ=environ)
    message = str(caught.value)
    assert "\n" not in message
    return message


def _named_in_the_repository() -> dict[str, set[str]]:
    """Every `QINGLONG_…` token in the code, tests, Makefile, CI, deploy files, docs and the
    example, with the files naming it."""
    places = [ROOT / "Makefile", ROOT / ".ci" / "run", ROOT / "README.md"]
    for folder in (
        "qinglong_dispatcher",
        "bench",
        "tests",
        "examples",
        "deploy",
        "docs",
        "profiles",
    ):
        places += [p for p in (ROOT / folder).rglob("*") if p.is_file() and ".venv" not in p.parts]
    found: dict[str, set[str]] = {}
    for path in places:
        if path.suffix in {".pyc", ".png", ".db"} or not path.exists():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for name in VARIABLE.findall(text):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_a_misspelt_setting_variable_is_refused_naming_the_setting_it_meant() -> None:
    message = _error({"QINGLONG_PAGESIZE": "32"})
    assert message.startswith("QINGLONG_PAGESIZE: unknown QINGLONG_ variable")
    assert "did you mean QINGLONG_PAGE_SIZE?" in message


def test_an_unknown_variable_with_no_close_setting_is_refused_without_a_guess() -> None:
    message = _error({"QINGLONG_NO_SUCH_THING": "1"})
    assert "unknown QINGLONG_ variable" in message
    assert "did you mean" not in message


def test_installed_actions_own_the_action_prefix_and_other_prefixes_are_not_ours() -> None:
    loaded = settings.load_settings(
        environ={"QINGLONG_ACTION_NOTE_DIR": "/x", "QINGLONGX": "1", "PATH": "/bin"}
    )
    assert loaded.profile == "edge"


def test_every_variable_the_product_makefile_tests_and_docs_read_is_accepted() -> None:
    setting_names = [settings.env_name(f) for f in settings.Settings.model_fields]
    named = _named_in_the_repository()
    refused = {}
    for name, files in sorted(named.items()):
        if name in NOT_VARIABLES:
            continue
        try:
            environment.refuse_unknown({name: "1"}, setting_names)
        except errors.ConfigurationError:
            refused[name] = sorted(files)
    assert refused == {}
    # The allow-list holds nothing stale: each of its names is read by code (not only prose).
    read_by_code = {
        name
        for name, files in named.items()
        if any(not f.endswith(".md") and not f.endswith("environment.py") for f in files)
    }
    assert read_by_code >= environment.NOT_SETTINGS
    assert {
        "QINGLONG_DATABASE_URL_FILE",
        "QINGLONG_BENCH_PG_URL",
        "QINGLONG_TEST_PG_DSN",
    } <= environment.NOT_SETTINGS


def test_the_cli_refuses_an_unknown_variable_in_one_line_with_exit_78(tmp_path: Path) -> None:
    result = run_cli("status", cwd=tmp_path, env={"QINGLONG_CADENSE_SECONDS": "1"})
    assert result.returncode == 78, result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "QINGLONG_CADENSE_SECONDS" in lines[0]
    assert "did you mean QINGLONG_CADENCE_SECONDS?" in lines[0]
    assert not (tmp_path / "var").exists()
