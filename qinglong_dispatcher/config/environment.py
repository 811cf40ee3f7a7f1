"""Which `QINGLONG_*` environment variables a process accepts: its settings and a fixed few."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Final

from qinglong_dispatcher.domain import errors

PREFIX: Final = "QINGLONG_"

ACTION_PREFIX: Final = "QINGLONG_ACTION_"
"""Free for installed actions' own variables (and `env:` secrets): never checked."""

NOT_SETTINGS: Final = frozenset(
    {
        # Read by the product, beside the settings.
        "QINGLONG_DATABASE_URL_FILE",  # url_file: the URL from a file
        # Read by the Makefile (`make bench`).
        "QINGLONG_BENCH_PG_URL",
        # Read by the peers' harness (`python -m bench.peers`): where the peers' venv is kept.
        "QINGLONG_BENCH_PEERS_VENV",
        # Read by the test suite (docs/development.md).
        "QINGLONG_TEST_PG_DSN",
        "QINGLONG_STATEFUL_EXAMPLES",
        "QINGLONG_STATEFUL_STEPS",
        "QINGLONG_FAILOVER_DISPATCHES",
        "QINGLONG_FAILOVER_GENERATIONS",
        "QINGLONG_EDGE_LIMITS_DISPATCHES",
        "QINGLONG_EDGE_LIMITS_RATE",
        "QINGLONG_EDGE_LIMITS_SEED",
    }
)
"""Variables with the prefix that are not settings but are read by the product, its Makefile
or its tests; each must stay accepted (tests/unit/test_environment.py lists where)."""


def refuse_unknown(environ: Mapping[str, str], settings: Iterable[str]) -> None:
    """Raise `ConfigurationError` (one line, a close name suggested) for the first `QINGLONG_*`
    variable of `environ` that is neither a setting's (`settings`: their variable names), one
    of `NOT_SETTINGS`, nor under `ACTION_PREFIX`. Names match without case, as settings do."""
    known = {name.upper() for name in settings} | NOT_SETTINGS
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in known or upper.startswith(ACTION_PREFIX):
            continue
        # Compared without the prefix, which every name shares and would make all look close.
        tails = sorted(k.removeprefix(PREFIX) for k in known)
        near = difflib.get_close_matches(upper.removeprefix(PREFIX), tails, n=1)
        hint = f"; did you mean {PREFIX}{near[0]}?" if near else ""
        raise errors.ConfigurationError(
            f"{name}: unknown QINGLONG_ variable{hint} (installed actions use {ACTION_PREFIX}*)"
        )
