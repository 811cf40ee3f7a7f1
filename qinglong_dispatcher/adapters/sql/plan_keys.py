"""`keys rotate` and `keys check` as store transactions, written once for both dialects.

A rotation batch reads the next plans not sealed under the active key (clear ones included),
opens each, seals it again under the active key and writes it only if nobody resealed it
meanwhile; it is one short transaction, so it runs beside replicas that only read plans, and
a rotation stopped anywhere resumes where the remaining plans are. A check batch reads every
plan in key order and proves that it opens and that its plaintext is the one its digest names.
"""

from __future__ import annotations

import collections

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes

_FIRST = ("", "")
"""Before every plan key: identifiers are never empty."""


def _keyset(after: ports.PlanKey | None, limit: int) -> dict[str, object]:
    start = after or _FIRST
    return {"after_project_id": start[0], "after_action_ref": start[1], "limit": limit}


def _next(plans: list[ports.StoredPlan], limit: int) -> ports.PlanKey | None:
    if len(plans) < limit:
        return None
    return (plans[-1].project_id, plans[-1].action_ref)


async def reseal_batch(
    q: query.Query,
    envelopes: plan_envelopes.Envelopes,
    *,
    limit: int,
    after: ports.PlanKey | None,
) -> ports.ResealBatch:
    """See `ports.PlanKeyStore.reseal_plans`."""
    active = envelopes.active_key_id
    if active is None:
        raise errors.ConfigurationError(
            "keys rotate needs a plan key ring (QINGLONG_PLAN_KEYRING_FILE)",
            code="plan_keyring_missing",
        )
    if active not in await registered(q):
        raise _refused(
            f"the ring's active key {active} is not registered in the database; run "
            "`migrate` with this ring as the administrator",
            "plan_key_unregistered",
        )
    rows = await q.all("select_plans_to_reseal", {**_keyset(after, limit), "active_key_id": active})
    found = [ports.StoredPlan.from_row(row) for row in rows]
    resealed = unreadable = 0
    for stored in found:
        opened = envelopes.open(stored)
        if opened.unreadable is not None:
            unreadable += 1
            continue
        sealed = envelopes.seal_plan(
            opened.project_id, opened.action_ref, opened.action_type, opened.plan_json
        )
        written = await q.one(
            "reseal_plan",
            {
                "project_id": stored.project_id,
                "action_ref": stored.action_ref,
                "old_key_id": None if stored.sealed is None else stored.sealed.key_id,
                "key_id": sealed.key_id,
                "algorithm": sealed.algorithm,
                "sealed": sealed.data,
                "schema_version": sealed.schema_version,
            },
        )
        resealed += written is not None
    remaining = await q.one("count_plans_to_reseal", {"active_key_id": active})
    return ports.ResealBatch(
        resealed=resealed,
        unreadable=unreadable,
        remaining=int(remaining["n"]),
        after=_next(found, limit),
    )


async def check_batch(
    q: query.Query,
    envelopes: plan_envelopes.Envelopes,
    *,
    limit: int,
    after: ports.PlanKey | None,
) -> ports.CheckBatch:
    """See `ports.PlanKeyStore.check_plans`."""
    rows = await q.all("select_plans_after", _keyset(after, limit))
    found = [ports.StoredPlan.from_row(row) for row in rows]
    by_key: collections.Counter[str] = collections.Counter()
    failed: collections.Counter[str] = collections.Counter()
    clear = 0
    for stored in found:
        if stored.sealed is None:
            clear += 1
        else:
            by_key[stored.sealed.key_id] += 1
        opened = envelopes.open(stored)
        if opened.unreadable is not None:
            failed[opened.unreadable] += 1
        elif not envelopes.digests.binds_plan(opened.plan_bytes(), opened.plan_digest):
            failed["plan_digest_mismatch"] += 1
    return ports.CheckBatch(
        checked=len(found),
        clear=clear,
        by_key=dict(by_key),
        failed=dict(failed),
        after=_next(found, limit),
    )


async def registered(q: query.Query) -> frozenset[str]:
    """The key ids the database knows (written by the owner alone)."""
    return frozenset(str(row["key_id"]) for row in await q.all("select_plan_key_ids"))


async def register(
    q: query.Query, envelopes: plan_envelopes.Envelopes, *, now_ms: int
) -> list[str]:
    """See `ports.PlanKeyStore.register_plan_keys`."""
    done = []
    for key_id in sorted(envelopes.key_ids):
        if await q.one("register_plan_key", {"key_id": key_id, "now_ms": now_ms}) is not None:
            done.append(key_id)
    return done


def _refused(problem: str, code: str) -> errors.ConfigurationError:
    return errors.ConfigurationError(f"QINGLONG_PLAN_KEYRING_FILE: {problem}", code=code)


async def probe(q: query.Query, envelopes: plan_envelopes.Envelopes) -> ports.PlanKeyProbe:
    """See `ports.PlanKeyStore.probe_plan_keys`. What stops the process is decided by the
    registered keys (the owner's) and the ring; a plan row (anyone's who may write one) only
    ever blocks itself."""
    known = await registered(q)
    newest = await q.one("select_newest_sealed_plan")
    if envelopes.cipher is None:
        if known or newest is not None:
            raise _refused(
                "stored plans are sealed (plan keys are registered) and this process has no "
                "plan key ring",
                plan_envelopes.KEYRING_MISSING,
            )
        return ports.PlanKeyProbe()
    ring = envelopes.key_ids
    if known and not known & ring:
        raise _refused(
            f"the key ring holds none of the {len(known)} plan key(s) registered in the "
            "database: it is not this installation's ring",
            "plan_key_unknown",
        )
    if envelopes.active_key_id not in known:
        raise _refused(
            f"the ring's active key {envelopes.active_key_id} is not registered in the "
            "database; run `migrate` with this ring as the administrator",
            "plan_key_unregistered",
        )
    unreadable = None
    if newest is not None:
        unreadable = envelopes.open(ports.StoredPlan.from_row(newest)).unreadable
    return ports.PlanKeyProbe(not_in_ring=tuple(sorted(known - ring)), newest_unreadable=unreadable)
