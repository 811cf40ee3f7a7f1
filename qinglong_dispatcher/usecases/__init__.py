"""The application services: one module per use case, each a small function over the ports.

The CLI (`commands`), the Python API (`api`), the web layer (the JSON API and the operator UI)
and the daemon call these, so a use case is written once; each caller maps the typed errors to
its own answer (a one-line CLI error, a problem+json, an operator page).
"""
