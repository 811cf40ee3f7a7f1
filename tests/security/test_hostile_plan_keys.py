"""Plan keys are the owner's word: no login below it seals a plan under a key id the database
does not know, reseals a plan, or writes the registry, so no one row can stop every daemon.

On PostgreSQL each attack is made from a plain login holding only its documented role and
asserts the database's SQLSTATE; on SQLite (the file's owner is the authority) the triggers
still refuse a plan sealed under an unregistered key. Each checks that nothing changed.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.plan_keys import keyring as plan_keyring
from tests.support import refusals, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock

PLANS = "SELECT * FROM qinglong.action_plans ORDER BY action_ref"
KEYS = "SELECT * FROM qinglong.plan_keys ORDER BY key_id"


@pytest.fixture
def now() -> ManualClock:
    return ManualClock(int(time.time() * 1000))


async def _sealed(h: stores.Harness, tmp_path: Path, clock: ManualClock) -> str:
    """One plan sealed under a registered key, submitted by the approver: its action ref."""
    ring = tmp_path / "plan-keys"
    plan_keyring.generate(ring)
    envelopes = plan_envelopes.from_keyring(ring)
    await h.register_plan_keys(*envelopes.key_ids)
    h.approver_store.envelopes = envelopes  # type: ignore[misc]
    (consumed,) = await submit_runs(h.approver_store, clock, 1)
    return consumed.action_ref


async def _snapshot(h: stores.Harness) -> tuple[Any, ...]:
    return await h.raw(PLANS), await h.raw(KEYS)


@pytest.mark.postgres
async def test_the_runtime_cannot_reseal_a_plan_under_a_foreign_key_id(
    pg: stores.Harness, now: ManualClock, tmp_path: Path
) -> None:
    ref = await _sealed(pg, tmp_path, now)
    before = await _snapshot(pg)
    database = str(await pg.scalar("SELECT current_database()"))
    state = await refusals.sqlstate_as(
        stores.runtime_url(database),
        "UPDATE qinglong.action_plans SET plan_key_id = 'k-nobody-holds', "
        "plan_sealed = '\\x00'::bytea WHERE action_ref = $1",
        ref,
    )
    assert state == "42501"
    assert await _snapshot(pg) == before


@pytest.mark.postgres
@pytest.mark.parametrize("login", ["runtime", "approver"])
async def test_no_login_inserts_a_plan_sealed_under_an_unregistered_key(
    pg: stores.Harness, now: ManualClock, tmp_path: Path, login: str
) -> None:
    await _sealed(pg, tmp_path, now)
    before = await _snapshot(pg)
    database = str(await pg.scalar("SELECT current_database()"))
    url = stores.runtime_url(database) if login == "runtime" else stores.approver_url(database)
    state = await refusals.sqlstate_as(
        url,
        "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
        "plan_digest, created_at_ms, plan_key_id, plan_algorithm, plan_sealed, "
        "plan_schema_version) VALUES ('p', 'act-foreign', 'run.create', '', "
        "repeat('0', 64), 1, 'k-nobody-holds', 'AES-256-GCM', '\\x00'::bytea, 1)",
    )
    assert state == "23503"  # the registry's foreign key: the database's own refusal
    assert await _snapshot(pg) == before


@pytest.mark.postgres
@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO qinglong.plan_keys (key_id, registered_at_ms) VALUES ('k-mine', 1)",
        "DELETE FROM qinglong.plan_keys",
        "UPDATE qinglong.plan_keys SET key_id = 'k-mine'",
    ],
)
async def test_only_the_owner_writes_the_registry(
    pg: stores.Harness, now: ManualClock, tmp_path: Path, sql: str
) -> None:
    await _sealed(pg, tmp_path, now)
    before = await _snapshot(pg)
    database = str(await pg.scalar("SELECT current_database()"))
    for url in (
        stores.runtime_url(database),
        stores.approver_url(database),
        stores.operator_url(database),
        stores.pruner_url(database),
    ):
        assert await refusals.sqlstate_as(url, sql) == "42501"
    assert await _snapshot(pg) == before


@pytest.mark.postgres
async def test_even_the_owner_cannot_seal_a_plan_under_an_unregistered_key(
    pg: stores.Harness, now: ManualClock, tmp_path: Path
) -> None:
    ref = await _sealed(pg, tmp_path, now)
    before = await _snapshot(pg)
    with pytest.raises(asyncpg.PostgresError) as caught:
        await pg.raw(
            "UPDATE qinglong.action_plans SET plan_key_id = 'k-nobody-holds' "
            f"WHERE action_ref = '{ref}'"
        )
    assert caught.value.sqlstate == "23503"
    assert await _snapshot(pg) == before


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE action_plans SET plan_key_id = 'k-nobody-holds' WHERE action_ref = '{ref}'",
        "INSERT INTO action_plans (project_id, action_ref, action_type, plan_json, plan_digest, "
        "created_at_ms, plan_key_id, plan_algorithm, plan_sealed, plan_schema_version) VALUES "
        "('p', 'act-foreign', 'run.create', '', '{zeros}', 1, 'k-nobody-holds', 'AES-256-GCM', "
        "x'00', 1)",
    ],
)
async def test_on_edge_a_plan_is_never_sealed_under_an_unregistered_key(
    edge: stores.Harness, clock: ManualClock, tmp_path: Path, sql: str
) -> None:
    ref = await _sealed(edge, tmp_path, clock)
    plans = "SELECT * FROM action_plans ORDER BY action_ref"
    before = await edge.raw(plans)
    with pytest.raises(sqlite3.IntegrityError) as caught:
        await edge.raw(sql.format(ref=ref, zeros="0" * 64))
    assert str(caught.value) == "action_plans: a plan is sealed under a registered key"
    assert await edge.raw(plans) == before
