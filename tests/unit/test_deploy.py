"""deploy/: every file parses, agrees with the profiles and metrics, and passes the real checkers.

promtool (`promtool check rules`, `promtool test rules`, `promtool check metrics`) and
`systemd-analyze verify` run when they are installed; otherwise those tests skip with a
reason, except under `CI=true`, where a missing promtool fails (.ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from qinglong_dispatcher.config import settings
from qinglong_dispatcher.lifecycle import http, metrics
from tests.support import system_tools

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
UNIT = DEPLOY / "systemd" / "qinglong-dispatcher.service"
KUBERNETES = DEPLOY / "kubernetes"
SECRETS_EXAMPLE = KUBERNETES / "examples" / "secrets.yaml.example"
STEPS = ("migrate", "app", "api", "optional")
"""The kustomizations, each applied with `kubectl apply -k` (`api` instead of `app`)."""
YAML_FILES = sorted(p for p in DEPLOY.rglob("*") if p.suffix in {".yml", ".yaml"})
# What `kubectl apply -f` reads from a folder: these suffixes, nothing else.
APPLIED_SUFFIXES = {".yml", ".yaml", ".json"}
METRIC_NAME = re.compile(r"qinglong_dispatcher_[a-z_]+")


def _profile(name: str) -> dict[str, Any]:
    with (ROOT / "profiles" / f"{name}.toml").open("rb") as f:
        return tomllib.load(f)


def _docs(path: Path) -> list[Any]:
    with path.open(encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def _kind(directory: str, kind: str) -> dict[str, Any]:
    docs: list[dict[str, Any]] = [
        d for p in (DEPLOY / directory).glob("*.yaml") for d in _docs(p) if d["kind"] == kind
    ]
    assert len(docs) == 1, f"one {kind} expected under deploy/{directory}"
    return docs[0]


def _rules() -> list[dict[str, Any]]:
    (doc,) = _docs(ALERTS)
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _unit() -> dict[str, list[str]]:
    """`Section.Key` → every value (systemd allows a key more than once)."""
    values: dict[str, list[str]] = {}
    section = ""
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line!r}"
        values.setdefault(f"{section}.{key}", []).append(value)
    return values


# --- every file parses ---------------------------------------------------------------------


def test_deploy_has_yaml_files() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in YAML_FILES}
    assert {
        "prometheus/alerts.yml",
        "prometheus/scrape.yml",
        "prometheus/scrape-kubernetes.yml",
    } <= names
    assert {
        "kubernetes/namespace.yaml",
        "kubernetes/migrate/kustomization.yaml",
        "kubernetes/migrate/migrate-job.yaml",
        "kubernetes/app/kustomization.yaml",
        "kubernetes/app/deployment.yaml",
        "kubernetes/app/pdb.yaml",
        "kubernetes/optional/servicemonitor.yaml",
    } <= names


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_every_yaml_file_parses(path: Path) -> None:
    docs = _docs(path)
    assert docs, f"{path} is empty"
    assert all(isinstance(doc, dict) for doc in docs)


@pytest.mark.parametrize("path", sorted((ROOT / "profiles").glob("*.toml")), ids=lambda p: p.name)
def test_every_profile_parses_into_settings_fields(path: Path) -> None:
    with path.open("rb") as f:
        values = tomllib.load(f)
    assert set(values) <= set(settings.Settings.model_fields)


def test_env_example_names_real_settings() -> None:
    text = (DEPLOY / "systemd" / "env.example").read_text(encoding="utf-8")
    names = set(re.findall(r"^#?(QINGLONG_[A-Z_]+)=", text, flags=re.MULTILINE))
    known = {settings.env_name(field) for field in settings.Settings.model_fields}
    assert names, "env.example sets nothing"
    assert names <= known
    assert all(line.startswith("#") or not line.strip() for line in text.splitlines())


# --- the files agree with the profiles and each other ---------------------------------------


def test_systemd_unit_fits_the_edge_profile() -> None:
    unit = _unit()
    edge = _profile("edge")
    assert unit["Service.Type"] == ["notify"]
    assert unit["Service.NotifyAccess"] == ["main"]
    # The console script of the venv docs/installation.md installs the wheel and its lock into.
    command = "/opt/qinglong-dispatcher/bin/qinglong-dispatcher"
    assert unit["Service.ExecStart"] == [f"{command} --profile edge run"]
    assert unit["Service.ExecStartPre"] == [f"{command} --profile edge migrate"]
    assert float(unit["Service.TimeoutStopSec"][0]) > edge["shutdown_grace_seconds"]
    assert int(unit["Service.WatchdogSec"][0]) > 2 * edge["cadence_seconds"]
    assert unit["Service.Restart"] == ["on-failure"]
    assert unit["Service.DynamicUser"] == ["yes"]
    state_dirs = unit["Service.StateDirectory"][0].split()
    assert state_dirs[0] == "qinglong-dispatcher"
    assert (
        "QINGLONG_DATABASE_URL=sqlite:////var/lib/qinglong-dispatcher/qinglong.db"
        in (unit["Service.Environment"])
    )
    # The tool sandbox the unit configures is one of the directories systemd creates for it.
    (sandbox,) = [
        e.partition("=")[2]
        for e in unit["Service.Environment"]
        if e.startswith("QINGLONG_TOOL_SANDBOX_DIR=")
    ]
    assert sandbox.removeprefix("/var/lib/") in state_dirs
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert unit[f"Service.{key}"] == ["yes"], key
    assert unit["Service.ProtectSystem"] == ["strict"]
    assert unit["Service.MemoryMax"]


def test_the_edge_install_encrypts_plans_under_a_ring_made_at_install() -> None:
    """Every install path seals plans: the unit loads the ring as the credential the settings'
    default reads, the install steps make it, and the docs back it up beside the database."""
    unit = _unit()
    ring = "/etc/qinglong-dispatcher/credentials/plan-keys"
    assert f"plan-keys:{ring}" in unit["Service.LoadCredential"]
    assert settings.Settings.model_fields["plan_keyring_file"].default_factory is not None
    env_example = (DEPLOY / "systemd" / "env.example").read_text(encoding="utf-8")
    assert "#QINGLONG_PLAN_KEYRING_FILE=/run/credentials/qinglong-dispatcher.service/plan-keys" in (
        env_example
    )
    install = (ROOT / "docs" / "installation.md").read_text(encoding="utf-8")
    edge = install.split("\n## Edge: a router or NAS\n", 1)[1].split("\n## ", 1)[0]
    assert f"keys generate --out {ring}" in edge
    operations = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert "backup --out" in operations
    assert "plan-keys" in operations.split("\n## Backup and restore\n", 1)[1].split("\n## ", 1)[0]
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "keys generate --out var/plan-keys" in make


def test_deployment_fits_the_cluster_profile() -> None:
    cluster = _profile("cluster")
    deployment = _kind("kubernetes/app", "Deployment")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > cluster["shutdown_grace_seconds"]
    (container,) = pod["containers"]
    assert container["args"] == ["--profile", "cluster", "run"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": cluster["metrics_port"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["QINGLONG_DATABASE_URL"]["valueFrom"]
    owner = env["QINGLONG_OWNER_ID"]["valueFrom"]["fieldRef"]
    assert owner == {"fieldPath": "metadata.name"}
    # The schema is migrated by a Job (as an administrator); pods only wait for it.
    job = _kind("kubernetes/migrate", "Job")
    (migrate,) = job["spec"]["template"]["spec"]["containers"]
    assert migrate["args"] == ["--profile", "cluster", "migrate"]
    waits = [" ".join(c["command"]) for c in pod["initContainers"]]
    assert any("migrate --check" in w for w in waits)


def test_the_replicas_and_the_migrate_job_seal_plans_under_the_ring_secret() -> None:
    """The Kubernetes install encrypts by default: every replica and the Job (whose `migrate`
    registers the ring's key ids) mount Secret qinglong-dispatcher-plan-keys where
    QINGLONG_PLAN_KEYRING_FILE points, group-readable as fsGroup makes it."""
    for folder, kind in (("kubernetes/app", "Deployment"), ("kubernetes/migrate", "Job")):
        pod = _kind(folder, kind)["spec"]["template"]["spec"]
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["plan-keys"]["secret"]["secretName"] == "qinglong-dispatcher-plan-keys"
        container = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["plan-keys"]["readOnly"] is True
        ring = env["QINGLONG_PLAN_KEYRING_FILE"]
        assert ring == mounts["plan-keys"]["mountPath"] + "/plan-keys", folder
        assert env["QINGLONG_PLAN_KEYRING_GROUP_READABLE"] == "true"
    command = "create secret generic qinglong-dispatcher-plan-keys"
    assert command in SECRETS_EXAMPLE.read_text(encoding="utf-8")
    assert command in (ROOT / "docs" / "installation.md").read_text(encoding="utf-8")


def test_pdb_service_and_monitor_select_the_pods() -> None:
    labels = _kind("kubernetes/app", "Deployment")["spec"]["template"]["metadata"]["labels"]

    def selects(selector: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in selector.items())

    assert selects(
        _kind("kubernetes/app", "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]
    )
    service = _kind("kubernetes/app", "Service")
    assert selects(service["spec"]["selector"])
    monitor = _kind("kubernetes/optional", "ServiceMonitor")
    assert all(
        service["metadata"]["labels"].get(k) == v
        for k, v in monitor["spec"]["selector"]["matchLabels"].items()
    )
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"metrics"}


def _manifests(folder: Path, *, recursive: bool) -> list[dict[str, Any]]:
    """The objects `kubectl apply [-R] -f folder` would send (kustomization files aside)."""
    files = folder.rglob("*") if recursive else folder.glob("*")
    return [
        doc
        for path in sorted(files)
        if path.suffix in APPLIED_SUFFIXES and path.stem != "kustomization"
        for doc in _docs(path)
    ]


def _kustomization(step: str) -> dict[str, Any]:
    (doc,) = _docs(KUBERNETES / step / "kustomization.yaml")
    return dict(doc)


def _patches(step: str) -> list[dict[str, Any]]:
    return list(_kustomization(step).get("patches", []))


def test_the_api_step_serves_tls_through_its_login_behind_its_service() -> None:
    (patch,) = _patches("api")
    pod = yaml.safe_load(patch["patch"])["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["QINGLONG_API_LISTEN"]["value"] == "0.0.0.0:8443"
    mount = container["volumeMounts"][0]["mountPath"]
    assert env["QINGLONG_API_TLS_CERT_FILE"]["value"] == f"{mount}/tls.crt"
    assert env["QINGLONG_API_TLS_KEY_FILE"]["value"] == f"{mount}/tls.key"
    assert env["QINGLONG_API_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == (
        "qinglong-dispatcher-api-db"
    )
    assert container["volumeMounts"][0]["readOnly"] is True
    (volume,) = pod["volumes"]
    assert volume["secret"]["secretName"] == "qinglong-dispatcher-api-tls"
    service = _kind("kubernetes/api", "Service")
    assert service["spec"]["ports"] == [
        {"name": "api", "port": 8443, "targetPort": "api", "protocol": "TCP"}
    ]
    labels = _kind("kubernetes/app", "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    known = {"QINGLONG_" + name.upper() for name in settings.Settings.model_fields}
    assert set(env) <= known, set(env) - known


def test_no_apply_of_the_kubernetes_folder_reaches_a_secret() -> None:
    """The example Secrets carry a suffix `kubectl apply -f` skips, even with -R."""
    assert SECRETS_EXAMPLE.suffix not in APPLIED_SUFFIXES
    kinds = [doc["kind"] for doc in _manifests(KUBERNETES, recursive=True)]
    assert "Secret" not in kinds
    assert {doc["kind"] for doc in _docs(SECRETS_EXAMPLE)} == {"Secret"}


def test_the_plain_apply_of_the_folder_creates_only_the_namespace() -> None:
    top = _manifests(KUBERNETES, recursive=False)
    assert [(d["kind"], d["metadata"]["name"]) for d in top] == [
        ("Namespace", "qinglong-dispatcher")
    ]
    for step in STEPS:
        assert _kustomization(step)["namespace"] == "qinglong-dispatcher", step


def test_each_step_lists_every_manifest_of_its_folder_and_only_the_optional_one_needs_a_crd() -> (
    None
):
    builtin_groups = {"v1", "apps/v1", "batch/v1", "policy/v1"}
    for step in STEPS:
        folder = KUBERNETES / step
        listed = set(_kustomization(step)["resources"])
        present = {p.name for p in folder.glob("*.yaml") if p.stem != "kustomization"}
        # The API step is the app step and more: it builds on ../app and patches its pods.
        assert listed == present | ({"../app"} if step == "api" else set()), step
        groups = {doc["apiVersion"] for doc in _manifests(folder, recursive=False)}
        if step == "optional":
            assert groups == {"monitoring.coreos.com/v1"}
        else:
            assert groups <= builtin_groups, (step, groups)
    assert [d["kind"] for d in _manifests(KUBERNETES / "migrate", recursive=False)] == ["Job"]


def _kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is part of this machine's image; under CI=true it must be there")
        pytest.skip("kubectl is not installed")
    return found


@pytest.mark.parametrize("step", STEPS)
def test_kubectl_kustomize_builds_each_step_into_the_namespace(step: str) -> None:
    """The kustomize built into kubectl renders each step offline, as `apply -k` will."""
    done = subprocess.run(
        [_kubectl(), "kustomize", str(KUBERNETES / step)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    built = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert built
    assert all(doc["metadata"]["namespace"] == "qinglong-dispatcher" for doc in built)
    assert "Secret" not in {doc["kind"] for doc in built}


def _key_refs(value: object, kind: str = "secretKeyRef") -> list[tuple[str, str]]:
    """Every (name, key) a manifest reads through `kind` (secretKeyRef, configMapKeyRef)."""
    if isinstance(value, dict):
        ref = value.get(kind)
        found = [(ref["name"], ref["key"])] if isinstance(ref, dict) else []
        return found + [r for v in value.values() for r in _key_refs(v, kind)]
    if isinstance(value, list):
        return [r for v in value for r in _key_refs(v, kind)]
    return []


def test_every_secret_key_the_manifests_read_has_an_example_and_a_documented_command() -> None:
    examples = {
        (doc["metadata"]["name"], key)
        for doc in _docs(SECRETS_EXAMPLE)
        for key in doc["stringData"]
    }
    manifests = _manifests(KUBERNETES, recursive=True)
    patches = [yaml.safe_load(p["patch"]) for step in STEPS for p in _patches(step)]
    used = {ref for doc in manifests + patches for ref in _key_refs(doc)}
    assert used
    assert used == examples, used ^ examples
    installation = (ROOT / "docs" / "installation.md").read_text(encoding="utf-8")
    example_text = SECRETS_EXAMPLE.read_text(encoding="utf-8")
    for name, key in used:
        # One command, its continuation line commented out in the example file.
        command = re.compile(
            rf"create secret generic {name}\s+\\?\s*(?:#\s*)?--from-literal={key}="
        )
        assert command.search(installation), (name, key)
        assert command.search(example_text), (name, key)
    # No ConfigMap is read: every setting a pod needs is in its manifest or a Secret.
    assert not [ref for doc in manifests for ref in _key_refs(doc, "configMapKeyRef")]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Containerfile, continuation lines joined, comments out."""
    joined = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    found = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_containerfile_runs_the_cluster_profile_as_non_root_from_the_locked_artefacts() -> None:
    text = (DEPLOY / "container" / "Containerfile").read_text(encoding="utf-8")
    steps = _instructions(text)
    # The base image: a released tag (or a digest), never a floating one.
    (base,) = [args for word, args in steps if word == "ARG" and args.startswith("PYTHON_IMAGE=")]
    image = base.partition("=")[2]
    assert re.fullmatch(r"[\w./-]+/python:3\.11-slim-\w+(@sha256:[0-9a-f]{64})?", image), image
    assert [args for word, args in steps if word == "FROM"] == [
        "${PYTHON_IMAGE} AS build",
        "${PYTHON_IMAGE}",
    ]
    # Nothing fetched: no ADD (of a URL or else), every RUN offline, the lock's hashes required.
    assert not [args for word, args in steps if word == "ADD"]
    runs = " ".join(args for word, args in steps if word == "RUN")
    assert "--no-index" in runs
    assert "--require-hashes" in runs
    assert "--requirement /dist/requirements-cluster.lock" in runs
    assert "pip check" in runs
    assert '"$wheel[cluster]"' in runs  # the cluster profile's driver, asyncpg
    copies = [args for word, args in steps if word == "COPY"]
    assert "requirements-cluster.lock *.whl /dist/" in copies
    # The OCI format drops HEALTHCHECK: the build line must ask for the docker format.
    assert "podman build --format docker" in text
    users = [args for word, args in steps if word == "USER"]
    assert users, "no USER"
    assert users[-1].split(":")[0] not in {"0", "root"}
    # A read-only root: /tmp is the one writable path, declared, and the pods mount it.
    assert [args for word, args in steps if word == "VOLUME"] == ['["/tmp"]']
    container = _kind("kubernetes/app", "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert writable == ["/tmp"]
    assert re.search(r"^HEALTHCHECK .*/healthz", text, flags=re.MULTILINE | re.DOTALL)
    assert ("EXPOSE", "9464") in steps
    assert ("ENTRYPOINT", '["qinglong-dispatcher"]') in steps
    assert ("CMD", '["--profile", "cluster", "run"]') in steps


# --- alerts ----------------------------------------------------------------------------------


def test_every_alert_is_labelled_and_annotated() -> None:
    rules = _rules()
    assert len(rules) >= 5
    for rule in rules:
        assert rule["alert"].startswith("QinglongDispatcher"), rule
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


def test_alert_expressions_name_exported_metrics() -> None:
    used = set()
    for rule in _rules():
        for name in METRIC_NAME.findall(rule["expr"]):
            used.add(re.sub(r"_(bucket|sum|count)$", "", name))
    assert used
    assert used <= set(metrics.SERIES_NAMES), used - set(metrics.SERIES_NAMES)


def test_promtool_check_config_of_the_scrape_example() -> None:
    """Debian's promtool (what .ci/run installs) accepts scrape.yml and the rules it loads."""
    promtool = system_tools.tool("promtool", required_in_ci=True)
    done = subprocess.run(
        [promtool, "check", "config", "scrape.yml"],
        cwd=ALERTS.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_check_rules() -> None:
    promtool = system_tools.tool("promtool", required_in_ci=True)
    done = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


_API = 'surface="api",method="POST",route="/api/v1/dispatches"'
_API_BUCKET = "qinglong_dispatcher_http_request_duration_seconds_bucket{" + _API + ',status="2xx"'
_API_COUNT = "qinglong_dispatcher_http_request_duration_seconds_count{" + _API
# Each scenario: series that differ from a healthy edge daemon, when to look, what fires.
_HEALTHY = {
    "up": "1x40",
    "qinglong_dispatcher_cadence_seconds": "5x40",
    "qinglong_dispatcher_last_successful_tick_timestamp_seconds": "0+60x40",
    "qinglong_dispatcher_recovery_required": "0x40",
    "qinglong_dispatcher_oldest_due_age_seconds": "0x40",
    "qinglong_dispatcher_clock_skew_seconds": "0x40",
    "qinglong_dispatcher_clock_skew_refusals_total": "0x40",
    "qinglong_dispatcher_completion_write_failures_total": "0x40",
    "qinglong_dispatcher_lease_renewals_total": "0x40",
    "qinglong_dispatcher_takeovers_total": "0x40",
    "qinglong_dispatcher_takeovers_exhausted_total": "0x40",
    "qinglong_dispatcher_notification_oldest_pending_age_seconds": "0x40",
    'qinglong_dispatcher_notification_attempts_total{outcome="dead"}': "0x40",
}
_SCENARIOS: list[tuple[dict[str, str], str, set[str]]] = [
    ({}, "30m", set()),
    ({"up": "1x10 0x30"}, "15m", {"QinglongDispatcherDown"}),
    (
        {"qinglong_dispatcher_last_successful_tick_timestamp_seconds": "0+60x10 600x30"},
        "11m",
        set(),
    ),
    (
        {"qinglong_dispatcher_last_successful_tick_timestamp_seconds": "0+60x10 600x30"},
        "15m",
        {"QinglongDispatcherNoSuccessfulTick"},
    ),
    # Never a successful tick since start: the timestamp stays 0.
    (
        {"qinglong_dispatcher_last_successful_tick_timestamp_seconds": "0x40"},
        "5m",
        {"QinglongDispatcherNoSuccessfulTick"},
    ),
    ({"qinglong_dispatcher_recovery_required": "0x5 1x35"}, "8m", set()),
    (
        {"qinglong_dispatcher_recovery_required": "0x5 1x35"},
        "11m",
        {"QinglongDispatcherRecoveryRequired"},
    ),
    (
        {"qinglong_dispatcher_oldest_due_age_seconds": "0+60x40"},
        "20m",
        {"QinglongDispatcherBacklogStale"},
    ),
    ({"qinglong_dispatcher_clock_skew_seconds": "-3x40"}, "5m", {"QinglongDispatcherClockSkew"}),
    (
        {
            "qinglong_dispatcher_clock_skew_seconds": "3x40",
            "qinglong_dispatcher_clock_skew_refusals_total": "0x5 1+1x35",
        },
        "10m",
        {"QinglongDispatcherClockSkew", "QinglongDispatcherClaimsRefusedForSkew"},
    ),
    (
        {"qinglong_dispatcher_completion_write_failures_total": "0x5 1x35"},
        "10m",
        {"QinglongDispatcherCompletionWriteFailures"},
    ),
    (
        {"qinglong_dispatcher_completion_write_failures_total": "0x5 1x35"},
        "30m",
        set(),
    ),
    (
        {'qinglong_dispatcher_lease_renewals_total{result="expired"}': "0x5 1x35"},
        "10m",
        {"QinglongDispatcherLeaseRenewalsLost"},
    ),
    # One crash: a page taken over at once is no alert; takeovers every minute are.
    ({"qinglong_dispatcher_takeovers_total": "0x5 64x35"}, "15m", set()),
    ({"qinglong_dispatcher_takeovers_total": "0x5 64x35"}, "38m", set()),
    (
        {"qinglong_dispatcher_takeovers_total": "0x5 1+1x35"},
        "38m",
        {"QinglongDispatcherRepeatedTakeovers"},
    ),
    # One poison pill blocked: the takeovers that led there are minutes, the block is news.
    (
        {"qinglong_dispatcher_takeovers_exhausted_total": "0x5 1x35"},
        "7m",
        {"QinglongDispatcherPoisonSuspected"},
    ),
    # A subscriber down for minutes is retried, not an alert; a quarter of an hour is.
    (
        {"qinglong_dispatcher_notification_oldest_pending_age_seconds": "0x5 0+60x35"},
        "12m",
        set(),
    ),
    (
        {"qinglong_dispatcher_notification_oldest_pending_age_seconds": "0x5 0+60x35"},
        "30m",
        {"QinglongDispatcherNotificationsStale"},
    ),
    (
        {'qinglong_dispatcher_notification_attempts_total{outcome="dead"}': "0x5 1x35"},
        "10m",
        {"QinglongDispatcherNotificationsDeadLettered"},
    ),
    # The API: a few refusals are clients retrying; a steady stream is an alert.
    ({"qinglong_dispatcher_api_auth_failures_total": "0x5 0+2x35"}, "30m", set()),
    (
        {"qinglong_dispatcher_api_auth_failures_total": "0x5 0+20x35"},
        "20m",
        {"QinglongDispatcherApiAuthFailures"},
    ),
    (
        {'qinglong_dispatcher_api_rate_limited_total{reason="writes"}': "0x5 0+5x35"},
        "20m",
        {"QinglongDispatcherApiRateLimited"},
    ),
    (
        {"qinglong_dispatcher_api_connections_shed_total": "0x5 0+10x35"},
        "20m",
        {"QinglongDispatcherApiConnectionsShed"},
    ),
    # Every request between 2.5 and 5 s (p95 over 2 s) for over 10 minutes; under 100 ms, none.
    (
        {
            _API_BUCKET + ',le="0.1"}': "0+60x40",
            _API_BUCKET + ',le="2.5"}': "0+60x40",
            _API_BUCKET + ',le="+Inf"}': "0+60x40",
        },
        "30m",
        set(),
    ),
    (
        {
            _API_BUCKET + ',le="0.1"}': "0x40",
            _API_BUCKET + ',le="2.5"}': "0x40",
            _API_BUCKET + ',le="5"}': "0+60x40",
            _API_BUCKET + ',le="+Inf"}': "0+60x40",
        },
        "20m",
        {"QinglongDispatcherApiSlow"},
    ),
    (
        {
            _API_COUNT + ',status="2xx"}': "0+60x40",
            _API_COUNT + ',status="5xx"}': "0+1x40",
        },
        "30m",
        set(),
    ),
    (
        {
            _API_COUNT + ',status="2xx"}': "0+60x40",
            _API_COUNT + ',status="5xx"}': "0+30x40",
        },
        "20m",
        {"QinglongDispatcherApiServerErrors"},
    ),
]


def _series(name: str) -> str:
    labels = 'job="qinglong-dispatcher-edge",instance="router:9464"'
    if name.endswith("}"):
        return f"{name[:-1]},{labels}}}"
    return f"{name}{{{labels}}}"


def test_every_alert_has_a_firing_scenario() -> None:
    fired = set().union(*(expected for _, _, expected in _SCENARIOS))
    assert fired == {rule["alert"] for rule in _rules()}


def test_promtool_test_rules(tmp_path: Path) -> None:
    promtool = system_tools.tool("promtool", required_in_ci=True)
    firing = 'count by (alertname) (ALERTS{alertstate="firing"})'
    tests = []
    for overrides, at, expected in _SCENARIOS:
        values = {**_HEALTHY, **overrides}
        if any(name.startswith("qinglong_dispatcher_lease_renewals_total{") for name in overrides):
            del values["qinglong_dispatcher_lease_renewals_total"]
        tests.append(
            {
                "interval": "1m",
                "input_series": [
                    {"series": _series(name), "values": series} for name, series in values.items()
                ],
                "promql_expr_test": [
                    {
                        "expr": firing,
                        "eval_time": at,
                        "exp_samples": [
                            {"labels": f'{{alertname="{name}"}}', "value": 1}
                            for name in sorted(expected)
                        ],
                    }
                ],
            }
        )
    spec = {"rule_files": [str(ALERTS)], "evaluation_interval": "1m", "tests": tests}
    spec_file = tmp_path / "alerts_test.yml"
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    done = subprocess.run(
        [promtool, "test", "rules", str(spec_file)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_check_metrics_on_a_live_scrape() -> None:
    promtool = system_tools.tool("promtool", required_in_ci=True)
    the_metrics = metrics.Metrics(profile="edge", cadence_s=5.0)
    the_metrics.observe_batch(0.01, claims={"claimed": 1}, outcomes={"run.create": {"failed": 1}})
    the_metrics.record_tick(ok=True)
    the_metrics.record_renewal("renewed")
    listener = http.Listener(
        "127.0.0.1", 0, the_metrics=the_metrics, health=http.Health(cadence_s=5)
    )
    port = listener.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            scrape = response.read()
    finally:
        listener.stop()
    done = subprocess.run(
        [promtool, "check", "metrics"], input=scrape, capture_output=True, check=False
    )
    output = (done.stdout + done.stderr).decode()
    # Exit 1 is a parse error: always a failure. Exit 3 is lint: accepted only for families
    # we do not name (prometheus-client's own process_* collector), never for ours.
    assert done.returncode in {0, 3}, output
    ours = [line for line in output.splitlines() if metrics.PREFIX in line]
    assert not ours, output


# --- systemd-analyze -------------------------------------------------------------------------

# A test machine does not have the binary installed; nothing else may be reported.
_TOLERATED = (
    re.compile(r"Command /opt/qinglong-dispatcher/bin/qinglong-dispatcher is not executable"),
    re.compile(r"Failed to (resolve|look up) user"),
)


def _verify(analyze: str, unit_text: str, tmp_path: Path) -> list[str]:
    """Problems `systemd-analyze verify` reports for `unit_text`, tolerated ones left out."""
    copy = tmp_path / UNIT.name
    copy.write_text(unit_text, encoding="utf-8")
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    problems = [line for line in lines if not any(t.search(line) for t in _TOLERATED)]
    if done.returncode != 0 and not problems and not lines:
        problems.append(f"exit {done.returncode} without a message")
    return problems


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = system_tools.tool("systemd-analyze", required_in_ci=False)
    # The checker must see a parse error, or a clean result below proves nothing.
    broken = UNIT.read_text(encoding="utf-8").replace("Type=notify", "Type=notifyy")
    (tmp_path / "broken").mkdir()
    assert any("notifyy" in line for line in _verify(analyze, broken, tmp_path / "broken"))
    problems = _verify(analyze, UNIT.read_text(encoding="utf-8"), tmp_path)
    assert not problems, "\n".join(problems)


def test_no_readme_link_leaves_the_repository() -> None:
    """Every relative link of the README resolves inside a clone."""
    root = DEPLOY.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t and not t.startswith("mailto:")]
    assert local
    for target in local:
        resolved = (root / target).resolve()
        assert resolved.is_relative_to(root.resolve()), target
        assert resolved.exists(), target
    assert "../shared" not in readme
