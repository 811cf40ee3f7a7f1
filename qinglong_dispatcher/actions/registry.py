"""Installed actions: the `qinglong_dispatcher.actions` entry points, loaded and checked once.

Every declaration is checked at startup (a broken import, a type declared twice or clashing
with a built-in, a missing evidence declaration, a plan model that is not exact-shape) and
refused with `errors.ActionRegistrationError`: one line, exit 78 from the CLI. The handlers
and providers built from the declarations are wrapped so that an installed action cannot
claim what only the built-ins may (`committed`), nor write a code that is not low-sensitivity.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Final

import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import builtin, contract
from qinglong_dispatcher.domain import errors, plan_previews, plans, records, recovery

log = structlog.get_logger("qinglong_dispatcher.actions.registry")

BUILT_IN: Final = frozenset(builtin.PLAN_MODELS)
"""Action types the dispatcher itself serves; no entry point may declare one."""

_REQUIRED_CONFIG: Final = {"extra": "forbid", "strict": True, "frozen": True}
_DIGEST = re.compile(r"[0-9a-f]{64}")
INVALID_CODE: Final = "action_code_invalid"
"""Stands in for a result or reason code an installed action wrote that is not an identifier."""


def _refuse(where: str, problem: str, code: str) -> errors.ActionRegistrationError:
    return errors.ActionRegistrationError(f"action entry point {where}: {problem}", code=code)


def _where(entry: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    source = f" of {dist.name}" if dist is not None else ""
    return f"{entry.name!r}{source} ({entry.value})"


def _check_plan_model(where: str, spec: contract.ActionSpec) -> None:
    model = spec.plan_model
    if not (isinstance(model, type) and issubclass(model, plans.PlanModel)):
        raise _refuse(where, "plan_model is not a plans.PlanModel", "action_plan_model_invalid")
    if getattr(model, "ACTION_TYPE", None) != spec.action_type:
        raise _refuse(
            where,
            f"plan_model.ACTION_TYPE is not {spec.action_type}",
            "action_plan_model_invalid",
        )
    for key, value in _REQUIRED_CONFIG.items():
        if model.model_config.get(key) != value:
            raise _refuse(
                where, f"plan_model must keep {key}={value!r}", "action_plan_model_invalid"
            )
    # A misspelt name would leave the member it meant shown in every preview.
    sensitive = getattr(model, "SENSITIVE_FIELDS", None)
    if not (
        isinstance(sensitive, tuple)
        and all(isinstance(name, str) for name in sensitive)
        and set(sensitive) <= plan_previews.member_names(model)
    ):
        raise _refuse(
            where,
            "plan_model.SENSITIVE_FIELDS must be a tuple of its own member names",
            "action_plan_model_invalid",
        )
    # The target is kept in clear and shown everywhere: a member of the plan, never a sensitive one.
    target = getattr(model, "TARGET_MEMBER", None)
    if target is not None and not (
        isinstance(target, str)
        and target in plan_previews.member_names(model)
        and target not in sensitive
        and target not in plans.IDENTITY_MEMBERS - {"projectId"}
    ):
        raise _refuse(
            where,
            "plan_model.TARGET_MEMBER must name one of its own members that is not sensitive",
            "action_plan_model_invalid",
        )


def _check(where: str, spec: object) -> contract.ActionSpec:
    if not isinstance(spec, contract.ActionSpec):
        raise _refuse(where, "does not name a contract.ActionSpec", "action_spec_invalid")
    if not plans.is_identifier(spec.action_type):
        raise _refuse(where, "action_type is not an identifier", "action_spec_invalid")
    if spec.action_type in BUILT_IN:
        raise _refuse(where, f"action type {spec.action_type} is built in", "action_type_reserved")
    _check_plan_model(where, spec)
    if not callable(spec.handler):
        raise _refuse(where, "handler is not a factory", "action_spec_invalid")
    if spec.evidence is None:
        raise _refuse(
            where,
            "declares neither an evidence provider nor contract.MANUAL_ONLY",
            "action_evidence_missing",
        )
    if spec.evidence is not contract.MANUAL_ONLY and not callable(spec.evidence):
        raise _refuse(where, "evidence is not a factory", "action_spec_invalid")
    return spec


@dataclasses.dataclass(frozen=True, slots=True)
class Installed:
    """The installed actions of this process, by action type."""

    specs: Mapping[str, contract.ActionSpec]
    sources: Mapping[str, str]
    """Where each type was declared (entry point, distribution), for messages."""

    @property
    def action_types(self) -> list[str]:
        """The installed action types, sorted."""
        return sorted(self.specs)

    @property
    def plan_models(self) -> plans.PlanModels:
        """Plan model per installed action type (what approvals of these types parse with)."""
        return MappingProxyType({t: s.plan_model for t, s in self.specs.items()})

    def context(self, plan_store: ports.PlanStore, clock: ports.Clock) -> contract.ActionContext:
        """The context every factory of this process gets."""
        return contract.ActionContext(
            plans=contract.PlanReader(plan_store, self.plan_models), clock=clock
        )

    def handlers(self, ctx: contract.ActionContext) -> dict[str, ports.ApprovedActionHandler]:
        """Each action's handler, built once and guarded."""
        built: dict[str, ports.ApprovedActionHandler] = {}
        for action_type, spec in self.specs.items():
            handler = self._build(action_type, "handler", spec.handler, ctx)
            for member in ("inspect", "execute"):
                if not callable(getattr(handler, member, None)):
                    raise _refuse(
                        self.sources[action_type],
                        f"its handler has no {member}",
                        "action_handler_invalid",
                    )
            built[action_type] = GuardedHandler(action_type, handler)  # type: ignore[arg-type]  # checked above: action_type, inspect, execute
        return built

    def evidence_providers(self, ctx: contract.ActionContext) -> dict[str, ports.EvidenceProvider]:
        """Each action's evidence provider; a `MANUAL_ONLY` action has none."""
        built: dict[str, ports.EvidenceProvider] = {}
        for action_type, spec in self.specs.items():
            factory = spec.evidence
            if factory is contract.MANUAL_ONLY or factory is None:
                continue
            provider = self._build(action_type, "evidence", factory, ctx)
            if not callable(getattr(provider, "evidence", None)):
                raise _refuse(
                    self.sources[action_type],
                    "its evidence provider has no evidence",
                    "action_evidence_invalid",
                )
            built[action_type] = GuardedEvidence(action_type, provider)  # type: ignore[arg-type]  # checked above: action_type, evidence
        return built

    def _build(
        self,
        action_type: str,
        what: str,
        factory: Callable[[contract.ActionContext], object],
        ctx: contract.ActionContext,
    ) -> object:
        try:
            made = factory(ctx)
        except Exception as exc:  # an installed factory's own code: one line, no traceback
            raise _refuse(
                self.sources[action_type],
                f"its {what} factory raised {exc.__class__.__name__}",
                f"action_{what}_failed",
            ) from None
        if getattr(made, "action_type", None) != action_type:
            raise _refuse(
                self.sources[action_type],
                f"its {what} does not serve {action_type}",
                f"action_{what}_invalid",
            )
        return made


NONE: Final = Installed(specs=MappingProxyType({}), sources=MappingProxyType({}))
"""No installed action."""


def _checked(declared: Iterable[tuple[str, object]]) -> Installed:
    """Check each (where, declaration) in turn; the first invalid one is refused."""
    specs: dict[str, contract.ActionSpec] = {}
    sources: dict[str, str] = {}
    for where, loaded in declared:
        spec = _check(where, loaded)
        if spec.action_type in specs:
            raise _refuse(
                where,
                f"action type {spec.action_type} is also declared by {sources[spec.action_type]}",
                "action_type_duplicate",
            )
        specs[spec.action_type] = spec
        sources[spec.action_type] = where
    return Installed(specs=MappingProxyType(specs), sources=MappingProxyType(sources))


def _loaded(entries: Iterable[importlib.metadata.EntryPoint]) -> Iterator[tuple[str, object]]:
    for entry in sorted(entries, key=lambda e: (e.name, e.value)):
        where = _where(entry)
        try:
            loaded = entry.load()
        except Exception as exc:  # a broken install: one line, no traceback
            raise _refuse(
                where, f"cannot be loaded ({exc.__class__.__name__})", "action_load_failed"
            ) from None
        yield where, loaded


def load(entries: Iterable[importlib.metadata.EntryPoint]) -> Installed:
    """Import and check every entry point; the first invalid one is refused."""
    return _checked(_loaded(entries))


def given(specs: Iterable[contract.ActionSpec]) -> Installed:
    """Check `specs` exactly as `load` checks what entry points name, with no entry point
    (`qinglong_dispatcher.testing` serves an action under test from its spec)."""
    return _checked((f"{getattr(spec, 'action_type', None)!r} (given)", spec) for spec in specs)


@functools.cache
def _read() -> Installed:
    return load(importlib.metadata.entry_points(group=contract.ENTRY_POINT_GROUP))


@functools.cache
def _announce() -> None:
    log.info("actions.loaded", action_types=_read().action_types)


def installed(*, announce: bool = False) -> Installed:
    """This process's installed actions: the entry points are read and imported once.

    `announce` logs `actions.loaded` (once per process): the dispatcher's startup does, a
    command that only checks an `--action` name does not (its errors stay one line).
    """
    found = _read()
    if announce:
        _announce()
    return found


def _low(code: str | None) -> str | None:
    if code is None or plans.is_identifier(code):
        return code
    return INVALID_CODE


class GuardedHandler:
    """An installed handler as the dispatcher sees it: never `committed`, codes identifiers.

    It is neither prefetching nor transactional: an installed action always takes the
    barrier on its own and executes after it.
    """

    def __init__(self, action_type: str, inner: ports.ApprovedActionHandler) -> None:
        self.action_type = action_type
        self._inner = inner

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        """The action's inspect; an answer of another shape is a transient failure."""
        try:
            result = await self._inner.inspect(dispatch)
        except errors.QinglongError as exc:
            raise errors.QinglongError(code=_low(exc.code)) from None
        if not isinstance(result, ports.InspectResult):
            raise errors.QinglongError("inspect answered no InspectResult", code="inspect_invalid")
        return dataclasses.replace(result, code=_low(result.code))

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        """The action's execute. Only the dispatcher completes an installed action's execution:
        an answer of `committed` (or of another shape) is indeterminate, like a raise."""
        try:
            result = await self._inner.execute(ctx)
        except errors.QinglongError as exc:
            raise errors.QinglongError(code=_low(exc.code)) from None
        if (
            not isinstance(result, ports.ExecuteResult)
            or result.kind is ports.ExecuteKind.COMMITTED
        ):
            raise errors.QinglongError("execute answered no result", code="execute_invalid")
        return dataclasses.replace(result, code=_low(result.code) or INVALID_CODE)


class GuardedEvidence:
    """An installed evidence provider: `verified_succeeded` needs a SHA-256 evidence digest."""

    def __init__(self, action_type: str, inner: ports.EvidenceProvider) -> None:
        self.action_type = action_type
        self._inner = inner

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """The provider's answer; one of another shape counts as `unavailable`."""
        try:
            found = await self._inner.evidence(snapshot)
        except errors.QinglongError as exc:
            raise errors.QinglongError(code=_low(exc.code)) from None
        if not isinstance(found, recovery.Evidence):
            raise errors.QinglongError("evidence answered no Evidence", code="evidence_invalid")
        if found.kind is recovery.EvidenceKind.VERIFIED_SUCCEEDED and not (
            isinstance(found.evidence_digest, str) and _DIGEST.fullmatch(found.evidence_digest)
        ):
            raise errors.QinglongError("verified without a digest", code="evidence_invalid")
        return dataclasses.replace(found, reason=_low(found.reason))
