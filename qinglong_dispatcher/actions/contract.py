"""The public contract of an installed action: what a `qinglong_dispatcher.actions` entry point
names (an `ActionSpec`) and what the dispatcher hands its factories (an `ActionContext`).

An action package declares, in its `pyproject.toml`::

    [project.entry-points."qinglong_dispatcher.actions"]
    "example.note.write" = "qinglong_action_note:ACTION"

where `ACTION` is an `ActionSpec`. Loading the entry point must only import: factories are
called once per process at startup, and the objects they return do their I/O only inside
`inspect`, `execute` and `evidence`. What each of those must guarantee is in
`docs/actions.md`.

The built-in actions (`actions/run_create/`, `actions/tool_invoke/`) have the same shape: a
package whose `ACTION` names the plan model, the handler and the evidence factories. Theirs
is a `BuiltInSpec`, whose factories get a `BuiltInContext`: the whole store (a built-in that
keeps its own tables builds its own repository over it, and may commit its effect with the
completion) and its settings (a built-in that needs its own declares their model in its
package: `actions.settings`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, TypeVar

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.settings import ActionSettings
from qinglong_dispatcher.domain import errors, plans, records, recovery

P = TypeVar("P", bound=plans.AnyPlan)
S = TypeVar("S", bound=ActionSettings)

ENTRY_POINT_GROUP: Final = "qinglong_dispatcher.actions"
"""The entry-point group the dispatcher loads actions from."""


class ManualOnly(enum.Enum):
    """The declaration that an action has no evidence provider (see `MANUAL_ONLY`)."""

    MANUAL_ONLY = "manual_only"


MANUAL_ONLY: Final = ManualOnly.MANUAL_ONLY
"""`ActionSpec.evidence` for an action whose effect cannot be verified: a crash after the
barrier stays `recovery_required` until an operator settles it (`recovery resolve`)."""


PLAN_CACHE_SIZE: Final = 256
"""Resolved plans a reader keeps (a few pages' worth): inspect and execute of one dispatch,
and the items of a prefetched page, then read no plan again."""

_Key = tuple[str, str, str]
"""(project id, action ref, approved action digest): what a resolution depends on."""


def _key(dispatch: records.Dispatch) -> _Key:
    return (dispatch.project_id, dispatch.action_ref, dispatch.action_digest)


class PlanReader:
    """Reads a dispatch's immutable plan and checks it against what the approval bound.

    Plans are immutable rows (the database refuses UPDATE and DELETE until retention removes a
    finished dispatch's tree), so a plan resolved once against a dispatch's approved digest
    resolves the same forever: the reader keeps the last `PLAN_CACHE_SIZE`, and `prefetch`
    reads a page's plans in one query.
    """

    def __init__(self, plan_store: ports.PlanStore, models: plans.PlanModels) -> None:
        self._plans = plan_store
        self._models = models
        self._resolved: collections.OrderedDict[_Key, tuple[plans.AnyPlan, str]] = (
            collections.OrderedDict()
        )

    async def prefetch(self, dispatches: Sequence[records.Dispatch]) -> None:
        """Read and resolve the plans of `dispatches` not resolved yet, in one query. A plan
        that does not resolve is left out: its `resolve` reads it again and says why."""
        wanted = {_key(d): d for d in dispatches if _key(d) not in self._resolved}
        if not wanted:
            return
        by_plan = {(k[0], k[1]): d for k, d in wanted.items()}
        for stored in await self._plans.get_plans(list(by_plan)):
            dispatch = by_plan.get((stored.project_id, stored.action_ref))
            if dispatch is None:
                continue
            with contextlib.suppress(errors.InvalidInput):
                self._remember(dispatch, self._checked(stored, dispatch))

    async def resolve(self, dispatch: records.Dispatch, model: type[P]) -> tuple[P, str]:
        """The plan (a `model`) and its action digest as stored now (for `inspect`, which
        returns the digest; the dispatcher compares it with the approved one).

        Raises `errors.PlanInvalid` (a low-sensitivity `code`) for a missing, invalid or
        foreign plan; a store failure raises `errors.StoreError`.
        """
        resolved = self._resolved.get(_key(dispatch))
        if resolved is None:
            stored = await self._plans.get_plan(dispatch.project_id, dispatch.action_ref)
            if stored is None:
                raise errors.PlanInvalid("no plan for this action", code="plan_missing")
            resolved = self._remember(dispatch, self._checked(stored, dispatch))
        plan, digest = resolved
        if not isinstance(plan, model):
            raise errors.PlanInvalid("plan is of another model", code="plan_type_mismatch")
        return plan, digest

    def checked(
        self, stored: ports.StoredPlan, dispatch: records.Dispatch, model: type[P]
    ) -> tuple[P, str]:
        """The plan (a `model`) and its action digest from `stored`, a plan the caller read
        itself (a passage, in its own transaction): checked as `resolve` checks, no read."""
        plan, digest = self._remember(dispatch, self._checked(stored, dispatch))
        if not isinstance(plan, model):
            raise errors.PlanInvalid("plan is of another model", code="plan_type_mismatch")
        return plan, digest

    def kept(self, dispatch: records.Dispatch, model: type[P]) -> tuple[P, str] | None:
        """The plan and digest `resolve` gave for this dispatch, if the reader still keeps it
        (no read: for a step that must not touch the store)."""
        resolved = self._resolved.get(_key(dispatch))
        if resolved is None or not isinstance(resolved[0], model):
            return None
        return resolved[0], resolved[1]

    def _remember(
        self, dispatch: records.Dispatch, resolved: tuple[plans.AnyPlan, str]
    ) -> tuple[plans.AnyPlan, str]:
        self._resolved[_key(dispatch)] = resolved
        if len(self._resolved) > PLAN_CACHE_SIZE:
            self._resolved.popitem(last=False)
        return resolved

    def _checked(
        self, stored: ports.StoredPlan, dispatch: records.Dispatch
    ) -> tuple[plans.AnyPlan, str]:
        """The stored plan parsed against the dispatch's approved digest, its identity checked."""
        if stored.action_type != dispatch.action_type:
            raise errors.PlanInvalid("plan is of another action type", code="plan_type_mismatch")
        plan, digest = plans.resolve_plan(
            stored.action_type,
            stored.plan_bytes(),
            approved_digest=dispatch.action_digest,
            plan_digests=self._plans.plan_digests,
            models=self._models,
        )
        if plan.project_id != dispatch.project_id or plan.action_ref != dispatch.action_ref:
            raise errors.PlanInvalid("plan identity differs", code="plan_identity_mismatch")
        # The database copied the target the requester wrote beside the plan; a plan whose own
        # target differs never starts (it would escape its target's one-at-a-time rule).
        if plans.plan_target(plan) != dispatch.target:
            raise errors.PlanInvalid("plan target differs", code="plan_target_mismatch")
        return plan, digest

    async def approved(self, dispatch: records.Dispatch, model: type[P]) -> P:
        """The plan, only if it is exactly the approved one (for `execute` and `evidence`).

        Raises `errors.PlanInvalid` with code `digest_drift` otherwise.
        """
        plan, digest = await self.resolve(dispatch, model)
        if digest != dispatch.action_digest:
            raise errors.PlanInvalid("plan differs from the approved one", code="digest_drift")
        return plan


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ActionContext:
    """What an action's factories get: its plans and the dispatcher's clock."""

    plans: PlanReader
    clock: ports.Clock


HandlerFactory = Callable[[ActionContext], ports.ApprovedActionHandler]
"""Builds the action's handler once per process; no I/O."""

EvidenceFactory = Callable[[ActionContext], ports.EvidenceProvider]
"""Builds the action's read-only evidence provider once per process; no I/O."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ActionSpec:
    """One installed action, as its entry point declares it."""

    action_type: str
    """The type approvals name (`--action`); an identifier, not a built-in type."""
    plan_model: type[plans.PlanModel]
    """Its exact-shape plan (a `plans.PlanModel` whose `ACTION_TYPE` is `action_type`)."""
    handler: HandlerFactory
    """`inspect` (side-effect free) and `execute` (the effect, after the barrier)."""
    evidence: EvidenceFactory | ManualOnly | None = None
    """An evidence provider factory, or `MANUAL_ONLY`; leaving it unset is refused at
    startup, so that no action is manual-only by omission."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuiltInContext:
    """What a built-in action's factories get: the store, the clock and the settings they read."""

    store: ports.Store
    """Its plans, and what its own repository runs its transactions on (`StoreHost`)."""
    clock: ports.Clock
    profile: str
    tool_sandbox_dir: Path | None = None
    """`QINGLONG_TOOL_SANDBOX_DIR`: where `builtin.file.write` writes; None leaves
    `tool.invoke` without a handler."""
    execute_timeout_s: float = 15.0
    """`QINGLONG_EXECUTE_TIMEOUT_SECONDS`: an action's own timeouts must stay below it."""
    settings: Mapping[type[ActionSettings], ActionSettings] = dataclasses.field(
        default_factory=dict
    )
    """The actions' own settings (`BuiltInSpec.settings`), by model."""

    def settings_of(self, model: type[S]) -> S:
        """The action's own settings: as given, else its model's defaults (not configured)."""
        given = self.settings.get(model)
        return given if isinstance(given, model) else model()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuiltInSpec:
    """One built-in action: an `ActionSpec` whose factories get a `BuiltInContext`."""

    action_type: str
    plan_model: type[plans.BuiltInPlan] | type[plans.PlanModel]
    """The package's own `plan` module's model (passed to parsing like an installed one);
    `run.create`'s and `tool.invoke`'s are `BuiltInPlan`s, parsed as they always were."""
    handler: Callable[[BuiltInContext], ports.ApprovedActionHandler | None]
    """None: not configured in this process; its dispatches find no handler and wait, their
    attempts refunded."""
    evidence: Callable[[BuiltInContext], ports.EvidenceProvider] | ManualOnly
    settings: type[ActionSettings] | None = None
    """Its own settings, in its package (`actions.settings`); None: it has none."""


class Unconfigured:
    """The evidence provider of a built-in action this process has no configuration for: it
    cannot look, so every answer is `unavailable` (never `missing`, which would invite an
    operator to fail work that may have happened)."""

    def __init__(self, action_type: str, code: str) -> None:
        self.action_type = action_type
        self._code = code

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """Raise: the action is not configured here."""
        raise errors.ConfigurationError(f"{self.action_type} is not configured", code=self._code)


C = TypeVar("C")


def configured_spec(
    *,
    plan_model: type[plans.PlanModel],
    load: Callable[[BuiltInContext], C | None],
    handler: Callable[[C, PlanReader, ports.Clock], ports.ApprovedActionHandler],
    evidence: Callable[[C, PlanReader, ports.Clock], ports.EvidenceProvider],
    unconfigured: str,
    settings: type[ActionSettings] | None = None,
) -> BuiltInSpec:
    """A built-in action served only where its configuration is given (`load` answers None
    without it): its handler then, else none (dispatches wait), and its evidence provider
    then, else one that answers `unavailable` with code `unconfigured`. The plan model lives
    in the action's package and is parsed like an installed one; `settings` are the action's
    own (`load` reads them with `ctx.settings_of`)."""
    action_type = plan_model.ACTION_TYPE
    models: plans.PlanModels = {action_type: plan_model}

    def make_handler(ctx: BuiltInContext) -> ports.ApprovedActionHandler | None:
        config = load(ctx)
        if config is None:
            return None
        return handler(config, PlanReader(ctx.store, models), ctx.clock)

    def make_evidence(ctx: BuiltInContext) -> ports.EvidenceProvider:
        config = load(ctx)
        if config is None:
            return Unconfigured(action_type, unconfigured)
        return evidence(config, PlanReader(ctx.store, models), ctx.clock)

    return BuiltInSpec(
        action_type=action_type,
        plan_model=plan_model,
        handler=make_handler,
        evidence=make_evidence,
        settings=settings,
    )
