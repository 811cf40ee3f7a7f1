"""Real database faults installed per dialect: triggers that make one write fail."""

from __future__ import annotations

from tests.support.stores import Harness


async def fail_inserts_into(h: Harness, table: str) -> None:
    """Every INSERT into `table` aborts from now on (a real constraint failure)."""
    if h.dialect == "sqlite":
        await h.raw(
            f"CREATE TRIGGER test_fail_{table} BEFORE INSERT ON {table} "
            f"BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
    else:
        await h.raw(
            "CREATE OR REPLACE FUNCTION qinglong.test_fail() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$"
        )
        await h.raw(
            f"CREATE TRIGGER test_fail_{table} BEFORE INSERT ON qinglong.{table} "
            "FOR EACH ROW EXECUTE FUNCTION qinglong.test_fail()"
        )


async def fail_execution_status(h: Harness, status: str) -> None:
    """Any UPDATE that would set an execution to `status` aborts (a failing completion write)."""
    table = "approved_action_dispatch_executions"
    if h.dialect == "sqlite":
        await h.raw(
            f"CREATE TRIGGER test_fail_status_{status} BEFORE UPDATE ON {table} "
            f"WHEN NEW.status = '{status}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
    else:
        await h.raw(
            "CREATE OR REPLACE FUNCTION qinglong.test_fail() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$"
        )
        await h.raw(
            f"CREATE TRIGGER test_fail_status_{status} BEFORE UPDATE ON qinglong.{table} "
            f"FOR EACH ROW WHEN (NEW.status = '{status}') EXECUTE FUNCTION qinglong.test_fail()"
        )


def table(h: Harness, name: str) -> str:
    """The qualified table name in this dialect."""
    return name if h.dialect == "sqlite" else f"qinglong.{name}"


async def tamper_mutable(h: Harness, table: str, assignment: str, where: str) -> None:
    """Change a mutable row past its state-machine trigger, as file or superuser access could."""
    trigger = f"{table}_state_machine"
    if h.dialect == "sqlite":
        (saved,) = await h.raw(f"SELECT sql FROM sqlite_master WHERE name = '{trigger}'")
        await h.raw(f"DROP TRIGGER {trigger}")
        await h.raw(f"UPDATE {table} SET {assignment} WHERE {where}")
        await h.raw(saved["sql"])
        return
    await h.raw(f"ALTER TABLE qinglong.{table} DISABLE TRIGGER {trigger}")
    await h.raw(f"UPDATE qinglong.{table} SET {assignment} WHERE {where}")
    await h.raw(f"ALTER TABLE qinglong.{table} ENABLE TRIGGER {trigger}")
