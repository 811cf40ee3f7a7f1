"""The paged listings' common parts: keyset positions `<milliseconds>:<identifier>`, parsed one
way, and the filters every page checks alike."""

from __future__ import annotations

import re

from qinglong_dispatcher.domain import errors, plans

_POSITION = re.compile(r"([0-9]{1,18}):(.+)", re.DOTALL)


def parse(text: str, *, form: str) -> tuple[int, str]:
    """The (milliseconds, identifier) of a cursor as a listing printed it; anything else is
    `InvalidInput` naming `form` (such as `<created_at_ms>:<dispatch_id>`), never the text."""
    found = _POSITION.fullmatch(text)
    if found is None or not plans.is_identifier(found.group(2)):
        raise errors.InvalidInput(f"after: must be a cursor {form} as listed")
    return int(found.group(1)), found.group(2)


def check_page(
    *, limit: int, max_limit: int, action_type: str | None, project_id: str | None
) -> None:
    """`InvalidInput` naming the field for a page size out of range or a filter that is not an
    identifier (before the store is asked anything)."""
    if not 1 <= limit <= max_limit:
        raise errors.InvalidInput(f"limit: must be between 1 and {max_limit} (got {limit})")
    if action_type is not None:
        plans.require_identifier("action", action_type)
    if project_id is not None:
        plans.require_identifier("project", project_id)
