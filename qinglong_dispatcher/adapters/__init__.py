"""Dialect adapters. Import a dialect's package only when that dialect is selected."""
