"""Approved actions, one package each, in the shape an installed action has.

A package's `ACTION` names its plan model, its handler (`handler.py`: a side-effect-free
`inspect` and an `execute` that runs only after the start barrier) and its evidence provider
(`evidence.py`, read-only) or `MANUAL_ONLY`. `contract` is that shape, `registry` loads the
installed ones from their entry points and `builtin` lists the built-in ones.
"""
