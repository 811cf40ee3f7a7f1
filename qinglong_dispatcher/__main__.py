"""`python -m qinglong_dispatcher` is the console script."""

from __future__ import annotations

from qinglong_dispatcher import console

raise SystemExit(console.main())
