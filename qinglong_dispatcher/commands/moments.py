"""A moment on the command line: an ISO 8601 time with a zone, or a duration from now (ahead
for a freeze's `--until`, back for a list's `--from` and `--to`)."""

from __future__ import annotations

import argparse
from typing import Final

from qinglong_dispatcher.commands import common
from qinglong_dispatcher.domain import errors, principals, waits

_BACK_BOUNDS: Final = (1_000, 3650 * 86_400_000, "1 second", "3650 days")
"""How far back a list's duration may reach."""


def parse_iso(text: str, option: str) -> int | None:
    """Milliseconds of an ISO 8601 time with a zone (`waits.parse_iso`); None when `text` is
    none; a time without its zone is a usage error naming `--option`."""
    try:
        return waits.parse_iso(text, f"--{option}")
    except errors.InvalidInput as exc:
        raise common.UsageError(f"argument {exc}") from exc


def back_from(text: str | None, option: str, now_ms: int) -> int | None:
    """A list's bound: an ISO 8601 time with a zone, or a DURATION (`90m`, `4h`, `7d`) back
    from `now_ms`; None when not given; anything else is one usage line (exit 2)."""
    if text is None:
        return None
    try:
        return now_ms - principals.parse_duration(
            text, what=f"--{option}", units="smhd", bounds=_BACK_BOUNDS
        )
    except errors.InvalidInput as exc:
        duration_refused = str(exc)
    moment = parse_iso(text, option)
    if moment is None:
        if "is not between" in duration_refused:
            raise common.UsageError(f"argument {duration_refused}")
        raise common.UsageError(f"argument --{option}: not an ISO 8601 time nor a duration")
    return moment


def created_range(args: argparse.Namespace, now_ms: int) -> tuple[int | None, int | None]:
    """A list's `--from` and `--to` as Unix ms (None: not given); `--to` not after `--from`
    is one usage line."""
    from_ms = back_from(args.from_, "from", now_ms)
    to_ms = back_from(args.to, "to", now_ms)
    if from_ms is not None and to_ms is not None and from_ms >= to_ms:
        raise common.UsageError("argument --to: must be after --from")
    return from_ms, to_ms


def add_range_arguments(p: argparse.ArgumentParser, rows: str) -> None:
    """A list's `--from T` and `--to T`, bounding its rows' creation time."""
    p.add_argument(
        "--from",
        dest="from_",
        metavar="T",
        help=f"only {rows} created at or after T: ISO 8601 with a zone, or a DURATION back "
        "from now (90m, 4h, 7d)",
    )
    p.add_argument("--to", metavar="T", help=f"only {rows} created before T (as --from)")
