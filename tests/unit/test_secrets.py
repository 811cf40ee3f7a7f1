"""Secrets by reference (`actions/secrets.py`): each kind reads its value when used, a rotation
applies at the next read, and every error names the reference, never the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong_dispatcher.actions import secrets

VALUE = "s3cr3t-7d1e5a9c"


@pytest.mark.parametrize(
    "text",
    ["credential:api-token", "file:/run/secrets/token", "env:API_TOKEN"],
)
def test_each_reference_kind_parses_and_shows_as_configured(text: str) -> None:
    assert str(secrets.SecretRef.parse(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        VALUE,
        "credential:../etc/passwd",
        "credential:",
        "file:relative/path",
        "file:/with\x00nul",
        "env:1BAD",
        "vault:kv/x",
        42,
    ],
)
def test_anything_else_is_refused_without_echoing_it(text: object) -> None:
    with pytest.raises(ValueError) as caught:
        secrets.SecretRef.parse(text)
    assert VALUE not in str(caught.value)
    assert "passwd" not in str(caught.value)


def test_an_env_reference_reads_the_variable_at_each_use() -> None:
    ref = secrets.SecretRef.parse("env:QL_TOKEN")
    assert ref.read({"QL_TOKEN": VALUE}) == VALUE.encode()
    assert ref.read({"QL_TOKEN": "rotated"}) == b"rotated"


def test_a_file_reference_reads_the_rotated_file_and_drops_one_newline(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(VALUE + "\n")
    ref = secrets.SecretRef.parse(f"file:{path}")
    assert ref.read({}) == VALUE.encode()
    path.write_text("rotated\n\n")
    assert ref.read({}) == b"rotated\n"


def test_a_credential_reference_reads_from_the_credentials_directory(tmp_path: Path) -> None:
    (tmp_path / "api-token").write_bytes(VALUE.encode())
    ref = secrets.SecretRef.parse("credential:api-token")
    assert ref.read({"CREDENTIALS_DIRECTORY": str(tmp_path)}) == VALUE.encode()


@pytest.mark.parametrize(
    ("text", "environ", "words"),
    [
        ("env:QL_TOKEN", {}, "not set"),
        ("credential:api-token", {}, "CREDENTIALS_DIRECTORY"),
        ("credential:absent", {"CREDENTIALS_DIRECTORY": "/nonexistent"}, "cannot be read"),
        ("file:/nonexistent/token", {}, "cannot be read"),
    ],
)
def test_an_unavailable_secret_names_its_reference(
    text: str, environ: dict[str, str], words: str
) -> None:
    with pytest.raises(secrets.SecretUnavailable) as caught:
        secrets.SecretRef.parse(text).read(environ)
    assert text in str(caught.value)
    assert words in str(caught.value)
    assert caught.value.code == "secret_unavailable"


def test_an_empty_file_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("\n")
    with pytest.raises(secrets.SecretUnavailable, match="is empty"):
        secrets.SecretRef.parse(f"file:{path}").read({})


def test_a_secret_over_the_cap_is_refused_without_its_value(tmp_path: Path) -> None:
    big = VALUE * (secrets.MAX_SECRET_BYTES // len(VALUE) + 1)
    path = tmp_path / "token"
    path.write_text(big)
    for ref, environ in (
        (secrets.SecretRef.parse(f"file:{path}"), {}),
        (secrets.SecretRef.parse("env:QL_TOKEN"), {"QL_TOKEN": big}),
    ):
        with pytest.raises(secrets.SecretUnavailable) as caught:
            ref.read(environ)
        assert "larger than" in str(caught.value)
        assert VALUE not in str(caught.value)
        assert VALUE not in repr(caught.value)


def test_a_secret_of_exactly_the_cap_is_read(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"k" * secrets.MAX_SECRET_BYTES)
    assert len(secrets.SecretRef.parse(f"file:{path}").read({})) == secrets.MAX_SECRET_BYTES


def test_a_reference_shows_no_value() -> None:
    ref = secrets.SecretRef.parse("env:QL_TOKEN")
    ref.read({"QL_TOKEN": VALUE})
    assert VALUE not in repr(ref)
    assert VALUE not in str(ref)
