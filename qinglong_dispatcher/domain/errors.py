"""Typed errors. Each carries a low-sensitivity `code`; the docstring is the default message."""

from __future__ import annotations

import re


class QinglongError(Exception):
    """qinglong-dispatcher error."""

    code = "error"

    def __init__(self, message: str | None = None, *, code: str | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message or (self.__doc__ or self.code).strip())


class InvalidInput(QinglongError):
    """The input is not valid."""

    code = "invalid_input"


class CanonicalJsonError(InvalidInput):
    """The value cannot be written as canonical JSON."""

    code = "canonical_json_invalid"


class PlanInvalid(InvalidInput):
    """The action plan does not have the exact shape of its version."""

    code = "plan_invalid"


class UnknownActionType(InvalidInput):
    """No action of this type is known."""

    code = "unknown_action_type"


class ConfigurationError(QinglongError):
    """The configuration is not valid."""

    code = "configuration_invalid"


class ActionRegistrationError(ConfigurationError):
    """An action installed through the `qinglong_dispatcher.actions` entry points is invalid."""

    code = "action_registration_invalid"


class ApprovalError(QinglongError):
    """The approval cannot take this step."""

    code = "approval_refused"


class WindowEmpty(ApprovalError):
    """The requested execution window ends before it can start: the requester may only
    narrow the policy's window, and this narrowing leaves nothing of it."""

    code = "window_empty"


class ApprovalNotFound(ApprovalError):
    """No approval request has this id."""

    code = "approval_not_found"


class ApprovalStateConflict(ApprovalError):
    """The approval request is not in the state this step needs."""

    code = "approval_state_conflict"


class AlreadyVoted(ApprovalStateConflict):
    """This principal has voted on this request already (one vote per principal)."""

    code = "already_voted"


class ApprovalExpired(ApprovalError):
    """The approval request has expired."""

    code = "approval_expired"


class ApprovalNotPermitted(ApprovalError):
    """This principal may not take this approval step (not a qinglong_approver login)."""

    code = "approval_not_permitted"


class SelfApprovalRefused(ApprovalError):
    """The approver is the requester, and self-approval is not allowed for this principal."""

    code = "self_approval_refused"


class ApprovalTransitionRefused(ApprovalError):
    """The store refused this change of an approval request (not a permitted transition)."""

    code = "approval_transition_refused"


class LeaseConflict(QinglongError):
    """The execution fence no longer matches: another owner, token or version holds the row."""

    code = "lease_conflict"


class StoreError(QinglongError):
    """The store failed; nothing was assumed to have been written."""

    code = "store_error"
    retryable = False
    """Whether the same transaction may simply be tried again (it rolled back whole)."""


class StoreUnavailable(StoreError):
    """The store cannot be reached."""

    code = "store_unavailable"
    retryable = True


class StoreBusy(StoreError):
    """The store is locked by another writer beyond the busy timeout."""

    code = "store_busy"
    retryable = True


class StoreFull(StoreError):
    """The store has no space left for this write."""

    code = "store_full"
    retryable = True
    """It rolled back whole, and the same transaction succeeds once there is space again."""


class StoreCorrupted(StoreError):
    """A stored row fails its own checks."""

    code = "store_corrupted"


class SchemaError(StoreError):
    """The database schema does not match this release's migrations."""

    code = "schema_mismatch"


class SchemaNotMigrated(SchemaError):
    """The database has pending migrations; run `qinglong-dispatcher migrate`."""

    code = "schema_not_migrated"


class SchemaTampered(SchemaError):
    """An applied migration's checksum differs from its file."""

    code = "schema_tampered"


class SchemaTooNew(SchemaError):
    """The database holds migrations this release does not know."""

    code = "schema_too_new"


class SchemaForeign(SchemaError):
    """The database holds another program's tables and no migration ledger of ours."""

    code = "schema_foreign"


class StoreInUse(QinglongError):
    """Another daemon already runs on this SQLite file, which must have one authority."""

    code = "store_in_use"


class DurabilityRefused(ConfigurationError):
    """The store is not configured for durable commits."""

    code = "durability_refused"


class RecoveryRefused(QinglongError):
    """The execution is not recovery_required, or changed while being resolved."""

    code = "recovery_refused"


class CancelRefused(QinglongError):
    """The dispatch is not waiting (`pending`/`retry_wait`), or was claimed while cancelling."""

    code = "cancel_refused"


class ResubmitRefused(QinglongError):
    """The dispatch (or expired request) cannot be requested again: it is not failed, blocked,
    cancelled or expired, its action is bound to another record, or its plan does not open."""

    code = "resubmit_refused"


class DispatchNotFound(QinglongError):
    """No dispatch has this id."""

    code = "dispatch_not_found"


class PlanReadRefused(QinglongError):
    """Reading a whole plan needs a plan reader's login (the installation's _plan_reader)."""

    code = "plan_read_refused"


class StepRunRefused(QinglongError):
    """The StepRun cannot be created or moved: its Run, state or binding does not allow it."""

    code = "step_run_refused"


class SandboxUnavailable(ConfigurationError):
    """The tool sandbox directory is missing, not a directory, or cannot be used."""

    code = "sandbox_unavailable"


class TransitionRefused(StoreError):
    """The database refused a row change its state machine does not allow (migration 0006)."""

    code = "transition_refused"

    @property
    def rule(self) -> str | None:
        """The trigger's rule (`transition`, `operator`, …), as its message names it."""
        found = re.search(r"qinglong:transition_refused: (\w+)", str(self))
        return None if found is None else found.group(1)


class PrincipalNotPermitted(StoreError):
    """The authenticated principal's role does not permit this step."""

    code = "permission_denied"


class TokenRefused(QinglongError):
    """The token cannot be created or revoked as asked."""

    code = "token_refused"


class TokenNotFound(TokenRefused):
    """No token has this id."""

    code = "token_not_found"


class PolicyRefused(QinglongError):
    """The approval policy cannot be written as asked."""

    code = "policy_refused"


class PolicyNotFound(PolicyRefused):
    """No approval policy of this name is in force."""

    code = "policy_not_found"


class FreezeRefused(QinglongError):
    """The freeze, its end or its lift cannot be written as asked (the database refused it)."""

    code = "freeze_refused"


class FreezeNotFound(FreezeRefused):
    """No open freeze has this id."""

    code = "freeze_not_found"
