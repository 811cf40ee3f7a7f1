"""OIDC sign-in for the operator UI (imported only when `QINGLONG_OIDC_FILE` is set)."""
