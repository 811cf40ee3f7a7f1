"""The settings: profile defaults < config file < `QINGLONG_*` environment < CLI flags.

`settings` is the validated model and `load_settings`; the rest are its parts (the defaults,
the config and profile files, the accepted environment, the database URL and the API's
listen address, and how a validation error reads). Only the composition root, the daemon and
the API server read them: the core is handed what it needs.
"""
