"""The pure core: states, canonical JSON, digests, plans, records, errors; tool steps in `tools`
(the pure part of the `tool.invoke` action)."""
