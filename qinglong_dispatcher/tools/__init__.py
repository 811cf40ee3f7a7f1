"""The `tool.invoke` feature, outside its pure part in `domain.tools` and its store protocols in
`ports.tool_steps`.

`api` submits a tool step, `invoke` is the action handler, `builtin` holds the reviewed
adapters, `sandbox` derives their paths and `evidence` is the read-only recovery provider.
"""
