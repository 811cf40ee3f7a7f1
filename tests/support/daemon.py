"""Starting the real `run` daemon as a subprocess, and talking to its listener."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from tests.support.cli import SCRIPT

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str]:
    """GET a path of the listener; (status, body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_until(predicate: Callable[[], T], timeout: float = 30, interval: float = 0.05) -> T:
    """Poll `predicate` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    env.pop("NOTIFY_SOCKET", None)
    env.update(extra)
    return env


class Daemon:
    """A running `qinglong-dispatcher run`; its stderr goes to a file (a pipe could fill)."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    def send_signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def poll(self) -> int | None:
        return self.process.poll()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def stderr(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


@contextlib.contextmanager
def running(cwd: Path, env: dict[str, str], *args: str, name: str = "daemon") -> Iterator[Daemon]:
    """`qinglong-dispatcher [args] run`, killed if the test did not stop it."""
    log_path = cwd / f"{name}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [str(SCRIPT), *args, "run"],
            cwd=cwd,
            env=clean_env(env),
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    try:
        yield Daemon(process, log_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def ready(port: int) -> bool:
    try:
        return get(port, "/readyz")[0] == 200
    except OSError:
        return False


def metric_values(text: str) -> dict[str, float]:
    """`name{labels}` → value for every sample line."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values


def log_events(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
