"""Reading a file argument with a size cap: never more than the cap and one byte into memory."""

from __future__ import annotations

from pathlib import Path

CONFIG_MAX_BYTES = 1024 * 1024
"""A settings TOML file (`--config`, a profile file): far more than any real one."""

JSONL_MAX_BYTES = 64 * 1024 * 1024
"""A `--from-jsonl` file: each line is held to the plan cap and a submit to 10,000 plans."""

APPROVAL_IDS_MAX_BYTES = 1024 * 1024
"""An `approval approve --from-file` list: one id a line, some 20,000 of them."""

URL_FILE_MAX_BYTES = 8 * 1024
"""A `QINGLONG_DATABASE_URL_FILE`: one URL and a trailing newline."""


class TooLarge(Exception):
    """The file holds more bytes than its cap."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"larger than {max_bytes} bytes")
        self.max_bytes = max_bytes


def read_at_most(path: Path, max_bytes: int) -> bytes:
    """The whole of `path`, or TooLarge once it holds more than `max_bytes`; OSError as is.

    At most `max_bytes + 1` bytes are ever read, so `/dev/zero`, an endless pipe or a
    mistyped multi-gigabyte file costs one cap of memory and is refused at once.
    """
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(max_bytes)
    return data


def read_one_line(path: Path, max_bytes: int) -> str:
    """A file holding one line of UTF-8 text (a secret, such as a database URL with its
    password), without its trailing newline; ValueError names what is wrong, never the text.

    OSError and TooLarge propagate as from `read_at_most`.
    """
    text = read_at_most(path, max_bytes).decode("utf-8")  # UnicodeDecodeError is a ValueError
    line = text.removesuffix("\n").removesuffix("\r")
    if not line.strip():
        raise ValueError("the file is empty")
    if any(c in line for c in "\r\n\x00"):
        raise ValueError("the file must hold one line")
    return line
