"""The house's size rules, checked on every run: a module past 400 lines splits along a seam."""

from __future__ import annotations

from pathlib import Path

import qinglong_dispatcher

MAX_LINES = 400
PACKAGE = Path(qinglong_dispatcher.__file__).parent


def test_no_module_of_the_package_is_over_400_lines() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert sizes, "no module found"
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
