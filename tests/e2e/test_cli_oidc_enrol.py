"""`token create --oidc-group`: the administrator enrols a person for OIDC sign-in with the
role and approver groups the OIDC file maps their provider groups to, and no secret is shown;
a group the file does not map, or a role or group given by hand beside it, is one line, exit
2, and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import error_lines, run_cli

OIDC = """issuer = "https://sso.example.com/realms/ops"
client_id = "qinglong-ui"
redirect_url = "https://qinglong.example.com/ui/oidc/callback"
[roles]
"developers" = "submitter"
"release-managers" = "approver"
[approver_groups]
"release-managers" = ["release"]
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    (tmp_path / "oidc.toml").write_text(OIDC)
    return tmp_path


def _create(workdir: Path, *args: str) -> tuple[int, str, str]:
    env = {"QINGLONG_OIDC_FILE": str(workdir / "oidc.toml")}
    done = run_cli("token", "create", "--principal", "ann", *args, cwd=workdir, env=env)
    return done.returncode, done.stdout, done.stderr


def test_enrolment_takes_the_role_and_groups_from_the_mapping(workdir: Path) -> None:
    code, out, err = _create(
        workdir, "--oidc-group", "developers", "--oidc-group", "release-managers", "--json"
    )
    assert code == 0, err
    made = json.loads(out)
    assert (made["principal"], made["role"], made["groups"]) == ("ann", "approver", ["release"])
    assert "secret" not in made
    assert "qlt_" not in out
    listed = json.loads(run_cli("token", "list", "--json", cwd=workdir).stdout)
    assert [(t["principal"], t["role"], t["groups"]) for t in listed] == [
        ("ann", "approver", ["release"])
    ]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--oidc-group", "strangers"), "none of your groups is mapped to a role"),
        (("--oidc-group", "developers", "--role", "operator"), "takes the role and groups"),
        (("--oidc-group", "developers", "--group", "release"), "takes the role and groups"),
    ],
)
def test_an_enrolment_the_mapping_does_not_give_is_refused(
    workdir: Path, args: tuple[str, ...], said: str
) -> None:
    code, _, err = _create(workdir, *args)
    assert code == 2
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert said in lines[0], err
    assert json.loads(run_cli("token", "list", "--json", cwd=workdir).stdout) == []


def test_enrolment_needs_the_oidc_file(workdir: Path) -> None:
    done = run_cli("token", "create", "--principal", "ann", "--oidc-group", "x", cwd=workdir)
    assert done.returncode == 2
    assert "QINGLONG_OIDC_FILE" in error_lines(done.stderr)[0]
