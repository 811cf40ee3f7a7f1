"""The pure core: states, canonical JSON, digests, plans, records and typed errors."""
