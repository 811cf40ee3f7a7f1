"""The operator's inbox rows for notifications given up (docs/notifications.md#delivery): each
dead letter names the event, its subject (linking the subject's page), the subscription by name
and the last answer. Never the subscription's URL (a Slack URL is a token) or its secret."""

from __future__ import annotations

from typing import Final

from qinglong_dispatcher.domain import inbox
from qinglong_dispatcher.web import context

SHOWN: Final = 200
"""Dead letters one inbox reads, newest first; older ones stay until the prune takes them."""


def page(subject_id: str) -> str:
    """The UI page of a subject: an approval request's (`a-…`) or a dispatch's."""
    return ("/ui/approvals/" if subject_id.startswith("a-") else "/ui/dispatches/") + subject_id


async def read(ctx: context.Context) -> tuple[list[inbox.Item], bool]:
    """The newest `SHOWN` dead letters as inbox rows; whether that was all of them."""
    letters = await ctx.store.dead_letters(limit=SHOWN + 1)
    items = [
        inbox.Item(
            kind=inbox.Kind.DEAD_LETTER,
            subject_id=letter.subject_id,
            action_type=letter.action_type,
            project_id=letter.project_id,
            since_ms=letter.dead_at_ms,
            summary=(
                f"{letter.kind} to {letter.subscription} given up after {letter.attempts} "
                f"attempts ({_answer(letter.last_code)}): nobody was told"
            ),
        )
        for letter in letters[:SHOWN]
    ]
    return items, len(letters) <= SHOWN


def _answer(code: int | None) -> str:
    return "no answer" if code is None else f"last answer {code}"
