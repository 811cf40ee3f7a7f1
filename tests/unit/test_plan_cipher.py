"""The plan envelope (`plan_keys/cipher.py`): AES-256-GCM under the active key, bound to its
row, opened by the key it names after rotation; every failure typed, none showing a byte of the
plan or the key; keyed digests that survive rotation."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from qinglong_dispatcher.domain import canonical, digests, errors
from qinglong_dispatcher.plan_keys import cipher as plan_cipher
from qinglong_dispatcher.plan_keys import keyring as plan_keyring

PLAN = b'{"body":"transfer 100 to account 7","url":"https://example.test/pay"}'
ROW = ("proj-1", "act-42", "http.request", 1)


@pytest.fixture
def ring_path(tmp_path: Path) -> Path:
    path = tmp_path / "plan-keys.toml"
    plan_keyring.generate(path)
    return path


@pytest.fixture
def cipher(ring_path: Path) -> plan_cipher.PlanCipher:
    return plan_cipher.PlanCipher(plan_keyring.load(ring_path))


def aad(*row: str | int) -> bytes:
    project_id, action_ref, action_type, version = row or ROW
    assert isinstance(project_id, str)
    assert isinstance(action_ref, str)
    assert isinstance(action_type, str)
    assert isinstance(version, int)
    return plan_cipher.aad_for(project_id, action_ref, action_type, version)


def key_texts(ring: plan_keyring.KeyRing) -> list[str]:
    keys = [*ring.keys.values(), ring.digest_secret, ring.digest_key()]
    return [text for key in keys for text in (base64.b64encode(key).decode(), key.hex())]


def assert_quiet(exc: errors.QinglongError, ring: plan_keyring.KeyRing) -> None:
    message = str(exc)
    assert "\n" not in message
    for secret in ["transfer", PLAN.decode(), PLAN.hex()[:16], *key_texts(ring)]:
        assert secret not in message


def test_round_trip_under_the_active_key(cipher: plan_cipher.PlanCipher) -> None:
    sealed = cipher.encrypt(PLAN, aad=aad())
    assert sealed.key_id == cipher.active_key_id
    assert sealed.algorithm == "AES-256-GCM"
    assert len(sealed.data) == plan_cipher.NONCE_BYTES + len(PLAN) + plan_cipher.TAG_BYTES
    assert PLAN not in sealed.data
    assert cipher.decrypt(sealed, aad=aad()) == PLAN
    assert cipher.decrypt(cipher.encrypt(b"", aad=aad()), aad=aad()) == b""


def test_the_same_plan_seals_differently_each_time(cipher: plan_cipher.PlanCipher) -> None:
    first, second = (cipher.encrypt(PLAN, aad=aad()) for _ in range(2))
    assert first.data != second.data


@pytest.mark.parametrize(
    "other_row",
    [
        ("proj-2", "act-42", "http.request", 1),
        ("proj-1", "act-43", "http.request", 1),
        ("proj-1", "act-42", "command.run", 1),
        ("proj-1", "act-42", "http.request", 2),
    ],
    ids=["project", "action", "type", "schema version"],
)
def test_a_ciphertext_moved_to_another_row_does_not_open(
    cipher: plan_cipher.PlanCipher, ring_path: Path, other_row: tuple[str, str, str, int]
) -> None:
    sealed = cipher.encrypt(PLAN, aad=aad())
    with pytest.raises(plan_cipher.PlanDecryptFailed) as caught:
        cipher.decrypt(sealed, aad=aad(*other_row))
    assert caught.value.code == "plan_decrypt_failed"
    assert sealed.key_id in str(caught.value)
    assert_quiet(caught.value, plan_keyring.load(ring_path))


def test_the_aad_encoding_is_unambiguous() -> None:
    encodings = {
        aad("a", "b|c", "t", 1),
        aad("a|b", "c", "t", 1),
        aad('a","actionRef":"b', "c", "t", 1),
        aad("a", "b", "c", 1),
        aad("a", "b", "c", 10),
        aad("", "ab", "c", 1),
        aad("ab", "", "c", 1),
    }
    assert len(encodings) == 7
    encoded = aad("p", "a", "t", 3)
    tag, _, body = encoded.partition(b"\0")
    assert tag == b"qinglong/plan-aad@v1"
    assert canonical.loads(body) == {
        "projectId": "p",
        "actionRef": "a",
        "actionType": "t",
        "schemaVersion": 3,
    }
    assert canonical.is_canonical(body)


@pytest.mark.parametrize("bad", [True, "1", None])
def test_the_aad_refuses_a_schema_version_that_is_not_an_int(bad: object) -> None:
    with pytest.raises(errors.InvalidInput):
        plan_cipher.aad_for("p", "a", "t", bad)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInput):
        plan_cipher.aad_for(1, "a", "t", 1)  # type: ignore[arg-type]


def test_another_key_under_the_same_id_does_not_open(
    cipher: plan_cipher.PlanCipher, ring_path: Path
) -> None:
    ring = plan_keyring.load(ring_path)
    impostor = plan_keyring.KeyRing(
        active=ring.active,
        keys={ring.active: bytes(range(32))},
        digest_secret=ring.digest_secret,
    )
    sealed = cipher.encrypt(PLAN, aad=aad())
    with pytest.raises(plan_cipher.PlanDecryptFailed) as caught:
        plan_cipher.PlanCipher(impostor).decrypt(sealed, aad=aad())
    assert_quiet(caught.value, ring)
    assert_quiet(caught.value, impostor)


@pytest.mark.parametrize("keep", [0, 1, 11, 12, 27, -1], ids=lambda n: f"keep {n}")
def test_a_truncated_ciphertext_does_not_open(
    cipher: plan_cipher.PlanCipher, ring_path: Path, keep: int
) -> None:
    sealed = cipher.encrypt(PLAN, aad=aad())
    cut = dataclasses.replace(sealed, data=sealed.data[:keep])
    with pytest.raises(plan_cipher.PlanDecryptFailed) as caught:
        cipher.decrypt(cut, aad=aad())
    assert caught.value.code == "plan_decrypt_failed"
    assert_quiet(caught.value, plan_keyring.load(ring_path))


def test_a_flipped_bit_anywhere_does_not_open(cipher: plan_cipher.PlanCipher) -> None:
    sealed = cipher.encrypt(PLAN, aad=aad())
    for index in range(len(sealed.data)):  # nonce, ciphertext and tag alike
        for bit in (0x01, 0x80):
            data = bytearray(sealed.data)
            data[index] ^= bit
            altered = dataclasses.replace(sealed, data=bytes(data))
            with pytest.raises(plan_cipher.PlanDecryptFailed):
                cipher.decrypt(altered, aad=aad())


def test_an_unknown_key_id_is_its_own_error(
    cipher: plan_cipher.PlanCipher, ring_path: Path
) -> None:
    sealed = cipher.encrypt(PLAN, aad=aad())
    with pytest.raises(plan_cipher.PlanKeyUnknown) as caught:
        cipher.decrypt(dataclasses.replace(sealed, key_id="k-retired"), aad=aad())
    assert caught.value.code == "plan_key_unknown"
    assert "k-retired" in str(caught.value)
    assert_quiet(caught.value, plan_keyring.load(ring_path))
    odd_id = base64.b64encode(bytes(range(32))).decode()
    with pytest.raises(plan_cipher.PlanKeyUnknown) as caught:
        cipher.decrypt(dataclasses.replace(sealed, key_id=odd_id), aad=aad())
    assert odd_id not in str(caught.value)


def test_another_algorithm_is_refused(cipher: plan_cipher.PlanCipher) -> None:
    sealed = cipher.encrypt(PLAN, aad=aad())
    with pytest.raises(plan_cipher.PlanDecryptFailed, match="algorithm"):
        cipher.decrypt(dataclasses.replace(sealed, algorithm="ChaCha20-Poly1305"), aad=aad())


def test_rotation_keeps_old_ciphertexts_open_and_seals_new_ones_under_the_new_key(
    cipher: plan_cipher.PlanCipher, ring_path: Path
) -> None:
    old = cipher.encrypt(PLAN, aad=aad())
    rotated = plan_keyring.add_key(ring_path)
    after = plan_cipher.PlanCipher(plan_keyring.load(ring_path))
    assert after.active_key_id == rotated.active != old.key_id
    assert after.decrypt(old, aad=aad()) == PLAN
    new = after.encrypt(PLAN, aad=aad())
    assert new.key_id == rotated.active
    assert after.decrypt(new, aad=aad()) == PLAN
    with pytest.raises(plan_cipher.PlanKeyUnknown):
        cipher.decrypt(new, aad=aad())  # a process still on the old ring: typed, not garbage


def test_a_million_nonces_are_distinct(cipher: plan_cipher.PlanCipher) -> None:
    # About 2 s here; a collision among 2**20 random 96-bit nonces has odds near 2**-57.
    row = aad()
    nonces = {cipher.encrypt(b"p", aad=row).data[: plan_cipher.NONCE_BYTES] for _ in range(10**6)}
    assert len(nonces) == 10**6


def test_the_rings_plan_digests_survive_rotation_and_need_the_ring(
    cipher: plan_cipher.PlanCipher, ring_path: Path, tmp_path: Path
) -> None:
    plan = {"body": "transfer 100 to account 7"}
    stored = cipher.digests.plan_digest(plan)
    assert cipher.digests.keyed
    assert len(stored) == 64
    assert stored == stored.lower()
    assert stored != digests.PLAIN.plan_digest(plan)
    assert stored != hashlib.sha256(PLAN).hexdigest()
    for _ in range(2):
        plan_keyring.add_key(ring_path)
    after = plan_cipher.PlanCipher(plan_keyring.load(ring_path))
    assert after.digests.plan_digest(plan) == stored
    stranger = plan_cipher.PlanCipher(plan_keyring.generate(tmp_path / "other.toml"))
    assert stranger.digests.plan_digest(plan) != stored


def test_reprs_show_ids_and_sizes_only(cipher: plan_cipher.PlanCipher, ring_path: Path) -> None:
    sealed = cipher.encrypt(PLAN, aad=aad())
    shown = repr(sealed) + repr(cipher)
    assert cipher.active_key_id in shown
    assert repr(sealed.data)[2:20] not in shown
    for secret in key_texts(plan_keyring.load(ring_path)):
        assert secret not in shown


def test_importing_the_module_does_not_import_cryptography(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from qinglong_dispatcher.plan_keys import cipher as plan_cipher\n"
        "from qinglong_dispatcher.plan_keys import keyring as plan_keyring\n"
        "assert 'cryptography' not in sys.modules, 'imported at import time'\n"
        f"ring = plan_keyring.generate(Path({str(tmp_path / 'r.toml')!r}))\n"
        "assert 'cryptography' not in sys.modules, 'imported by generate'\n"
        "plan_cipher.PlanCipher(ring)\n"
        "assert 'cryptography' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
