"""The OIDC file and the ID token's checks, without a provider: what the mapping admits and
refuses, and each claim `verify` refuses (signed here with keys made for the test)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from joserfc import jwk, jwt

from qinglong_dispatcher.domain import errors, principals
from qinglong_dispatcher.web.oidc import flow, mapping

HEAD = 'issuer = "https://idp.example.com"\nclient_id = "ui"\n'
HEAD += 'redirect_url = "https://q.example.com/ui/oidc/callback"\n'
MAPPED = (
    HEAD
    + """principal_claim = "email"
[principals]
"alice@example.com" = "alice"
[roles]
"readers" = "viewer"
"ops" = "operator"
[approver_groups]
"release-managers" = ["release"]
"""
)


def test_the_highest_mapped_role_and_the_mapped_approver_groups() -> None:
    found = mapping.parse_file(MAPPED).mapping.admit(
        {"email": "alice@example.com", "groups": ["readers", "ops", "release-managers", 7]}
    )
    assert found == mapping.Admitted(
        principal="alice", role=principals.TokenRole.OPERATOR, approver_groups=("release",)
    )


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"groups": ["ops"]}, "oidc_no_principal"),
        ({"email": "bob@example.com", "groups": ["ops"]}, "oidc_bad_principal"),
        ({"email": "bob", "groups": ["nobody"]}, "oidc_no_mapped_group"),
        ({"email": "bob", "groups": "ops"}, "oidc_no_mapped_group"),
        ({"email": "bob"}, "oidc_no_mapped_group"),
    ],
)
def test_an_identity_the_mapping_does_not_admit(claims: dict[str, object], reason: str) -> None:
    with pytest.raises(mapping.Refusal) as refused:
        mapping.parse_file(MAPPED).mapping.admit(claims)
    assert refused.value.reason == reason
    assert reason in principals.AUTH_FAILURE_REASONS


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (HEAD + 'principal_claim = "name"\n', "principal_claim"),
        (HEAD + '[roles]\n"ops" = "root"\n', "maps to no role"),
        (HEAD + '[principals]\n"a@b" = "Not A Name"\n', "renamed to no principal"),
        (HEAD + "surprise = 1\n", "unknown key"),
        (HEAD.replace("https://idp", "http://idp"), "http only to loopback"),
        ('client_id = "ui"\n', "issuer"),
        ("not toml [", "not TOML"),
    ],
)
def test_a_bad_oidc_file_is_refused_naming_the_fault(text: str, said: str) -> None:
    with pytest.raises(errors.InvalidInput, match=said):
        mapping.parse_file(text)


KEY = jwk.RSAKey.generate_key(2048, parameters={"kid": "k"})
OTHER = jwk.RSAKey.generate_key(2048, parameters={"kid": "k"})
JWKS = {"keys": [KEY.as_dict(private=False)]}


def _token(key: jwk.RSAKey = KEY, alg: str = "RS256", **changed: object) -> str:
    now = int(time.time())
    claims: dict[str, object] = {"iss": "https://idp", "aud": "ui", "sub": "s", "iat": now,
                                 "exp": now + 300, "nonce": "n"}  # fmt: skip
    claims.update(changed)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode({"alg": alg, "kid": "k"}, claims, key)


def _verify(token: str) -> dict[str, object]:
    return flow.verify(token, JWKS, issuer="https://idp", audience="ui", nonce="n")


def test_a_good_id_token_and_skew_within_the_leeway() -> None:
    assert _verify(_token())["sub"] == "s"
    assert _verify(_token(exp=int(time.time()) - 45))["sub"] == "s"  # 60 s of skew allowed


# Each token is made when its case runs, not when the module is collected: a run that reaches
# this file twenty minutes later would otherwise find them all expired.
@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: _token(OTHER), "oidc_bad_signature"),
        (lambda: _token(iss="https://elsewhere"), "oidc_bad_claim"),
        (lambda: _token(aud="another"), "oidc_wrong_audience"),
        (lambda: _token(aud=["ui", "another"]), "oidc_wrong_audience"),  # no azp for this client
        (lambda: _token(exp=int(time.time()) - 75), "oidc_expired"),  # beyond the 60 s of skew
        (lambda: _token(nonce=None), "oidc_nonce_mismatch"),
        (lambda: _token(nonce="m"), "oidc_nonce_mismatch"),
        (lambda: _token(sub=None), "oidc_bad_claim"),
        (lambda: "not.a.token", "oidc_bad_signature"),
    ],
)
def test_each_check_of_the_id_token_refuses(make: Callable[[], str], reason: str) -> None:
    with pytest.raises(mapping.Refusal) as refused:
        _verify(make())
    assert refused.value.reason == reason


def test_an_unsigned_token_is_refused() -> None:
    head = "eyJhbGciOiJub25lIn0"  # {"alg":"none"}
    body = _token().split(".")[1]
    with pytest.raises(mapping.Refusal) as refused:
        _verify(f"{head}.{body}.")
    assert refused.value.reason == "oidc_bad_signature"


def test_the_file_names_its_client_secret_beside_it(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s3cret\n")
    (tmp_path / "oidc.toml").write_text('client_secret_file = "secret"\n' + MAPPED)
    loaded = mapping.load(tmp_path / "oidc.toml")
    assert loaded.client_secret == "s3cret"
    assert flow.Oidc(loaded).redirect_url == "https://q.example.com/ui/oidc/callback"
    (tmp_path / "secret").unlink()
    with pytest.raises(errors.InvalidInput, match="cannot read"):
        mapping.load(tmp_path / "oidc.toml")


def test_the_api_without_oidc_never_loads_the_jose_library() -> None:
    code = (
        "import sys; from qinglong_dispatcher.web import app; "
        "from qinglong_dispatcher.bootstrap import listeners; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('joserfc', 'authlib')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
