"""The operator UI's sessions (their lifecycle in the store: tests/contract/
test_ui_session_store.py): the derived CSRF token, and escaping of every value a page shows."""

from __future__ import annotations

from qinglong_dispatcher.domain import ui_sessions
from qinglong_dispatcher.web.ui import markup


def test_the_csrf_token_and_the_stored_digest_are_neither_the_cookie_nor_each_other() -> None:
    cookie = "k" * 43
    csrf, stored = ui_sessions.csrf_of(cookie), ui_sessions.digest(cookie)
    assert len({cookie, csrf, stored}) == 3
    assert csrf == ui_sessions.csrf_of(cookie)  # every daemon derives the same token
    assert csrf != ui_sessions.csrf_of(cookie + "k")


def test_every_value_is_escaped() -> None:
    evil = "<script>alert('x')</script>\"&"
    shown = markup.facts([(evil, markup.esc(evil))]) + markup.table([evil], [[markup.esc(evil)]])
    shown += markup.json_block({"taskName": evil}) + markup.hidden(evil, evil)
    shown += markup.text_field("reason", evil, value=evil) + markup.select("as", evil, [evil])
    shown += markup.link(markup.url("/ui/audit", subject=evil), evil) + markup.notice(evil)
    assert "<script" not in shown
    assert "'x'" not in shown
    assert markup.url("/ui/audit", subject=evil).count("<") == 0
