"""The peers' own venv: made once in a cache folder, the peers pinned, reused while the pins hold.

The peers never enter our venv (nor we theirs): their scripts run under that venv's Python.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from qinglong_dispatcher.domain import errors

PINS = {"pgqueuer": "1.6.0", "asyncpg": "0.32.0", "huey": "3.5.4"}
"""Exact releases (current on PyPI when pinned); asyncpg is pgqueuer's driver."""
VENV_VARIABLE = "QINGLONG_BENCH_PEERS_VENV"
DEFAULT_VENV = Path("var") / "peers-venv"
"""Relative to the current folder, like `make run`'s `var/`."""
STAMP = "qinglong-peers.txt"
"""In the venv: the pins it was made with (another list makes it again)."""
INSTALL_TIMEOUT_S = 900


def requirements() -> list[str]:
    """`name==version` for each pin."""
    return [f"{name}=={version}" for name, version in PINS.items()]


def venv_folder(option: Path | None) -> Path:
    """--peers-venv, else QINGLONG_BENCH_PEERS_VENV, else var/peers-venv."""
    if option is not None:
        return option
    named = os.environ.get(VENV_VARIABLE, "")
    return Path(named) if named else DEFAULT_VENV


def _python(folder: Path) -> Path:
    return folder / "bin" / "python"


def _run(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise errors.ConfigurationError(
            f"the peers' venv: {what} failed ({exc.__class__.__name__})",
            code="bench_peers_venv",
        ) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1][:200]
        raise errors.ConfigurationError(
            f"the peers' venv: {what} exited {done.returncode}: {last}", code="bench_peers_venv"
        )


def ensure(folder: Path) -> Path:
    """The venv's Python, the venv made (or made again) when its pins differ from PINS."""
    stamp = folder / STAMP
    wanted = "\n".join(requirements()) + "\n"
    if _python(folder).exists() and stamp.exists() and stamp.read_text("utf-8") == wanted:
        return _python(folder)
    if folder.exists() and any(folder.iterdir()) and not (folder / "pyvenv.cfg").exists():
        # `venv --clear` would empty it: only a venv (or a new or empty folder) is remade.
        raise errors.ConfigurationError(
            f"the peers' venv: {folder} is a folder but not a venv (name a new one)",
            code="bench_peers_venv",
        )
    stamp.unlink(missing_ok=True)
    _run([sys.executable, "-m", "venv", "--clear", str(folder)], "python -m venv")
    pip = [str(_python(folder)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, *requirements()], "pip install " + " ".join(requirements()))
    stamp.write_text(wanted, "utf-8")
    return _python(folder)
