"""Approval policies as the `policy` command writes and reads them (docs/security.md).

The database holds every rule of a policy (migrations 0026, 0027 and 0032); these values check what
a caller asks for before it reaches the database, so bad input is one clear line, and carry
what the database wrote back (its version, writer and time).
"""

from __future__ import annotations

import dataclasses
import re

from qinglong_dispatcher.domain import errors, plans, principals

NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
"""A policy's name, as the table's check has it."""
GROUP = re.compile(r"[a-z][a-z0-9_]{0,31}")
TARGET_PREFIX = re.compile(r"[!-~]{1,128}")
"""A target prefix: printable ASCII, no space, as long as a target at most (the table's check);
`_WILDCARDS` are refused besides, so that nobody reads `prod-*` as a pattern: it is a prefix."""
_WILDCARDS = frozenset("*?%")
"""An approver group: spliced into a role's name on PostgreSQL (`<installation>_g_<group>`)."""
MAX_COUNT = 100
"""The most approvals (or denials) a policy may ask for."""
MAX_LIFETIME_MS = 30 * 86_400_000
"""A request lives at most 30 days, under a policy or not."""
_DURATION_BOUNDS = (1_000, MAX_LIFETIME_MS, "1 second", "30 days")


def parse_duration(text: str, what: str) -> int:
    """Milliseconds of `--lifetime` or `--remind-before` (`90s`, `30m`, `4h`, `2d`)."""
    return principals.parse_duration(text, what=what, units="smhd", bounds=_DURATION_BOUNDS)


def check_name(name: str) -> str:
    """`name` if it is a policy's name, else `InvalidInput`."""
    if not NAME.fullmatch(name):
        raise errors.InvalidInput(
            f"policy name {name!r} is not lower-case letters, digits, '.', '_' or '-' "
            "(at most 63, starting with a letter or digit)"
        )
    return name


def check_target_prefix(prefix: str) -> str:
    """`prefix` if it is a target prefix the table accepts, else `InvalidInput`."""
    if not TARGET_PREFIX.fullmatch(prefix) or _WILDCARDS.intersection(prefix):
        raise errors.InvalidInput(
            "target prefix must be 1…128 printable ASCII characters without space or a "
            "wildcard ('*', '?', '%'): it matches the targets that begin with it"
        )
    return prefix


MAX_WAIT_MS = 2_592_000_000
"""The longest window delay and window a policy may carry (30 days, as the tables check)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NewPolicy:
    """The next version of a policy, as asked; `check` refuses what the database would."""

    name: str
    action_type: str
    project_id: str | None = None
    target_prefix: str | None = None
    """None: any target, and a request without one."""
    approvals_required: int = 1
    denials_to_reject: int = 1
    approver_groups: tuple[str, ...] = ()
    reason_required: bool = False
    lifetime_ms: int | None = None
    remind_before_ms: int | None = None
    not_before_delay_ms: int | None = None
    """The execution window opens this long after the dispatch is written (None: at once)."""
    window_ms: int | None = None
    """The window stays open this long after it opens (None: no end)."""
    proceed_on_unknown: bool = False
    """Whether the next dispatch on a target may start once this one's outcome is unknown
    (`recovery_required`); False: the target is held until it is settled."""

    def check(self) -> NewPolicy:
        """`self` when every value is one the database accepts, else `InvalidInput`."""
        check_name(self.name)
        plans.require_identifier("action type", self.action_type)
        if self.project_id is not None:
            plans.require_identifier("project", self.project_id)
        if self.target_prefix is not None:
            check_target_prefix(self.target_prefix)
        for what, count in (
            ("approvals", self.approvals_required),
            ("denials", self.denials_to_reject),
        ):
            if not 1 <= count <= MAX_COUNT:
                raise errors.InvalidInput(f"{what} must be 1…{MAX_COUNT} (got {count})")
        for group in self.approver_groups:
            if not GROUP.fullmatch(group):
                shown = group if plans.is_identifier(group) else "?"
                raise errors.InvalidInput(
                    f"approver group {shown!r} is not a lower-case identifier of at most 32 "
                    "characters starting with a letter"
                )
        if len(set(self.approver_groups)) != len(self.approver_groups):
            raise errors.InvalidInput("an approver group is named twice")
        if (
            self.remind_before_ms is not None
            and self.lifetime_ms is not None
            and self.remind_before_ms >= self.lifetime_ms
        ):
            raise errors.InvalidInput("the reminder must come before the end of the lifetime")
        delay = self.not_before_delay_ms
        if delay is not None and not 0 <= delay <= MAX_WAIT_MS:
            raise errors.InvalidInput("the window's delay must be 0 s…30 days")
        if self.window_ms is not None and not 1000 <= self.window_ms <= MAX_WAIT_MS:
            raise errors.InvalidInput("the window must be 1 s…30 days")
        return self


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """One stored version of a policy."""

    name: str
    version: int
    action_type: str
    project_id: str | None
    target_prefix: str | None
    approvals_required: int
    denials_to_reject: int
    approver_groups: tuple[str, ...]
    reason_required: bool
    lifetime_ms: int | None
    remind_before_ms: int | None
    not_before_delay_ms: int | None
    window_ms: int | None
    proceed_on_unknown: bool
    retired: bool
    written_by: str
    written_at_ms: int

    def as_dict(self) -> dict[str, object]:
        """The JSON shape of `policy … --json`."""
        shown = dataclasses.asdict(self)
        shown["approver_groups"] = list(self.approver_groups)
        return shown
