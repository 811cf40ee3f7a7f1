"""The operator UI's sessions: random ids, the idle and absolute deadlines, the bound on how
many are kept, and escaping of every value a page shows."""

from __future__ import annotations

from qinglong_dispatcher.domain import principals
from qinglong_dispatcher.web.ui import markup, sessions

WHO = principals.Authenticated(
    token_id="tok_0123456789abcdef", principal="vera", role=principals.TokenRole.VIEWER
)


def test_a_session_ends_idle_or_at_its_lifetime_and_the_oldest_go_first() -> None:
    now = [0.0]
    kept = sessions.Sessions(idle_s=10, lifetime_s=25, max_sessions=2, clock=lambda: now[0])
    one = kept.open("qlt_secret", WHO)
    assert len(one.session_id) >= 43
    assert one.csrf != one.session_id
    assert kept.find(one.session_id) is one
    now[0] = 9.9
    assert kept.find(one.session_id) is one  # used: the idle deadline moves on
    now[0] = 19.8
    assert kept.find(one.session_id) is one
    now[0] = 25.0
    assert kept.find(one.session_id) is None  # the absolute lifetime, however busy
    two, three = kept.open("a", WHO), kept.open("b", WHO)
    now[0] = 35.0
    assert kept.find(two.session_id) is None  # idle for 10 s
    four = kept.open("c", WHO)
    five = kept.open("d", WHO)
    assert len(kept) == 2
    assert kept.find(four.session_id) is four
    assert kept.find(five.session_id) is five
    assert kept.find(three.session_id) is None
    assert kept.find(None) is None
    assert kept.find("") is None
    kept.close(four.session_id)
    assert kept.find(four.session_id) is None


def test_one_principal_cannot_push_the_others_out() -> None:
    kept = sessions.Sessions(max_sessions=100)
    other = principals.Authenticated(
        token_id="tok_fedcba9876543210", principal="otto", role=principals.TokenRole.OPERATOR
    )
    theirs = kept.open("o", other)
    mine = [kept.open(str(n), WHO) for n in range(40)]
    assert len(kept) == sessions.MAX_PER_PRINCIPAL + 1
    assert kept.find(theirs.session_id) is theirs
    assert kept.find(mine[0].session_id) is None
    assert kept.find(mine[-1].session_id) is mine[-1]


def test_every_value_is_escaped() -> None:
    evil = "<script>alert('x')</script>\"&"
    shown = markup.facts([(evil, markup.esc(evil))]) + markup.table([evil], [[markup.esc(evil)]])
    shown += markup.json_block({"taskName": evil}) + markup.hidden(evil, evil)
    shown += markup.text_field("reason", evil, value=evil) + markup.select("as", evil, [evil])
    shown += markup.link(markup.url("/ui/audit", subject=evil), evil) + markup.notice(evil)
    assert "<script" not in shown
    assert "'x'" not in shown
    assert markup.url("/ui/audit", subject=evil).count("<") == 0
