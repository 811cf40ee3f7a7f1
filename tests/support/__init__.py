"""Helpers for the test suites (not part of the product)."""
