"""deploy/grafana/: the dashboard's queries are valid PromQL over series the daemon exports.

Every panel query, its template variables made concrete, is checked by `promtool check rules`
as a recording rule, and a few are evaluated on made-up series by `promtool test rules`.
Metric names are checked against the exposition of a real `Metrics`, not a list kept here.
promtool is found as in test_deploy.py: absent, these tests skip, except under `CI=true`.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import parser

from qinglong_dispatcher.lifecycle import metrics
from tests.support import system_tools

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "qinglong-dispatcher.json"
PROVISIONING = GRAFANA / "provisioning" / "dashboards.yaml"

ROWS = ["Backlog", "Throughput", "Latency", "Recovery", "Leases", "Health / Clock", "API"]
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# What Grafana substitutes at query time: its interval variables, and the dashboard's own
# `job` and `instance` (a multi-value selection becomes a regex alternation).
_BUILTINS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}
_CHOSEN = {"job": "qinglong-dispatcher.*", "instance": ".*"}
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")

# Series Prometheus writes itself for every target: not the daemon's to export.
_PROMETHEUS_SERIES = {"up"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# A name not followed by `(` (that is a function); possessive by the `(?![\w:])` guard.
_NAME = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def _dashboard() -> dict[str, Any]:
    with DASHBOARD.open(encoding="utf-8") as f:
        loaded: dict[str, Any] = json.load(f)
    return loaded


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _targets() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(panel, target) for panel in _panels() for target in panel["targets"]]


def _concrete(expr: str) -> str:
    """The query as Prometheus receives it once Grafana has substituted the variables."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        known = {**_BUILTINS, **_CHOSEN}
        assert name in known, f"unknown variable ${name} in {expr!r}"
        return known[name]

    return _VARIABLE.sub(value, expr)


def _metric_names(expr: str) -> set[str]:
    """Series names a PromQL expression selects (functions, labels and keywords left out)."""
    bare = _STRING.sub('""', expr)
    bare = _MATCHERS.sub("", bare)
    bare = _RANGE.sub("", bare)
    bare = _GROUPING.sub("", bare)
    return {name for name in _NAME.findall(bare) if name.lower() not in _KEYWORDS}


def _exposed() -> set[str]:
    """Every sample name a daemon serves on /metrics once its API answered a request (the
    latency histogram's samples exist per route, from its first request)."""
    served = metrics.Metrics(profile="cluster", cadence_s=5.0)
    served.api.observe_request(method="GET", route="/api/v1/status", status=200, seconds=0.01)
    text = served.render().decode()
    return {
        s.name for family in parser.text_string_to_metric_families(text) for s in family.samples
    }


def _expr(title: str, ref: str = "A") -> str:
    (target,) = [t for p, t in _targets() if p["title"] == title and t["refId"] == ref]
    expr: str = target["expr"]
    return _concrete(expr)


def _promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, check=False)


# --- the dashboard's shape -------------------------------------------------------------------


def test_dashboard_is_a_grafana_model_with_the_issue_rows() -> None:
    board = _dashboard()
    assert board["uid"] == "qinglong-dispatcher"
    assert board["schemaVersion"] == 39
    assert board["id"] is None, "an exported id would clash on import"
    panels = board["panels"]
    assert [p["title"] for p in panels if p["type"] == "row"] == ROWS
    assert panels[0]["type"] == "row"
    kinds = [p["type"] for p in panels]
    assert all(a != "row" or b != "row" for a, b in itertools.pairwise(kinds))
    assert kinds[-1] != "row", "an empty last row"
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in _dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_variables_pick_a_prometheus_then_job_and_instance() -> None:
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert list(variables) == ["datasource", "job", "instance"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("job", "instance"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"] == DATASOURCE
        assert variables[name]["multi"]
        assert variables[name]["includeAll"]
        # Without allValue, "All" is the alternation of the values found, not every job.
        assert "allValue" not in variables[name]
        query = variables[name]["query"]["query"]
        assert query == variables[name]["definition"]
        (metric,) = re.findall(r"label_values\((\w+)", query)
        assert metric in _exposed(), metric


def test_every_panel_queries_the_chosen_datasource() -> None:
    for panel in _panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), f"{panel['title']} {target['refId']} has no expr"
            # Every selector is narrowed to the chosen job and instance.
            for selector in _MATCHERS.findall(target["expr"]):
                assert 'job=~"$job"' in selector, (panel["title"], selector)
                assert 'instance=~"$instance"' in selector, (panel["title"], selector)


def test_the_name_finder_sees_series_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="b c"}[1m] offset 5m))) '
        "/ on (job) group_left (version) b_info * 1e3 > bool c:rule"
    )
    assert _metric_names(expr) == {"a_bucket", "b_info", "c:rule"}


def test_every_panel_names_series_the_daemon_exposes() -> None:
    exposed = _exposed() | _PROMETHEUS_SERIES
    for panel, target in _targets():
        names = _metric_names(_concrete(target["expr"]))
        assert names, f"{panel['title']} {target['refId']} selects no series"
        assert names <= exposed, (panel["title"], names - exposed)


def test_dashboard_covers_the_issue_signals() -> None:
    used = {name for _, t in _targets() for name in _metric_names(_concrete(t["expr"]))}
    for name in (
        "qinglong_dispatcher_due",
        "qinglong_dispatcher_oldest_due_age_seconds",
        "qinglong_dispatcher_outcomes_total",
        "qinglong_dispatcher_batch_duration_seconds_bucket",
        "qinglong_dispatcher_executing",
        "qinglong_dispatcher_recovery_required",
        "qinglong_dispatcher_lease_renewals_total",
        "qinglong_dispatcher_clock_skew_seconds",
        "qinglong_dispatcher_clock_skew_refusals_total",
        "qinglong_dispatcher_ticks_total",
        "qinglong_dispatcher_tick_failures_total",
        "qinglong_dispatcher_last_successful_tick_timestamp_seconds",
    ):
        assert name in used, name


def test_every_pruned_family_is_on_the_prune_panel() -> None:
    """What the edge daemon's prune deleted, each kind it counts: a new kind of pruned row
    gets its line, or this fails."""
    pruned = {name for name in _exposed() if name.startswith("qinglong_dispatcher_pruned_")}
    (panel,) = [p for p in _panels() if p["title"] == "Pruned (edge self-prune)"]
    shown = {name for t in panel["targets"] for name in _metric_names(_concrete(t["expr"]))}
    assert len(pruned) >= 4, pruned
    assert shown == pruned, pruned ^ shown


def test_provisioning_points_grafana_at_a_dashboard_folder() -> None:
    with PROVISIONING.open(encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    assert doc["apiVersion"] == 1
    (provider,) = doc["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"].startswith("/")


# --- promtool ----------------------------------------------------------------------------------


def _recording_rules(exprs: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "groups": [
            {
                "name": "qinglong-dispatcher-dashboard",
                "rules": [{"record": record, "expr": expr} for record, expr in exprs],
            }
        ]
    }


def test_promtool_check_rules_of_every_panel_query(tmp_path: Path) -> None:
    promtool = system_tools.tool("promtool", required_in_ci=True)
    # The checker must refuse a broken query, or a clean result below proves nothing.
    broken = tmp_path / "broken.yml"
    broken.write_text(
        yaml.safe_dump(_recording_rules([("x:y", "sum(rate(x[1m])")])), encoding="utf-8"
    )
    assert _promtool(promtool, "check", "rules", str(broken)).returncode != 0
    exprs = [
        (f"qinglong_dashboard:panel{panel['id']}_{target['refId'].lower()}", target["expr"])
        for panel, target in _targets()
    ]
    rules = tmp_path / "dashboard_rules.yml"
    rules.write_text(
        yaml.safe_dump(_recording_rules([(r, _concrete(e)) for r, e in exprs]), sort_keys=False),
        encoding="utf-8",
    )
    done = _promtool(promtool, "check", "rules", str(rules))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in done.stdout, done.stdout


def _series(name: str, instance: str) -> str:
    # A `node:*` instance stands for another job's target, which the job filter must drop.
    job = "node" if instance.startswith("node:") else "qinglong-dispatcher-kubernetes"
    labels = f'job="{job}",instance="{instance}"'
    if name.endswith("}"):
        return f"{name[:-1]},{labels}}}"
    return f"{name}{{{labels}}}"


_BUCKET = "qinglong_dispatcher_batch_duration_seconds_bucket"

# Each case: a panel query, input series (scraped every 15 s), when to look, what it shows.
_EVALUATIONS: list[tuple[str, str, list[tuple[str, str, str]], list[tuple[str, float]]]] = [
    # A store-wide gauge: the largest replica's report, per job; other jobs left out.
    (
        "Oldest due age",
        "A",
        [
            ("qinglong_dispatcher_oldest_due_age_seconds", "pod-a:9464", "120x20"),
            ("qinglong_dispatcher_oldest_due_age_seconds", "pod-b:9464", "90x20"),
            ("qinglong_dispatcher_oldest_due_age_seconds", "node:9100", "999x20"),
        ],
        [('{job="qinglong-dispatcher-kubernetes"}', 120)],
    ),
    # 30 per 15 s on one replica and 15 per 15 s on another: 3 successes a second in all.
    (
        "Dispatch outcomes per second",
        "A",
        [
            (
                'qinglong_dispatcher_outcomes_total{action_type="run.create",outcome="succeeded"}',
                "pod-a:9464",
                "0+30x20",
            ),
            (
                'qinglong_dispatcher_outcomes_total{action_type="run.create",outcome="succeeded"}',
                "pod-b:9464",
                "0+15x20",
            ),
            (
                'qinglong_dispatcher_outcomes_total{action_type="run.create",outcome="failed"}',
                "pod-a:9464",
                "0+15x20",
            ),
        ],
        [
            ('{action_type="run.create",outcome="failed"}', 1),
            ('{action_type="run.create",outcome="succeeded"}', 3),
        ],
    ),
    # One tick a second, a fifth of them failed.
    (
        "Ticks per second",
        "A",
        [
            ("qinglong_dispatcher_ticks_total", "pod-a:9464", "0+15x20"),
            ("qinglong_dispatcher_tick_failures_total", "pod-a:9464", "0+3x20"),
        ],
        [('{instance="pod-a:9464"}', 0.8)],
    ),
    # Every batch between 5 and 10 ms: the median interpolates to the middle of that bucket.
    (
        "Batch duration",
        "A",
        [
            (_BUCKET + '{le="0.005"}', "pod-a:9464", "0x20"),
            (_BUCKET + '{le="0.01"}', "pod-a:9464", "0+15x20"),
            (_BUCKET + '{le="+Inf"}', "pod-a:9464", "0+15x20"),
        ],
        [("{}", 0.0075)],
    ),
    # Ticks stop at 150 s; at 240 s with a 30 s cadence the last good tick is 3 cadences old.
    (
        "Last successful tick age, in cadences",
        "A",
        [
            (
                "qinglong_dispatcher_last_successful_tick_timestamp_seconds",
                "pod-a:9464",
                "0+15x10 150x10",
            ),
            ("qinglong_dispatcher_cadence_seconds", "pod-a:9464", "30x20"),
        ],
        [('{job="qinglong-dispatcher-kubernetes",instance="pod-a:9464"}', 3)],
    ),
]


def test_promtool_test_rules_evaluates_panel_queries(tmp_path: Path) -> None:
    promtool = system_tools.tool("promtool", required_in_ci=True)
    tests = []
    for title, ref, inputs, expected in _EVALUATIONS:
        series = [
            {"series": _series(name, instance), "values": values}
            for name, instance, values in inputs
        ]
        tests.append(
            {
                "interval": "15s",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": _expr(title, ref),
                        "eval_time": "4m",
                        "exp_samples": [{"labels": lb, "value": v} for lb, v in expected],
                    }
                ],
            }
        )
    spec = tmp_path / "dashboard_test.yml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [], "tests": tests}, sort_keys=False), encoding="utf-8"
    )
    done = _promtool(promtool, "test", "rules", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
