"""The action kit: one action under test, a migrated SQLite file, and the daemon's own path.

`open_kit` loads the action with the checks the daemon's startup makes (from its
`ActionSpec`, or from its entry point), opens a store on a new SQLite file and migrates it,
and builds what a daemon process builds for the action: its guarded handler under a real
`Dispatcher`, its guarded evidence provider under a real `Reconciler`. A dispatch goes the
whole way: created by one principal, approved by another, consumed, then claimed, inspected,
started at the barrier, executed and completed by `dispatch_batch`, as `tick` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import itertools
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Final

from qinglong_dispatcher import bootstrap, ports
from qinglong_dispatcher.actions import contract, registry
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.domain import errors, plan_previews, plans, principals, records, recovery
from qinglong_dispatcher.recovery import reconciler
from qinglong_dispatcher.testing.clock import ManualClock
from qinglong_dispatcher.testing.ledger import Dispatched
from qinglong_dispatcher.usecases import approving, requesting

REQUESTED_BY: Final = "kit-requester"
APPROVED_BY: Final = "kit-approver"
"""Two principals, a submitter and an approver: separation of duties holds, as it does for
the API's tokens."""

CRASH_POINTS: Final = ("after_claim", "after_inspect", "after_start", "after_execute")
"""Where `crash` can kill a process: before the barrier (another claim takes over), after it
with no effect yet, and after the effect with no completion written."""

DATABASE: Final = "qinglong.db"


class SimulatedCrash(BaseException):
    """The process dying at a crash point: the dispatcher meeting it writes nothing more."""


def _crashed(exc: BaseException) -> bool:
    if isinstance(exc, SimulatedCrash):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(SimulatedCrash) is not None


def _principal(name: str, role: str, n: int) -> principals.Authenticated:
    return principals.Authenticated(
        token_id=f"tok_{n:016x}", principal=name, role=principals.TokenRole(role)
    )


def from_entry_point(action_type: str) -> registry.Installed:
    """The action `action_type` as the daemon loads it: its `qinglong_dispatcher.actions`
    entry point, imported and checked; raises when this environment declares none."""
    entries = importlib.metadata.entry_points(group=contract.ENTRY_POINT_GROUP, name=action_type)
    if not entries:
        raise errors.ActionRegistrationError(
            f"no {contract.ENTRY_POINT_GROUP} entry point is named {action_type}",
            code="action_not_installed",
        )
    return registry.load(entries)


@dataclasses.dataclass(frozen=True, slots=True)
class _Process:
    """What one daemon process holds for the action: built once, from the factories."""

    dispatcher: dispatcher.Dispatcher
    providers: Mapping[str, ports.EvidenceProvider]
    reconciler: reconciler.Reconciler

    async def aclose(self) -> None:
        await self.dispatcher.aclose()
        await self.reconciler.aclose()


class ActionKit:
    """One action on a migrated SQLite store, dispatched as the daemon dispatches it.

    `clock` is the store's and the action's clock (`ActionContext.clock`): it stands still
    unless a test moves it (`advance`), so a retry's wait or a lease runs out only then.
    """

    def __init__(
        self,
        store: ports.Store,
        installed: registry.Installed,
        settings: Settings,
        clock: ManualClock,
    ) -> None:
        (self.action_type,) = installed.action_types
        self.store = store
        self.clock = clock
        self.database = settings.sqlite_path
        """The SQLite file (for a look with `qinglong-dispatcher --database sqlite:///…`)."""
        self._installed = installed
        self._settings = settings
        self._owners = (f"kit-{n}" for n in itertools.count(1))
        self._process = self._start()

    def _start(self, fault_hook: dispatcher.FaultHook | None = None) -> _Process:
        """A new process: its own owner id, handler and provider (the factories run again)."""
        settings = self._settings
        ctx = self._installed.context(self.store, self.clock)
        providers = self._installed.evidence_providers(ctx)
        config = bootstrap.dispatch_config(settings, owner=next(self._owners))
        return _Process(
            dispatcher=dispatcher.Dispatcher(
                self.store,
                self._installed.handlers(ctx),
                self.clock,
                config,
                fault_hook=fault_hook,
            ),
            providers=providers,
            reconciler=reconciler.Reconciler(self.store, providers, self.clock),
        )

    async def submit(self, plan: Mapping[str, object]) -> str:
        """`plan` created for approval by `REQUESTED_BY`, approved and consumed by
        `APPROVED_BY` (each the store acting as that principal, as the HTTP API's writes are):
        the new dispatch's id. A plan of another shape raises as `approval create` refuses it."""
        parsed = plans.parse_plan(self.action_type, plan, models=self._installed.plan_models)
        requester = await self.store.acting_as(_principal(REQUESTED_BY, "submitter", 1))
        approver = await self.store.acting_as(_principal(APPROVED_BY, "approver", 2))
        the_policy = bootstrap.policy(self._settings)
        created = await requesting.request_approval(
            requester, self.clock, the_policy, parsed, requested_by=REQUESTED_BY
        )
        _, consumed = await approving.approve_and_consume(
            approver, self.clock, the_policy, created.approval_request_id, decided_by=APPROVED_BY
        )
        return consumed.dispatch_id

    async def tick(self) -> dispatcher.BatchReport:
        """One batch of the dispatcher: every due dispatch claimed, inspected, started,
        executed and completed (or released before its barrier)."""
        return await self._process.dispatcher.dispatch_batch()

    async def dispatch(self, plan: Mapping[str, object]) -> Dispatched:
        """`submit` then `tick`: the dispatch as the ledger has it after one batch."""
        dispatch_id = await self.submit(plan)
        await self.tick()
        return await self.read(dispatch_id)

    async def crash(self, plan: Mapping[str, object], *, at: str) -> Dispatched:
        """`submit`, then one batch in a process that dies at `at` (one of `CRASH_POINTS`);
        the kit's process, with another owner id, carries on (`tick`, `recover`)."""
        if at not in CRASH_POINTS:
            raise ValueError(f"at: one of {', '.join(CRASH_POINTS)}")

        async def die(point: str, dispatch: records.Dispatch) -> None:
            if point == at:
                raise SimulatedCrash(at)

        dispatch_id = await self.submit(plan)
        dying = self._start(fault_hook=die)
        try:
            await dying.dispatcher.dispatch_batch()
        except BaseException as exc:
            if not _crashed(exc):
                raise
        else:
            raise AssertionError(f"never reached {at}; {(await self.read(dispatch_id)).story()}")
        finally:
            await dying.aclose()
        return await self.read(dispatch_id)

    async def recover(self) -> reconciler.ReconcileReport:
        """Move the clock past the lease, so that every started dispatch whose process died is
        `recovery_required`, and run one reconcile pass: the evidence provider settles each (or
        the pass records what it observed, for an operator)."""
        self.advance((self._settings.lease_ms + 1) / 1000)
        return await self._process.reconciler.reconcile_pass()

    def advance(self, seconds: float) -> None:
        """Move the kit's clock forward (a retry's wait, a lease)."""
        self.clock.advance(seconds)

    async def read(self, dispatch_id: str) -> Dispatched:
        """The dispatch as the ledger has it now."""
        detail = await self.store.show_dispatch(
            dispatch_id,
            now_ms=self.clock.now_ms(),
            shown=plan_previews.shown_by_type(self._installed.plan_models),
        )
        if detail is None:
            raise LookupError(f"no dispatch {dispatch_id}")
        return Dispatched(detail)

    async def evidence(self, dispatch_id: str) -> recovery.Evidence:
        """What the evidence provider (guarded, as the reconciler holds it) answers for the
        dispatch as it is now; a provider's raise (`unavailable`) propagates."""
        provider = self._process.providers.get(self.action_type)
        if provider is None:
            raise LookupError(f"{self.action_type} declares contract.MANUAL_ONLY")
        execution = await self.store.get_execution(dispatch_id)
        dispatch = await self.store.get_dispatch(dispatch_id)
        if execution is None or dispatch is None:
            raise LookupError(f"no dispatch {dispatch_id}")
        snapshot = recovery.Snapshot(execution=execution, dispatch=dispatch, observation=None)
        return await provider.evidence(snapshot)

    async def aclose(self) -> None:
        """Release what the process holds (the store is the caller's)."""
        await self._process.aclose()


@contextlib.asynccontextmanager
async def open_kit(
    action: contract.ActionSpec | str,
    directory: Path | None = None,
    *,
    max_attempts: int = 5,
    lease_seconds: float = 30.0,
) -> AsyncIterator[ActionKit]:
    """An `ActionKit` for `action`: its `ActionSpec`, or the name of its entry point.

    The store is a new SQLite file in `directory` (which must exist; a test's temporary
    folder), or in a temporary folder removed afterwards; it is migrated first.
    """
    installed = from_entry_point(action) if isinstance(action, str) else registry.given([action])
    async with contextlib.AsyncExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        settings = Settings(
            database_url=f"sqlite:///{directory / DATABASE}",
            max_attempts=max_attempts,
            lease_seconds=lease_seconds,
            sqlite_reserve_mib=0,
        )
        clock = ManualClock()
        store = await bootstrap.open_store(settings)
        stack.push_async_callback(store.close)
        await store.migrate(now_ms=clock.now_ms())
        kit = ActionKit(store, installed, settings, clock)
        stack.push_async_callback(kit.aclose)
        yield kit
