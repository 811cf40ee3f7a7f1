"""Opaque identifiers and lease tokens: every generated id of the product, in one place.

Random (not derived from inputs), so they carry nothing of the plan; the prefixes only help a
reader of logs and tables tell the kinds apart.
"""

from __future__ import annotations

import secrets
import uuid


def new_dispatch_id() -> str:
    """A dispatch id (it is also the downstream idempotency key)."""
    return f"d-{uuid.uuid4().hex}"


def new_approval_request_id() -> str:
    """An approval request id."""
    return f"a-{uuid.uuid4().hex}"


def new_action_ref() -> str:
    """A fresh action ref, for plans whose submitter did not name one."""
    return f"act-{uuid.uuid4().hex}"


def new_step_run_id() -> str:
    """A Tool StepRun id."""
    return f"s-{uuid.uuid4().hex}"


def new_lease_token() -> str:
    """A claim's lease token: unguessable, so only its holder can present it."""
    return secrets.token_hex(16)
