"""The evidence of an uncertain outcome on the dispatch page, beside the settle form: what the
daemon knew when it lost track, and what recovery says, in an operator's words."""

from __future__ import annotations

from qinglong_dispatcher.domain import dispatch_views, permissions, states
from qinglong_dispatcher.web.ui import markup, sessions

_NEEDS = states.EffectiveStatus.RECOVERY_REQUIRED


def settle_form(dispatch_id: str, session: sessions.Session) -> str:
    """The form that settles a `recovery_required` dispatch by hand (empty for a viewer)."""
    if not permissions.admits(session.principal, permissions.Operation.RESOLVE):
        return ""
    return markup.post_form(
        "/ui/recovery/" + markup.segment(dispatch_id) + "/resolve",
        session,
        # No outcome is chosen for the operator: a default would settle by a slip.
        markup.select("as", "As", [c.value for c in states.Completion], prompt="choose…")
        + markup.text_field("reason", "Reason code", pattern=markup.CODE_PATTERN)
        + markup.comment_field(),
        "Settle…",
        danger=True,
    )


def section(detail: dispatch_views.Detail, session: sessions.Session) -> str:
    """The evidence, then (while the row needs a person) the settle form; empty when there is
    nothing uncertain about this dispatch."""
    said = detail.verdicts()
    lost = detail.uncertain
    if not said and lost is None:
        return ""
    parts = ['<section class="evidence" aria-labelledby="evidence-h">']
    parts.append('<h2 id="evidence-h">Evidence</h2>')
    if said:
        parts.append(
            '<ul class="verdicts">'
            + "".join(f"<li>{markup.esc(line)}</li>" for line in said)
            + "</ul>"
        )
    if lost is not None:
        parts.append(
            "<h3>What the daemon knew when it lost track</h3>"
            + markup.facts(
                (
                    ("result", markup.esc(lost.result_code)),
                    ("attempt", markup.esc(f"{lost.attempt} on {lost.lease_owner}")),
                    ("recorded", markup.when(lost.recorded_at_ms)),
                    *(
                        (
                            label,
                            f"<pre>{markup.esc(value)}</pre>"
                            if "\n" in value
                            else markup.esc(value),
                        )
                        for label, value in lost.lines()
                    ),
                )
            )
        )
    if detail.execution.effective_status is _NEEDS:
        parts.append("<h3>Settle</h3>" + settle_form(detail.dispatch.dispatch_id, session))
    parts.append("</section>")
    return "".join(parts)


def _value(text: str) -> str:
    # A stderr head keeps its lines.
    return f"<pre>{markup.esc(text)}</pre>" if "\n" in text else markup.esc(text)
