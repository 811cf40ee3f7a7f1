"""The pure core: states, canonical JSON, digests, plans, records, errors; tool steps in `tools`."""
