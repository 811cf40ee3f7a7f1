"""deploy/kubernetes/app/prune-cronjob.yaml: one CronJob running `prune` as the pruner login."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from qinglong_dispatcher import cli
from qinglong_dispatcher.commands import prune
from qinglong_dispatcher.domain import retention

CRONJOB = (
    Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "app" / "prune-cronjob.yaml"
)


def _cronjob() -> dict[str, Any]:
    with CRONJOB.open(encoding="utf-8") as f:
        (doc,) = [d for d in yaml.safe_load_all(f) if d is not None]
    assert doc["kind"] == "CronJob"
    return dict(doc)


def test_the_cronjob_runs_prune_on_the_cluster_profile_once_at_a_time() -> None:
    doc = _cronjob()
    assert doc["spec"]["concurrencyPolicy"] == "Forbid"
    assert len(doc["spec"]["schedule"].split()) == 5
    pod = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[:3] == ["--profile", "cluster", "prune"]
    # The real parser accepts the arguments, and they mean what the comment says.
    parsed = cli.build_parser().parse_args(args)
    handler = parsed.handler
    assert (handler.__module__, handler.__name__) == (prune.__name__, prune.cmd_prune.__name__)
    assert parsed.older_than == 14 * retention.DAY_MS
    assert parsed.audit_older_than == 365 * retention.DAY_MS
    assert not parsed.dry_run


def test_the_cronjob_connects_as_the_pruner_login_not_the_runtime() -> None:
    pod = _cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    ref = env["QINGLONG_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "qinglong-dispatcher-pruner", "key": "database-url"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
