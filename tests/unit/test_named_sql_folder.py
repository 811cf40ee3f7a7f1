"""A dialect's statements are a folder of files by area: one namespace, no name twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong_dispatcher.adapters import named_sql


def test_blocks_of_every_file_splice_across_files(tmp_path: Path) -> None:
    (tmp_path / "a.sql").write_text("-- columns --\nx, y\n", encoding="utf-8")
    (tmp_path / "b.sql").write_text("-- pick --\nSELECT {columns} FROM t;\n", encoding="utf-8")
    assert named_sql.load_folder(tmp_path) == {"columns": "x, y", "pick": "SELECT x, y FROM t"}


def test_a_name_in_two_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.sql").write_text("-- pick --\nSELECT 1\n", encoding="utf-8")
    (tmp_path / "b.sql").write_text("-- pick --\nSELECT 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"'pick' is defined in a\.sql too"):
        named_sql.load_folder(tmp_path)
