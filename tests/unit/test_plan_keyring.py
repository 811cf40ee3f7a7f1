"""The plan key ring file (`plan_keys/keyring.py`): born 0600 whatever the umask, extended
atomically by `add_key`, refused when exposed or malformed in one line that names the file and
never a key byte."""

from __future__ import annotations

import base64
import datetime
import os
import stat
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.plan_keys import keyring as plan_keyring

PLANTED = bytes(range(7, 39))  # 32 bytes a test writes into a ring and then looks for
PLANTED_B64 = base64.b64encode(PLANTED).decode("ascii")
OTHER_B64 = base64.b64encode(bytes(range(100, 132))).decode("ascii")
DIGEST_B64 = base64.b64encode(bytes(range(200, 232))).decode("ascii")


@pytest.fixture
def umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write_ring(path: Path, text: str, file_mode: int = 0o600) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(file_mode)
    return path


def ring_text(*, active: str = "k1", keys: str = f'"k1" = "{PLANTED_B64}"') -> str:
    return (
        f'format = "{plan_keyring.FORMAT}"\nactive = "{active}"\n'
        f'digest = "{DIGEST_B64}"\n\n[keys]\n{keys}\n'
    )


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077, 0o277, 0o777])
def test_generate_writes_a_0600_ring_that_loads_back_whatever_the_umask(
    tmp_path: Path, mask: int
) -> None:
    os.umask(mask)
    path = tmp_path / "plan-keys.toml"
    ring = plan_keyring.generate(path)
    assert mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["plan-keys.toml"]  # no temp file left
    loaded = plan_keyring.load(path)
    assert loaded == ring
    assert loaded.ids == (ring.active,)
    assert len(ring.keys[ring.active]) == 32
    assert len(ring.digest_secret) == 32
    today = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
    assert ring.active.startswith(f"k{today}-")
    assert plan_keyring.KEY_ID.fullmatch(ring.active)


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize("mask", [0o000, 0o277])
def test_add_key_keeps_the_old_keys_and_the_digest_secret_and_stays_0600(
    tmp_path: Path, mask: int
) -> None:
    path = tmp_path / "plan-keys.toml"
    first = plan_keyring.generate(path)
    os.umask(mask)
    second = plan_keyring.add_key(path)
    third = plan_keyring.add_key(path)
    assert mode(path) == 0o600
    assert third.ids == (first.active, second.active, third.active)
    assert len(set(third.ids)) == 3
    assert third.keys[first.active] == first.keys[first.active]
    assert third.keys[second.active] == second.keys[second.active]
    assert third.digest_secret == first.digest_secret
    assert third.digest_key() == first.digest_key()
    assert plan_keyring.load(path) == third
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan-keys.toml"]


def test_concurrent_add_key_loses_no_key(tmp_path: Path) -> None:
    path = tmp_path / "plan-keys.toml"
    plan_keyring.generate(path)
    threads = [threading.Thread(target=plan_keyring.add_key, args=(path,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(plan_keyring.load(path).ids) == 9


def test_add_key_through_a_symlink_rewrites_the_target(tmp_path: Path) -> None:
    target = tmp_path / "real.toml"
    first = plan_keyring.generate(target)
    link = tmp_path / "link.toml"
    link.symlink_to(target)
    plan_keyring.add_key(link)
    assert link.is_symlink()
    assert plan_keyring.load(target).ids[0] == first.active
    assert len(plan_keyring.load(link).ids) == 2


def test_generate_refuses_an_existing_file_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "plan-keys.toml"
    first = plan_keyring.generate(path)
    before = path.read_bytes()
    with pytest.raises(plan_keyring.PlanKeyRingExists) as caught:
        plan_keyring.generate(path)
    assert caught.value.code == "plan_keyring_exists"
    assert str(path) in str(caught.value)
    assert "keys generate --add" in str(caught.value)
    assert path.read_bytes() == before
    replaced = plan_keyring.generate(path, overwrite=True)
    assert replaced.active != first.active
    assert mode(path) == 0o600
    assert plan_keyring.load(path) == replaced


def test_generate_refuses_a_dangling_symlink_in_the_way(tmp_path: Path) -> None:
    path = tmp_path / "plan-keys.toml"
    path.symlink_to(tmp_path / "elsewhere.toml")
    with pytest.raises(plan_keyring.PlanKeyRingExists):
        plan_keyring.generate(path)
    assert not (tmp_path / "elsewhere.toml").exists()


def test_generate_into_a_missing_folder_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "plan-keys.toml"
    with pytest.raises(plan_keyring.PlanKeyRingUnwritable) as caught:
        plan_keyring.generate(path)
    assert isinstance(caught.value, errors.ConfigurationError)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("file_mode", [0o644, 0o640, 0o604, 0o660, 0o620, 0o601, 0o700 | 0o010])
def test_a_ring_others_can_reach_is_refused_naming_file_and_mode(
    tmp_path: Path, file_mode: int
) -> None:
    path = write_ring(tmp_path / "plan-keys.toml", ring_text(), file_mode)
    with pytest.raises(plan_keyring.PlanKeyRingExposed) as caught:
        plan_keyring.load(path)
    message = str(caught.value)
    assert caught.value.code == "plan_keyring_exposed"
    assert isinstance(caught.value, errors.ConfigurationError)
    assert str(path) in message
    assert oct(file_mode) in message
    assert "\n" not in message
    assert PLANTED_B64 not in message


@pytest.mark.parametrize("file_mode", [0o400, 0o600])
def test_an_owner_only_ring_loads(tmp_path: Path, file_mode: int) -> None:
    path = write_ring(tmp_path / "plan-keys.toml", ring_text(), file_mode)
    assert plan_keyring.load(path).keys == {"k1": PLANTED}


def test_group_read_passes_only_when_allowed_and_never_group_write_or_other(
    tmp_path: Path,
) -> None:
    path = write_ring(tmp_path / "plan-keys.toml", ring_text(), 0o440)
    with pytest.raises(plan_keyring.PlanKeyRingExposed):
        plan_keyring.load(path)
    assert plan_keyring.load(path, allow_group_read=True).active == "k1"
    for exposed in (0o460, 0o444, 0o640 | 0o004):
        path.chmod(exposed)
        with pytest.raises(plan_keyring.PlanKeyRingExposed):
            plan_keyring.load(path, allow_group_read=True)


def test_a_symlink_is_judged_by_its_target(tmp_path: Path) -> None:
    # A Kubernetes Secret mount: ring.toml -> ..data/ring.toml, the link itself 0777.
    target = write_ring(tmp_path / "target.toml", ring_text(), 0o600)
    link = tmp_path / "ring.toml"
    link.symlink_to(target)
    assert plan_keyring.load(link).active == "k1"
    target.chmod(0o644)
    with pytest.raises(plan_keyring.PlanKeyRingExposed) as caught:
        plan_keyring.load(link)
    assert "0o644" in str(caught.value)


def test_a_missing_ring_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(plan_keyring.PlanKeyRingUnreadable) as caught:
        plan_keyring.load(path)
    assert caught.value.code == "plan_keyring_unreadable"
    assert str(path) in str(caught.value)


def test_a_fifo_or_a_folder_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(plan_keyring.PlanKeyRingUnreadable) as caught:
        plan_keyring.load(fifo)
    assert "not a regular file" in str(caught.value)
    folder = tmp_path / "folder"
    folder.mkdir(mode=0o700)
    with pytest.raises(plan_keyring.PlanKeyRingUnreadable):
        plan_keyring.load(folder)


def test_an_oversized_ring_is_refused(tmp_path: Path) -> None:
    text = ring_text() + "#" * plan_keyring.RING_MAX_BYTES
    path = write_ring(tmp_path / "plan-keys.toml", text)
    with pytest.raises(plan_keyring.PlanKeyRingUnreadable) as caught:
        plan_keyring.load(path)
    assert f"larger than {plan_keyring.RING_MAX_BYTES} bytes" in str(caught.value)


SHORT_B64 = base64.b64encode(PLANTED[:31]).decode("ascii")
MALFORMED = {
    "short key": (ring_text(keys=f'"k1" = "{SHORT_B64}"'), "key k1 is not 32 bytes"),
    "duplicate id": (
        ring_text(keys=f'"k1" = "{PLANTED_B64}"\n"k1" = "{OTHER_B64}"'),
        "a duplicate entry (at line 7",
    ),
    "active missing": (ring_text(active="k2"), "the active key k2 is not in [keys]"),
    "active absent": (ring_text().replace('active = "k1"\n', ""), "active must name a key id"),
    "not base64": (ring_text(keys=f'"k1" = "{PLANTED_B64[:-2]}!="'), "must be base64"),
    "same key twice": (
        ring_text(keys=f'"k1" = "{PLANTED_B64}"\n"k2" = "{PLANTED_B64}"'),
        "two key ids hold the same key",
    ),
    "digest reused": (
        ring_text(keys=f'"k1" = "{DIGEST_B64}"\n"k2" = "{PLANTED_B64}"'),
        "digest repeats an encryption key",
    ),
    "no digest": (ring_text().replace(f'digest = "{DIGEST_B64}"\n', ""), "digest must be"),
    "wrong format": (ring_text().replace("@v1", "@v9"), "format must be"),
    "unknown entry": (ring_text() + f'\n[extra]\n"{PLANTED_B64}" = 1\n', "unknown top-level"),
    "key as an id": (ring_text(keys=f'"{PLANTED_B64}" = "{OTHER_B64}"'), "not an identifier"),
    "dotted bare id": (ring_text(keys=f'k.1 = "{PLANTED_B64}"'), "key k must be base64"),
    "no keys table": (ring_text().split("[keys]")[0], "a [keys] table is required"),
    "empty keys": (ring_text(keys=""), ": no keys"),
    "illegal character": (ring_text(keys=f'"k1" = "{PLANTED_B64}\x01"'), "not valid TOML"),
    "unquoted key": (ring_text(keys=f"k1 = {PLANTED_B64}"), "not valid TOML (at line 6"),
}


@pytest.mark.parametrize(("text", "expected"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_ring_is_refused_in_one_line_without_key_bytes(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write_ring(tmp_path / "plan-keys.toml", text)
    with pytest.raises(plan_keyring.PlanKeyRingInvalid) as caught:
        plan_keyring.load(path)
    message = str(caught.value)
    assert caught.value.code == "plan_keyring_invalid"
    assert isinstance(caught.value, errors.ConfigurationError)
    assert expected in message
    assert message.startswith(f"plan key ring {path}: ")
    assert "\n" not in message
    for secret in (PLANTED_B64, OTHER_B64, DIGEST_B64, SHORT_B64, PLANTED_B64[:16]):
        assert secret not in message
    # Nor anywhere in the traceback a log would print (the parser's error is suppressed).
    shown = "".join(traceback.format_exception(caught.value))
    assert PLANTED_B64 not in shown
    assert PLANTED_B64[:16] not in shown


def test_invalid_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plan-keys.toml"
    path.write_bytes(ring_text().encode() + b"# \xff\n")
    path.chmod(0o600)
    with pytest.raises(plan_keyring.PlanKeyRingInvalid, match="not valid UTF-8"):
        plan_keyring.load(path)


def test_a_ring_shows_ids_never_key_bytes(tmp_path: Path) -> None:
    ring = plan_keyring.load(write_ring(tmp_path / "plan-keys.toml", ring_text()))
    shown = repr(ring) + str(ring)
    assert "k1" in shown
    assert PLANTED_B64 not in shown
    assert repr(PLANTED) not in shown
    assert repr(PLANTED[:8])[2:-1] not in shown


def test_a_ring_built_in_code_holds_the_file_rules() -> None:
    with pytest.raises(plan_keyring.PlanKeyRingInvalid, match="not 32 bytes"):
        plan_keyring.KeyRing(active="k1", keys={"k1": b"short"}, digest_secret=bytes(32))
    with pytest.raises(plan_keyring.PlanKeyRingInvalid, match="not in"):
        plan_keyring.KeyRing(active="k2", keys={"k1": PLANTED}, digest_secret=bytes(32))
    ring = plan_keyring.KeyRing(active="k1", keys={"k1": PLANTED}, digest_secret=bytes(32))
    with pytest.raises(TypeError):
        ring.keys["k2"] = PLANTED  # type: ignore[index]


def test_the_digest_key_is_derived_and_depends_on_the_digest_secret_only(tmp_path: Path) -> None:
    ring = plan_keyring.load(write_ring(tmp_path / "plan-keys.toml", ring_text()))
    key = ring.digest_key()
    assert len(key) == 32
    assert key not in (ring.digest_secret, PLANTED)
    other_keys = plan_keyring.KeyRing(
        active="k9", keys={"k9": bytes(range(50, 82))}, digest_secret=ring.digest_secret
    )
    assert other_keys.digest_key() == key
    other_secret = plan_keyring.KeyRing(
        active="k1", keys={"k1": PLANTED}, digest_secret=bytes(range(1, 33))
    )
    assert other_secret.digest_key() != key
