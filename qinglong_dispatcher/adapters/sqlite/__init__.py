"""The edge store: one SQLite file, one connection, `BEGIN IMMEDIATE` short transactions."""
