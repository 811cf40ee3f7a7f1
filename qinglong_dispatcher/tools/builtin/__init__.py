"""Reviewed built-in tool adapters (the registry in `domain.tools.registry` names them)."""
