"""Plans at rest: the store seals a plan as it writes it and opens it as it hands it out.

Everything above the store sees canonical plaintext; only `action_plans` holds ciphertext.
With a key ring (`QINGLONG_PLAN_KEYRING_FILE`), every new plan is sealed under the ring's
active key (AES-256-GCM, a fresh nonce, the row's identity as associated data); without one,
new plans are written in clear and a sealed row found later cannot be opened. A plan that does
not open comes back `unreadable` with a low-sensitivity code, never as an error that retries
and never as plaintext: inspect blocks it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Final

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import approvals, digests
from qinglong_dispatcher.plan_keys import cipher as plan_cipher
from qinglong_dispatcher.plan_keys import keyring

KEYRING_MISSING: Final = "plan_keyring_missing"
"""The code of a sealed plan read by a process that has no key ring."""


def _aad(project_id: str, action_ref: str, action_type: str, schema_version: int) -> bytes:
    return plan_cipher.aad_for(project_id, action_ref, action_type, schema_version)


def schema_version_of(plan_json: str) -> int:
    """The `schemaVersion` of a canonical plan (every plan model carries one)."""
    version = json.loads(plan_json).get("schemaVersion")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError("a plan without an integer schemaVersion")
    return version


class Envelopes:
    """The store's plan cipher, or none (plans in clear)."""

    def __init__(self, cipher: plan_cipher.PlanCipher | None) -> None:
        self.cipher = cipher
        self.digests = digests.PLAIN if cipher is None else cipher.digests
        """How plans are digested here: keyed under the ring's digest secret when there is
        a ring, so that a copy of the database confirms no guessed plan."""

    @property
    def active_key_id(self) -> str | None:
        """The key new plans are sealed under; None without a key ring."""
        return None if self.cipher is None else self.cipher.active_key_id

    @property
    def key_ids(self) -> frozenset[str]:
        """Every key id the ring opens; empty without a key ring."""
        return frozenset() if self.cipher is None else self.cipher.key_ids

    def seal_plan(
        self, project_id: str, action_ref: str, action_type: str, plan_json: str
    ) -> approvals.SealedPlan:
        """The envelope of one canonical plan under the active key."""
        assert self.cipher is not None
        version = schema_version_of(plan_json)
        sealed = self.cipher.encrypt(
            plan_json.encode("utf-8"), aad=_aad(project_id, action_ref, action_type, version)
        )
        return approvals.SealedPlan(
            key_id=sealed.key_id,
            algorithm=sealed.algorithm,
            data=sealed.data,
            schema_version=version,
        )

    def seal(self, new: approvals.NewApproval) -> approvals.NewApproval:
        """`new` as the store writes it: sealed when there is a key ring, else unchanged."""
        if self.cipher is None or new.sealed is not None:
            return new
        sealed = self.seal_plan(new.project_id, new.action_ref, new.action_type, new.plan_json)
        return dataclasses.replace(new, plan_json="", sealed=sealed)

    def open(self, plan: ports.StoredPlan) -> ports.StoredPlan:
        """`plan` with its canonical plaintext, or marked `unreadable` with a code."""
        if plan.sealed is None:
            return plan
        if self.cipher is None:
            return dataclasses.replace(plan, sealed=None, unreadable=KEYRING_MISSING)
        envelope = plan_cipher.Sealed(
            key_id=plan.sealed.key_id, algorithm=plan.sealed.algorithm, data=plan.sealed.data
        )
        aad = _aad(plan.project_id, plan.action_ref, plan.action_type, plan.sealed.schema_version)
        try:
            text = self.cipher.decrypt(envelope, aad=aad).decode("utf-8")
        except plan_cipher.PlanCipherError as exc:
            return dataclasses.replace(plan, sealed=None, unreadable=exc.code)
        except UnicodeDecodeError:
            return dataclasses.replace(plan, sealed=None, unreadable="plan_decrypt_failed")
        return dataclasses.replace(plan, plan_json=text, sealed=None)


def from_keyring(path: Path | None, *, group_readable: bool = False) -> Envelopes:
    """The envelopes of the key ring at `path` (None: plans in clear). A ring that cannot be
    used is a configuration error (exit 78), never a silent fallback to clear text.
    `group_readable` accepts a ring its group may read (`keyring.load`)."""
    if path is None:
        return Envelopes(None)
    ring = keyring.load(path, allow_group_read=group_readable)
    return Envelopes(plan_cipher.PlanCipher(ring))
