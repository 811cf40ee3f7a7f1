"""The bench's policy phase: what an approval policy costs the submit path.

Two scratch stores of the profile, one with an owner's policy of N approvals for the bench's
action and one without, take the same path a plan at a time: a submitter's request, then
(under the policy) N − 1 approvers' votes, an approver's approval (under the policy, its
vote) and its consumption, each a transaction, as token principals acting through the store.
A submit approves its own request, which a policy refuses (the requester may not vote), so
this is the path a request under a policy takes. The two stores alternate round by round and
each keeps its best round: the machine's noise hits both alike.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from qinglong_dispatcher import api, bootstrap, clock, ports
from qinglong_dispatcher.bench import dialects, phases, scratch
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import approvals, errors, principals
from qinglong_dispatcher.usecases import approving, consuming, requesting, voting

TOKEN_TTL_MS = 60 * 60 * 1000


async def _principals(
    store: ports.Store, names: list[tuple[str, principals.TokenRole]]
) -> list[ports.ActingStore]:
    """Token principals acting through `store` (on PostgreSQL their roles are made by
    `create_token`, in the scratch installation, and dropped with it)."""
    acting = []
    for name, role in names:
        new, _ = principals.NewToken.issue(
            principal=name, role=role, ttl_ms=TOKEN_TTL_MS, created_by="bench"
        )
        token = await store.create_token(new)
        who = principals.Authenticated(token_id=token.token_id, principal=name, role=role)
        acting.append(await store.acting_as(who))
    return acting


async def _one(
    acting: list[ports.ActingStore], policy: api.Policy, plan: Any, *, governed: bool
) -> tuple[float, str]:
    """The path for one plan: its seconds, and its request."""
    requester, approver, *voters = acting
    the_clock = clock.SystemClock()
    started = time.perf_counter()
    created = await requesting.request_approval(
        requester, the_clock, policy, plan, requested_by="bench"
    )
    request = created.approval_request_id
    for voter in voters if governed else ():
        await voting.vote(voter, the_clock, request, approvals.Vote.APPROVE)
    await approving.approve(approver, the_clock, request, decided_by="bench")
    await consuming.consume(approver, the_clock, policy, request)
    return time.perf_counter() - started, request


async def policy_ratio(settings: Settings, count: int, approvals_required: int) -> dict[str, Any]:
    """`count` plans through each store, a plan at a time, alternating between the stores
    (which goes first alternates too): each store's rate at its median plan, and their ratio
    (with the policy over without). The median of interleaved plans keeps a shared machine's
    noise out of the ratio, which a rate over a whole batch would not."""
    names = [
        ("bench_requester", principals.TokenRole.SUBMITTER),
        *(
            (f"bench_approver_{n}", principals.TokenRole.APPROVER)
            for n in range(1, 1 + approvals_required)
        ),
    ]
    seconds: dict[str, list[float]] = {"plain": [], "governed": []}
    last: dict[str, str] = {}
    async with scratch.scratch(settings) as plain, scratch.scratch(settings) as governed:
        await dialects.of(governed.settings).write_policy(approvals_required)
        opened = {"plain": await plain.open(), "governed": await governed.open()}
        try:
            acting = {key: await _principals(store, names) for key, store in opened.items()}
            policy = bootstrap.policy(plain.settings)
            plans = phases.run_create_plans(count, project="policy")
            for n, plan in enumerate(plans):
                for key in ("plain", "governed") if n % 2 == 0 else ("governed", "plain"):
                    took, last[key] = await _one(
                        acting[key], policy, plan, governed=key == "governed"
                    )
                    seconds[key].append(took)
            await _verify(opened["governed"], last["governed"], count, approvals_required)
        finally:
            for store in opened.values():
                await store.close()
    without, with_policy = (1 / statistics.median(seconds[k]) for k in ("plain", "governed"))
    return {
        "approvals_required": approvals_required,
        "plans": count,
        "per_s_without": round(without, 1),
        "per_s_with": round(with_policy, 1),
        "ratio": round(with_policy / without, 3),
    }


async def _verify(store: ports.Store, request: str, count: int, approvals_required: int) -> None:
    """Every plan under the policy became an execution, and the last one's votes reached the
    policy's number: the policy was in force."""
    counts = await store.counts(now_ms=clock.SystemClock().now_ms())
    tally = await store.vote_tally(request)
    if sum(counts.executions.values()) != count or tally is None:
        raise errors.StoreError("bench: a plan under the policy was not", code="bench_unverified")
    if tally.approvals != approvals_required:
        raise errors.StoreError("bench: the policy counted no votes", code="bench_unverified")
