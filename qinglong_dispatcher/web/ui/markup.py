"""HTML building blocks of the operator UI: every value escaped, no template engine.

Each function returns markup that is safe to place in a page: values passed in are escaped
here (`esc`), and markup passed in (`body`, cells, fields) was built by these functions. A
value never reaches a page any other way.
"""

from __future__ import annotations

import datetime
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Final
from urllib import parse

from qinglong_dispatcher.web.ui import sessions

CSS_PATH: Final = "/ui/static/ui.css"
ICON_PATH: Final = "/ui/static/icon.svg"
"""Linked from every page, so that a browser never asks for /favicon.ico (an API path, where
the request would count as a failed authentication of its address)."""
CODE_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}"
"""A reason code, as an HTML `pattern` (the server checks it again: `plans.is_identifier`)."""

NAV: Final = (
    ("inbox", "/ui/inbox", "Inbox"),
    ("overview", "/ui", "Overview"),
    ("dispatches", "/ui/dispatches", "Dispatches"),
    ("approvals", "/ui/approvals", "Approvals"),
    ("policies", "/ui/policies", "Policies"),
    ("subscriptions", "/ui/subscriptions", "Notifications"),
    ("recovery", "/ui/recovery", "Recovery"),
    ("audit", "/ui/audit", "Audit"),
    ("session", "/ui/session", "Session"),
)


def esc(value: object) -> str:
    """`value` as text, HTML-escaped (quotes too: safe inside an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


def url(path: str, **query: str | None) -> str:
    """A path with its query (None values left out), escaped for an attribute."""
    pairs = {k: v for k, v in query.items() if v is not None}
    return esc(path + ("?" + parse.urlencode(pairs) if pairs else ""))


def segment(value: str) -> str:
    """One path segment, percent-encoded."""
    return parse.quote(value, safe="")


def link(href: str, text: object) -> str:
    """`<a>`; `href` comes from `url` (already escaped)."""
    return f'<a href="{href}">{esc(text)}</a>'


def when(ms: int | None) -> str:
    """A Unix millisecond time as UTC text (`-` for none)."""
    if ms is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return esc(moment.strftime("%Y-%m-%d %H:%M:%SZ"))


def ago(ms: int | None, now_ms: int) -> str:
    """A time as UTC text with how long ago (or from now) it is, computed when the page is
    made, so it reads without JavaScript (`3 min ago`, `in 2 h`)."""
    if ms is None:
        return "-"
    seconds = abs(now_ms - ms) // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            span = f"{seconds // size} {unit}"
            break
    else:
        span = f"{seconds} s"
    relative = f"{span} ago" if ms <= now_ms else f"in {span}"
    return f'{when(ms)} <span class="ago">({relative})</span>'


def json_block(value: object) -> str:
    """A JSON value, indented, in a `<pre>`."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    # Focusable: a block that may scroll must be reachable by keyboard to be scrolled.
    return f'<pre class="json" tabindex="0">{esc(text)}</pre>'


def table(head: Sequence[str], rows: Iterable[Sequence[str]], *, empty: str = "None.") -> str:
    """A table: `head` is text (escaped here), each cell markup.

    Each cell carries its column's name (`data-label`): on a narrow screen the style sheet
    shows each row as a card of labelled lines instead of columns that would scroll sideways.
    A column without a heading (a form's) is named for screen readers only."""
    labels = [esc(h or "actions") for h in head]
    body = "".join(
        "<tr>"
        + "".join(
            f'<td data-label="{labels[i] if i < len(labels) else ""}">{c}</td>'
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    if not body:
        return f'<p class="empty">{esc(empty)}</p>'
    heads = "".join(
        f'<th scope="col">{esc(h)}</th>'
        if h
        else '<th scope="col"><span class="sr-only">actions</span></th>'
        for h in head
    )
    return f"<table><thead><tr>{heads}</tr></thead><tbody>{body}</tbody></table>"


def facts(pairs: Iterable[tuple[str, str]]) -> str:
    """A definition list: each term text (escaped here), each value markup."""
    items = "".join(f"<dt>{esc(term)}</dt><dd>{value}</dd>" for term, value in pairs)
    return f"<dl>{items}</dl>"


def hidden(name: str, value: object) -> str:
    """A hidden form field."""
    return f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">'


def text_field(
    name: str,
    label: str,
    *,
    value: str = "",
    pattern: str | None = None,
    required: bool = True,
    maxlength: int | None = None,
) -> str:
    """A labelled one-line text field (required unless told)."""
    shown = "" if pattern is None else f' pattern="{esc(pattern)}"'
    shown += "" if maxlength is None else f' maxlength="{esc(maxlength)}"'
    shown += " required" if required else ""
    return (
        f'<label>{esc(label)} <input type="text" name="{esc(name)}" value="{esc(value)}"'
        f"{shown}></label>"
    )


def comment_field() -> str:
    """The optional comment of an approve, reject or settle, kept in its audit row."""
    return text_field("comment", "Comment (optional)", required=False, maxlength=500)


def select(
    name: str,
    label: str,
    options: Sequence[str],
    *,
    chosen: str | None = None,
    prompt: str | None = None,
) -> str:
    """A labelled select of plain options. With a `prompt`, nothing is chosen until a person
    chooses (the prompt is the disabled first option and the select is required): for a
    choice no default may make by itself."""
    items = "".join(
        f'<option value="{esc(o)}"{" selected" if o == chosen else ""}>{esc(o)}</option>'
        for o in options
    )
    required = ""
    if prompt is not None:
        items = f'<option value="" disabled selected>{esc(prompt)}</option>' + items
        required = " required"
    return f'<label>{esc(label)} <select name="{esc(name)}"{required}>{items}</select></label>'


def post_form(
    action: str, session: sessions.Session, fields: str, button: str, *, danger: bool = False
) -> str:
    """A POST form to `action` (a path, escaped here) carrying the session's CSRF token."""
    kind = ' class="danger"' if danger else ""
    return (
        f'<form method="post" action="{esc(action)}">{hidden("csrf", session.csrf)}{fields}'
        f'<button type="submit"{kind}>{esc(button)}</button></form>'
    )


def notice(text: str, *, kind: str = "info") -> str:
    """A paragraph standing out (kind: info, ok, error)."""
    return f'<p class="notice {esc(kind)}">{esc(text)}</p>'


def _nav(active: str, session: sessions.Session) -> str:
    current = ' aria-current="page"'
    items = "".join(
        f'<li><a href="{esc(href)}"{current if key == active else ""}>{esc(label)}</a></li>'
        for key, href, label in NAV
    )
    who = session.principal
    sign_out = post_form("/ui/signout", session, "", "Sign out")
    return (
        f'<nav><ul>{items}</ul><div class="who">{esc(who.principal)} '
        f'<span class="role">{esc(who.role)}</span>{sign_out}</div></nav>'
    )


def document(
    title: str, body: str, *, session: sessions.Session | None = None, active: str = ""
) -> str:
    """A whole page: the navigation when signed in, then `body`."""
    nav = "" if session is None else _nav(active, session)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · qinglong-dispatcher</title>"
        f'<link rel="stylesheet" href="{esc(CSS_PATH)}">'
        f'<link rel="icon" href="{esc(ICON_PATH)}" type="image/svg+xml"></head>'
        f'<body><header><span class="brand">qinglong-dispatcher</span>{nav}</header>'
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )


def preview(plan: Mapping[str, object] | None, plan_code: str | None) -> str:
    """A plan's redacted preview, or why it cannot be shown."""
    if plan is None:
        return f'<p class="empty">Not shown: {esc(plan_code or "unknown")}</p>'
    return json_block(dict(plan))


def onward(location: str, title: str) -> str:
    """A page that moves on to `location` by itself (a meta refresh, no script), with a link."""
    target = esc(location)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0;url={target}"><title>{esc(title)}</title>'
        f'</head><body><p><a href="{target}">Continue</a></p></body></html>'
    )
