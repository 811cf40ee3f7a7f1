"""Approved actions: each a handler with a side-effect-free inspect and a fenced execute."""
