"""Approved actions: each a handler with a side-effect-free inspect and a fenced execute.

`run.create` is here; `tool.invoke` lives with the rest of its feature in `tools/`.
"""
