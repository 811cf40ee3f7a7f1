"""What an item's execute leaves beside its row: the receipt its completion commits, or the
evidence of an outcome it lost track of."""

from __future__ import annotations

import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import digests, errors, records, uncertainty

# The dispatcher's logger: the event names and their source stay what operators know.
log = structlog.get_logger("qinglong_dispatcher.dispatcher")


async def keep_uncertain(
    store: ports.ExecutionStore, identity: records.ExecutionIdentity, result: ports.ExecuteResult
) -> None:
    """Keep what the execute knew beside the row for the operator who settles it; a
    failure costs only that evidence (the row goes to recovery either way)."""
    lost = uncertainty.LostTrack(
        identity=identity, result_code=result.code, evidence=result.evidence or {}
    )
    try:
        await store.record_uncertain(lost)
    except errors.StoreError as exc:
        log.warning(
            "dispatch.uncertain_unrecorded", dispatch_id=identity.dispatch_id, code=exc.code
        )


def receipt_of(
    dispatch: records.Dispatch, result: ports.ExecuteResult
) -> records.ActionReceipt | None:
    """The result's receipt as stored, or None. An effect has happened by now, so a receipt
    that is not canonical JSON within its cap costs the receipt, never the completion."""
    if result.receipt is None:
        return None
    try:
        receipt_json, receipt_digest = digests.action_receipt(result.receipt)
    except errors.CanonicalJsonError as exc:
        log.warning("dispatch.receipt_invalid", dispatch_id=dispatch.dispatch_id, code=exc.code)
        return None
    return records.ActionReceipt(receipt_json=receipt_json, receipt_digest=receipt_digest)
