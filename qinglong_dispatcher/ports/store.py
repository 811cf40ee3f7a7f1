"""One dialect's whole store: every store port, plus schema and startup checks."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import (
    schema,
)
from qinglong_dispatcher.ports.action_tables import StoreHost
from qinglong_dispatcher.ports.approvals import ApprovalStore, PlanStore
from qinglong_dispatcher.ports.audit_export import AuditExportStore
from qinglong_dispatcher.ports.dispatches import CancelStore, DispatchReadStore, PlanReadStore
from qinglong_dispatcher.ports.executions import ExecutionStore, PageStore
from qinglong_dispatcher.ports.freezes import FreezeStore
from qinglong_dispatcher.ports.notes import NoteStore
from qinglong_dispatcher.ports.notifications import NotificationStore
from qinglong_dispatcher.ports.plan_keys import PlanKeyStore
from qinglong_dispatcher.ports.policies import PolicyReadStore, PolicyStore
from qinglong_dispatcher.ports.principals import PrincipalStores, TokenStore
from qinglong_dispatcher.ports.recovery import RecoveryStore
from qinglong_dispatcher.ports.retention import PruneStore
from qinglong_dispatcher.ports.targets import TargetReadStore
from qinglong_dispatcher.ports.ui_sessions import UiSessionStore


class Store(
    ExecutionStore,
    ApprovalStore,
    PlanStore,
    PageStore,
    RecoveryStore,
    CancelStore,
    DispatchReadStore,
    PlanReadStore,
    PruneStore,
    PlanKeyStore,
    PolicyReadStore,
    TargetReadStore,
    TokenStore,
    PolicyStore,
    FreezeStore,
    UiSessionStore,
    AuditExportStore,
    NotificationStore,
    NoteStore,
    PrincipalStores,
    StoreHost,
    Protocol,
):
    """One dialect's whole store; a built-in action's repository runs on it (`StoreHost`)."""

    dialect: str

    async def migrate(self, *, now_ms: int) -> list[int]:
        """Apply pending migrations (holding the dialect's migration lock); the versions applied."""
        ...

    async def schema_state(self) -> schema.SchemaState:
        """How the database's applied migrations compare with this release."""
        ...

    async def check_durability(self) -> None:
        """Raise `DurabilityRefused` unless commits are durable (docs/decisions/0020)."""
        ...

    async def check_integrity(self) -> None:
        """Raise `StoreCorrupted` naming the database if its pages are damaged (`run`, `tick`)."""
        ...

    async def database_now_ms(self) -> int:
        """The database's own clock (ledger `committed_at_ms` uses it; the skew guard reads it)."""
        ...

    async def write_problem(self) -> str:
        """Why a write would fail now, naming the database ("" when nothing is known): the
        daemon's readiness fails while there is one (`/readyz`)."""
        ...

    async def ddl_capabilities(self) -> tuple[str, ...]:
        """Why the connected role could change the schema (empty: it cannot; `run` warns)."""
        ...

    async def public_privileges(self) -> tuple[str, ...]:
        """What every login may do to the database that no role of ours needs (`TEMP`,
        `CREATE`): a temporary object is the first step of a known attack; `migrate` warns."""
        ...

    @property
    def commits(self) -> int:
        """Write transactions committed through this store (the benchmark counts them)."""
        ...

    @property
    def worker_costs(self) -> dict[str, float] | None:
        """SQLite: CPU and wall seconds inside the store's worker thread and rows changed so far
        (`cpu_s`, `wall_s`, `rows_changed`; the benchmark reads them); None on PostgreSQL."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
