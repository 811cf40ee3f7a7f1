"""The long-running process: cadence, shutdown, logging (and, later, metrics and systemd)."""
