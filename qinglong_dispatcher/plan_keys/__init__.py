"""Plan keys: the key ring file, the cipher that seals plans under it, and the envelopes a store
seals and opens plans with. No driver, no SQL: the stores take `envelopes.Envelopes` ready-made."""

from __future__ import annotations
