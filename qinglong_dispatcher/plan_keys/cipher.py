"""AES-256-GCM envelopes for stored plans, bound to their row, and the ring's plan digests.

`PlanCipher(ring).encrypt(plan_bytes, aad=aad_for(...))` seals under the ring's active key
with a fresh random 96-bit nonce; `decrypt` opens with the key the envelope names, so rotated
keys keep opening what they sealed. The associated data binds a ciphertext to its row: moved
to a row of another project, action, type or schema version, it no longer opens.

Random nonces are safe for about 2**32 encryptions per key (NIST SP 800-38D); rotate with
`keyring.add_key` long before that (a key a year is far inside it for plan volumes).

cryptography is imported when a `PlanCipher` is built or a ring's digest key derived, never
at import time, so a deployment without plan encryption never loads it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Final

from qinglong_dispatcher.domain import canonical, digests, errors
from qinglong_dispatcher.plan_keys import keyring

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

ALGORITHM: Final = "AES-256-GCM"
"""The one algorithm a `Sealed` may name; stored beside it so another can follow one day."""

NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16

AAD_TAG: Final = "qinglong/plan-aad@v1"
"""Domain of the associated data that binds a sealed plan to its row."""

_AAD_MAX_BYTES: Final = 4 * 1024


class PlanCipherError(errors.QinglongError):
    """A sealed plan cannot be opened."""

    code = "plan_cipher_error"


class PlanKeyUnknown(PlanCipherError):
    """The sealed plan names a key that is not in the plan key ring (retired too early?)."""

    code = "plan_key_unknown"


class PlanDecryptFailed(PlanCipherError):
    """The sealed plan does not open: another key, altered or truncated bytes, or another row."""

    code = "plan_decrypt_failed"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Sealed:
    """An encrypted plan as stored: the key id, the algorithm and nonce ‖ ciphertext ‖ tag."""

    key_id: str
    data: bytes = dataclasses.field(repr=False)
    algorithm: str = ALGORITHM

    def __repr__(self) -> str:
        return f"Sealed(key_id={self.key_id!r}, algorithm={self.algorithm!r}, {len(self.data)} B)"


def aad_for(project_id: str, action_ref: str, action_type: str, schema_version: int) -> bytes:
    """The associated data of a plan's row: `AAD_TAG`, NUL, then the canonical JSON of
    `{"actionRef", "actionType", "projectId", "schemaVersion"}`.

    Canonical JSON quotes and escapes every string, so no two different rows share one
    encoding. A value that is not a string (an int for the version) raises `InvalidInput`.
    """
    texts = {"projectId": project_id, "actionRef": action_ref, "actionType": action_type}
    for name, value in texts.items():
        if not isinstance(value, str):
            raise errors.InvalidInput(f"plan aad: {name} must be a string")
    if not isinstance(schema_version, int) or isinstance(schema_version, bool):
        raise errors.InvalidInput("plan aad: schemaVersion must be an integer")
    fields = {**texts, "schemaVersion": schema_version}
    return AAD_TAG.encode("ascii") + b"\0" + canonical.dumps(fields, max_bytes=_AAD_MAX_BYTES)


def _shown(key_id: str) -> str:
    # A key id read back from a row is shown only when it has the shape of one.
    return key_id if keyring.KEY_ID.fullmatch(key_id) else "(not an identifier)"


class PlanCipher:
    """Seals with the ring's active key; opens with whichever ring key a `Sealed` names."""

    def __init__(self, ring: keyring.KeyRing) -> None:
        from cryptography.hazmat.primitives.ciphers import aead

        self._active = ring.active
        self._aeads: dict[str, AESGCM] = {
            key_id: aead.AESGCM(key) for key_id, key in ring.keys.items()
        }
        self._digests = digests.keyed(ring.digest_key())

    def __repr__(self) -> str:
        return f"PlanCipher(active={self._active!r}, keys={len(self._aeads)})"

    @property
    def active_key_id(self) -> str:
        """The id new envelopes are sealed under."""
        return self._active

    @property
    def key_ids(self) -> frozenset[str]:
        """Every id this ring opens (the active one included)."""
        return frozenset(self._aeads)

    def encrypt(self, plaintext: bytes, *, aad: bytes) -> Sealed:
        """Seal `plaintext` under the active key with a fresh random nonce, bound to `aad`."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aeads[self._active].encrypt(nonce, bytes(plaintext), bytes(aad))
        return Sealed(key_id=self._active, data=nonce + sealed)

    def decrypt(self, sealed: Sealed, *, aad: bytes) -> bytes:
        """The plaintext of `sealed`, if it opens under its key with exactly this `aad`.

        Raises `PlanKeyUnknown` when the ring lacks the key, `PlanDecryptFailed` when the
        algorithm is not ALGORITHM or the bytes do not authenticate. Messages carry the key
        id at most, never plaintext, ciphertext or key.
        """
        from cryptography import exceptions

        if sealed.algorithm != ALGORITHM:
            raise PlanDecryptFailed(f"sealed plan: the algorithm is not {ALGORITHM}")
        aesgcm = self._aeads.get(sealed.key_id)
        if aesgcm is None:
            raise PlanKeyUnknown(
                f"sealed plan: key {_shown(sealed.key_id)} is not in the plan key ring"
            )
        data = bytes(sealed.data)
        if len(data) < NONCE_BYTES + TAG_BYTES:
            raise PlanDecryptFailed(f"sealed plan under key {sealed.key_id}: truncated")
        try:
            return aesgcm.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], bytes(aad))
        except exceptions.InvalidTag:
            raise PlanDecryptFailed(
                f"sealed plan under key {sealed.key_id} does not open "
                "(another key, altered bytes, or another row's binding)"
            ) from None

    @property
    def digests(self) -> digests.PlanDigests:
        """Plan digests keyed with the ring's `digest_key()`: unlike a bare SHA-256 digest, one
        cannot be recomputed from a guessed plan without the ring, so a copy of the database
        does not confirm guesses. Rotation leaves the key unchanged: a stored value verifies
        forever."""
        return self._digests
