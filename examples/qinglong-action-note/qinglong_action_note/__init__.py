"""`example.note.write`: write one note file per dispatch — an installed action, as an example.

The effect is `$QINGLONG_ACTION_NOTE_DIR/<dispatch id>.json`, created atomically (written to a
temporary file, fsynced, then linked into place, which fails if the name exists) and holding
the dispatch id, the approved action digest and the text. The file is the effect and its
own receipt at once: it exists whole or not at all, so the evidence provider can say for
certain whether the effect happened.

The package has the shape of every action, built-in or installed: `plan` (the plan model),
`handler` (inspect and execute), `evidence` (the read-only provider) and `ACTION`, which the
entry point names; `notes` is this action's own file handling.
"""

from __future__ import annotations

from qinglong_action_note import evidence, handler, plan
from qinglong_dispatcher.actions import contract

ACTION = contract.ActionSpec(
    action_type=plan.ACTION_TYPE,
    plan_model=plan.NotePlan,
    handler=handler.NoteHandler,
    evidence=evidence.NoteEvidence,
)
"""What the entry point names."""
