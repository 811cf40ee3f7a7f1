"""What the daemon knew when it lost track of an effect: written by the lease holder, read by
`dispatch show` (migration 0029; `domain.uncertainty`).

One transaction for both dialects. The row names the started row's attempt and owner; on
PostgreSQL it also presents the holder's proof, which the table's trigger checks against the
row and clears (QLF01 otherwise), and the database clock stamps it. A replay writes nothing.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import ids, uncertainty


async def record_uncertain(q: query.Query, lost: uncertainty.LostTrack) -> None:
    """Keep what the execute knew when it answered `uncertain`, beside its started row."""
    identity = lost.identity
    await q.run(
        "insert_uncertain_outcome",
        {
            "dispatch_id": identity.dispatch_id,
            "attempt": identity.attempt,
            "owner": identity.owner,
            "result_code": lost.result_code[:128],
            "evidence_json": lost.evidence_json(),
            "proof": ids.lease_proof(identity.token),
        },
    )


async def uncertain_outcome(
    q: query.Query, dispatch_id: str
) -> uncertainty.UncertainOutcome | None:
    """The dispatch's uncertain outcome, if its execute answered `uncertain`."""
    row = await q.one("select_uncertain_outcome", {"dispatch_id": dispatch_id})
    return None if row is None else uncertainty.UncertainOutcome.from_row(row)
