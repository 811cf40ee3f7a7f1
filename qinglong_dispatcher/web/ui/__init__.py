"""The operator UI: server-rendered HTML pages under `/ui` on the API's listener."""
