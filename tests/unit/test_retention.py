"""Retention values: durations, cutoffs, settings, and the SQL's idea of a terminal status."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qinglong_dispatcher import bootstrap, resources
from qinglong_dispatcher.adapters import named_sql
from qinglong_dispatcher.adapters.postgres import queries as pg_queries
from qinglong_dispatcher.adapters.sqlite import queries as sqlite_queries
from qinglong_dispatcher.config import settings
from qinglong_dispatcher.domain import errors, retention, states

_ACTIONS = bootstrap.builtin_tables().statements
SQLITE_BLOCKS = sqlite_queries.load(_ACTIONS)
PG_BLOCKS = named_sql.load_dialect(Path(pg_queries.__file__).parent, "postgres", _ACTIONS)

CLUSTER = {"QINGLONG_PROFILE": "cluster", "QINGLONG_DATABASE_URL": "postgresql://x@h/db"}


@pytest.mark.parametrize(
    ("text", "ms"),
    [("7d", 7 * 86_400_000), ("12h", 12 * 3_600_000), ("30m", 30 * 60_000), (" 1d ", 86_400_000)],
)
def test_a_duration_is_days_hours_or_minutes(text: str, ms: int) -> None:
    assert retention.parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["0d", "0m", "-1d", "7", "d", "1.5d", "7s", "7 d", "1w", ""])
def test_a_bad_duration_is_invalid_input(text: str) -> None:
    with pytest.raises(errors.InvalidInput):
        retention.parse_duration_ms(text)


def test_cutoffs_subtract_each_retention_and_refuse_zero() -> None:
    cutoffs = retention.Cutoffs.at(10_000, retention_ms=1_000, audit_retention_ms=5_000)
    assert cutoffs == retention.Cutoffs(dispatch_before_ms=9_000, audit_before_ms=5_000)
    with pytest.raises(errors.InvalidInput):
        retention.Cutoffs.at(10_000, retention_ms=0, audit_retention_ms=5_000)


def test_edge_prunes_after_14_days_and_the_cluster_daemon_never() -> None:
    edge = settings.load_settings(environ={})
    assert (edge.retention_days, edge.audit_retention_days) == (14, 365)
    assert settings.load_settings(environ=CLUSTER).retention_days == 0
    off = settings.load_settings(environ={"QINGLONG_RETENTION_DAYS": "0"})
    assert off.retention_days == 0


@pytest.mark.parametrize(
    ("environ", "start"),
    [
        (
            {**CLUSTER, "QINGLONG_RETENTION_DAYS": "7"},
            "QINGLONG_RETENTION_DAYS: applies to the edge",
        ),
        (
            {"QINGLONG_RETENTION_DAYS": "30", "QINGLONG_AUDIT_RETENTION_DAYS": "7"},
            "QINGLONG_AUDIT_RETENTION_DAYS: must be at least QINGLONG_RETENTION_DAYS",
        ),
        ({"QINGLONG_RETENTION_DAYS": "-1"}, "QINGLONG_RETENTION_DAYS: must be between 0 and 36500"),
        ({"QINGLONG_AUDIT_RETENTION_DAYS": "0"}, "QINGLONG_AUDIT_RETENTION_DAYS: must be greater"),
    ],
)
def test_bad_retention_settings_are_one_line(environ: dict[str, str], start: str) -> None:
    with pytest.raises(errors.ConfigurationError) as refused:
        settings.load_settings(environ=environ)
    assert str(refused.value).startswith(start)
    assert "\n" not in str(refused.value)


def _status_lists(text: str) -> list[set[str]]:
    """Every `status IN (…)` / `status = '…' OR …` list of terminal statuses in `text`."""
    found = [
        set(re.findall(r"'([a-z_]+)'", group))
        for group in re.findall(r"status IN \(([^)]*)\)", text)
    ]
    found += [
        set(re.findall(r"status = '([a-z_]+)'", chain))
        for chain in re.findall(r"(?:\w+\.status = '[a-z_]+'(?:\s+OR\s+)?){2,}", text)
    ]
    return found


def test_the_sql_terminal_status_lists_are_the_domains() -> None:
    terminal = {status.value for status in states.TERMINAL}
    assert set(retention.TERMINAL_STATUSES) == terminal
    texts = [
        SQLITE_BLOCKS["prunable_dispatches"],
        PG_BLOCKS["prunable_dispatches"],
        *(
            (resources.migrations_dir(d) / "0009_retention.sql").read_text(encoding="utf-8")
            for d in ("sqlite", "postgres")
        ),
    ]
    for text in texts:
        lists = _status_lists(text)
        assert lists, text[:80]
        assert all(found == terminal for found in lists), lists


def test_the_migration_is_0009_in_both_dialects() -> None:
    for dialect in ("sqlite", "postgres"):
        assert Path(resources.migrations_dir(dialect), "0009_retention.sql").is_file()
