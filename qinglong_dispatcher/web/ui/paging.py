"""Paging both ways on the UI's keyset lists, without JavaScript and without a store change.

The stores page forward only (`after`, newest first). A page link carries the trail of the
`after` values that led to it (`trail`, at most `TRAIL_MAX`, the first page an empty one), so
"Previous page" is the last of them and "Next page" appends the current one; the filters and
the page size ride along in every link.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping
from typing import Final

from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.web import problems, reads
from qinglong_dispatcher.web.ui import markup

TRAIL_MAX: Final = 50
PARAMS: Final = ("action", "project", "limit", "after", "trail")
"""The query parameters every paged list takes, beside its own filters."""


def parse_trail(check: Callable[[str], object]) -> Callable[[str], tuple[str, ...]]:
    """A `trail` value: comma-separated cursors (each one `check`ed; empty is the first page)."""

    def parse(text: str) -> tuple[str, ...]:
        steps = tuple(text.split(","))
        if len(steps) > TRAIL_MAX:
            raise errors.InvalidInput(f"trail: at most {TRAIL_MAX} pages back")
        for step in steps:
            if step:
                check(step)
        return steps

    return parse


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Filters:
    """The shared filters of a list page; None is no filter (or the default page size)."""

    action: str | None
    project: str | None
    limit: int | None

    def as_query(self) -> dict[str, object]:
        """The filters as query members."""
        return {"action": self.action, "project": self.project, "limit": self.limit}


def filters(query: Mapping[str, str], max_limit: int) -> Filters:
    """The shared filters of a list page (`action`, `project`, `limit`), each checked as the
    API checks it; an empty field is no filter."""
    return Filters(
        action=reads.query_field("action", query.get("action") or None, reads.identifier("action")),
        project=reads.query_field(
            "project", query.get("project") or None, reads.identifier("project")
        ),
        limit=reads.query_field("limit", query.get("limit") or None, reads.limit_up_to(max_limit)),
    )


def parse_instant(name: str) -> Callable[[str], int]:
    """A UI time filter: `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM` in UTC, as Unix milliseconds."""

    def parse(text: str) -> int:
        try:
            when = datetime.datetime.fromisoformat(text)
        except ValueError:
            raise errors.InvalidInput(f"{name}: YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        return int(when.timestamp() * 1000)

    return parse


def fields(shown: Mapping[str, object]) -> str:
    """The shared filter fields of a list's GET form."""
    return "".join(
        markup.text_field(
            name,
            label,
            value="" if shown.get(name) is None else str(shown[name]),
            pattern=pattern,
            required=False,
        )
        for name, label, pattern in (
            ("action", "Action", markup.CODE_PATTERN),
            ("project", "Project", markup.CODE_PATTERN),
            ("limit", "Page size", "[0-9]{1,3}"),
        )
    )


def links(
    path: str,
    kept: Mapping[str, object],
    *,
    after: str | None,
    trail: tuple[str, ...] | None,
    next_cursor: str | None,
) -> str:
    """Previous and next page links (none on a single page)."""
    shown = {k: None if v is None else str(v) for k, v in kept.items()}
    parts = []
    if after is not None and trail:
        back = trail[-1] or None
        rest = ",".join(trail[:-1]) if len(trail) > 1 else None
        href = markup.url(path, **shown, after=back, trail=rest)
        parts.append(f'<a href="{href}" rel="prev">Previous page</a>')
    elif after is not None:
        # No trail (a link from elsewhere): the way back is the first page.
        parts.append(f'<a href="{markup.url(path, **shown)}" rel="prev">Previous page</a>')
    if next_cursor is not None:
        steps = (*(trail or ()), after or "")[-TRAIL_MAX:]
        href = markup.url(path, **shown, after=next_cursor, trail=",".join(steps))
        parts.append(f'<a href="{href}" rel="next">Next page</a>')
    return f'<p class="pager">{" · ".join(parts)}</p>' if parts else ""


RANGE: Final = ("from", "to")
"""A list's creation-time filters (`YYYY-MM-DD` or `YYYY-MM-DDTHH:MM`, UTC)."""


def time_range(query: Mapping[str, str]) -> tuple[dict[str, object], int | None, int | None]:
    """The `from` and `to` fields as given (for the form and the links) and as Unix ms; a
    `to` not after `from` is a 400 naming `to`."""
    given: dict[str, object] = {name: query.get(name) or None for name in RANGE}
    from_ms = reads.query_field("from", query.get("from") or None, parse_instant("from"))
    to_ms = reads.query_field("to", query.get("to") or None, parse_instant("to"))
    if from_ms is not None and to_ms is not None and from_ms >= to_ms:
        raise problems.BadField("to", "to: must be after from")
    return given, from_ms, to_ms


def range_fields(given: Mapping[str, object]) -> str:
    """The form's `from` and `to` fields."""
    return "".join(
        markup.text_field(
            name, label, value=str(given.get(name) or ""), pattern=None, required=False
        )
        for name, label in (("from", "Created from (UTC)"), ("to", "Created before (UTC)"))
    )
