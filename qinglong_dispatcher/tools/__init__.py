"""The `tool.invoke` feature (ADR-0158), outside its pure part in `domain.tools`.

`api` submits a tool step, `ports` are its store protocols, `invoke` is the action handler,
`builtin` holds the reviewed adapters, `sandbox` derives their paths and `evidence` is the
read-only recovery provider. Where a bare name would be ambiguous (`ports` and `api` are
top-level modules too) importers keep the feature in the name: `tool_api`, `tool_ports`,
`tool_invoke`, `tool_invoke_evidence`, and `tool_registry`, `tool_start`, … for `domain.tools`.
"""
