"""Reviewed built-in tool adapters (the registry in `domain.tool_registry` names them)."""
