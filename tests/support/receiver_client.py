"""The test side of `http_receiver`: start it as a real process, send to it, read its record.

`Receiver` starts `tests/support/http_receiver.py` with `sys.executable`, waits until it
answers, and reads what it executed from its SQLite file directly, so a count survives the
receiver's SIGKILL. The calls are synchronous (stdlib `http.client`): an async test can call
them between awaits, as they return in milliseconds.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import hmac
import http.client
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib import parse

SERVER = Path(__file__).with_name("http_receiver.py")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
POLL_S = 0.01


class ReceiverStartError(RuntimeError):
    """The receiver did not answer in time, or exited while starting (its log says why)."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """One complete HTTP answer; header names are lower-case."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)

    @property
    def replayed(self) -> bool:
        """Marked `Idempotency-Replayed: true`: a stored answer, nothing executed for it."""
        return self.headers.get("idempotency-replayed") == "true"

    @property
    def problem(self) -> str | None:
        """The last segment of a problem+json `type` (`idempotency-key-missing`, …), else None."""
        if not self.headers.get("content-type", "").startswith("application/problem+json"):
            return None
        return str(self.json()["type"]).rsplit("/", 1)[1]


def sf_string(key: str) -> str:
    """`key` as an RFC 8941 sf-string, the form an `Idempotency-Key` field carries."""
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and a base64 key."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def webhook_headers(
    secret: str, body: bytes, *, msg_id: str, timestamp: int | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers signing `body` with `secret` (now by default)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    signature = "v1," + base64.b64encode(mac).decode()
    return {"webhook-id": msg_id, "webhook-timestamp": stamp, "webhook-signature": signature}


def send(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    *,
    timeout: float = 5.0,
) -> Answer:
    """One request on its own connection, read whole; the connection is closed either way.

    A cut answer raises what `http.client` raises (`RemoteDisconnected`, `IncompleteRead`), a
    slow one `TimeoutError`.
    """
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=dict(headers or {}))
        with contextlib.closing(connection.getresponse()) as response:
            data = response.read()
            found = {name.lower(): value for name, value in response.getheaders()}
            return Answer(response.status, found, data)
    finally:
        connection.close()


class Receiver:
    """A running `http_receiver` process over one state file; a context manager.

    The options are its flags: `key_retention_s`, `bearer_file`, `webhook_secret_file`, and a
    fault armed at start (`fault`, `fault_count`, `fault_seconds`, `fault_status`). A restart
    keeps them, so a fault given here is armed again; set one with `set_fault` instead when it
    must fire once across restarts.
    """

    def __init__(
        self,
        state: Path,
        *,
        key_retention_s: float | None = None,
        bearer_file: Path | None = None,
        webhook_secret_file: Path | None = None,
        fault: str | None = None,
        fault_count: int = 1,
        fault_seconds: float = 0.0,
        fault_status: int | None = None,
    ) -> None:
        self.state = state
        self.log_path = state.with_name(state.name + ".log")
        self.port = 0
        self._port_file = state.with_name(state.name + ".port")
        self._process: subprocess.Popen[bytes] | None = None
        self._flags: list[str] = ["--state", str(state), "--port-file", str(self._port_file)]
        if key_retention_s is not None:
            self._flags += ["--key-retention-seconds", str(key_retention_s)]
        if bearer_file is not None:
            self._flags += ["--bearer-file", str(bearer_file)]
        if webhook_secret_file is not None:
            self._flags += ["--webhook-secret-file", str(webhook_secret_file)]
        if fault is not None:
            self._flags += ["--fault", fault, "--fault-count", str(fault_count)]
            self._flags += ["--fault-seconds", str(fault_seconds)]
            if fault_status is not None:
                self._flags += ["--fault-status", str(fault_status)]

    @property
    def url(self) -> str:
        """The base URL, `http://127.0.0.1:PORT`."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The running process's id."""
        assert self._process is not None, "the receiver is not running"
        return self._process.pid

    @property
    def log(self) -> str:
        """What the process wrote to stdout and stderr (its port, any traceback)."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def start(self, port: int = 0) -> Receiver:
        """Start the process on `port` (0: any free one) and wait until it answers."""
        assert self._process is None or self._process.poll() is not None, "already running"
        self._port_file.unlink(missing_ok=True)
        # A file, not a pipe: nobody drains a pipe, and a full one would block the receiver.
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    str(SERVER),
                    "--port",
                    str(port),
                    "--parent-pid",
                    str(os.getpid()),
                    *self._flags,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ReceiverStartError(f"the receiver exited while starting:\n{self.log}")
            # No port file yet, or not a whole number yet, or not answering yet: poll again.
            with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
                self.port = int(self._port_file.read_text(encoding="ascii"))
                if self.get("/_control/health").status == 200:
                    return self
            time.sleep(POLL_S)
        self.kill()
        raise ReceiverStartError(f"no answer in {START_TIMEOUT_S} s:\n{self.log}")

    def stop(self) -> int | None:
        """SIGTERM and wait; the exit code (None when it was not running)."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        return self._process.returncode

    def kill(self) -> None:
        """SIGKILL and reap: no clean shutdown, whatever SQLite committed stays."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def restart(self) -> Receiver:
        """Stop (unless already stopped or killed) and start again over the same state file,
        on the same port where it is still free, else on a new one (see `url`)."""
        self.stop()
        try:
            return self.start(self.port)
        except ReceiverStartError:
            return self.start(0)

    def __enter__(self) -> Receiver:
        if self._process is None or self._process.poll() is not None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        *,
        key: str | None = None,
        timeout: float = 5.0,
    ) -> Answer:
        """`send` to this receiver; `key` adds `Idempotency-Key` as an sf-string."""
        sent = dict(headers or {})
        if key is not None:
            sent["Idempotency-Key"] = sf_string(key)
        return send(self.port, method, path, body, sent, timeout=timeout)

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> Answer:
        """`GET path`."""
        return self.request("GET", path, headers=headers)

    def lookup(self, key: str, headers: Mapping[str, str] | None = None) -> Answer:
        """`GET /idempotency/{key}`."""
        return self.get("/idempotency/" + parse.quote(key, safe=""), headers)

    def wait_until_in_flight(self, key: str, timeout: float = 5.0) -> None:
        """Poll the lookup until `key` is in flight (a `hold_in_flight` request got that far)."""
        deadline = time.monotonic() + timeout
        while (found := self.lookup(key)).status != 200 or found.json()["status"] != "in_flight":
            assert time.monotonic() < deadline, f"{key} never went in flight"
            time.sleep(POLL_S)

    def set_fault(
        self, mode: str, count: int = 1, seconds: float = 0.0, status: int | None = None
    ) -> None:
        """Arm a fault for the next `count` valid effect requests (`mode="none"` clears)."""
        fault = {"mode": mode, "count": count, "seconds": seconds, "status": status}
        answer = self.request("POST", "/_control/faults", json.dumps(fault).encode())
        assert answer.status == 200, answer.body

    def executed(self, key: str) -> int:
        """How many effect rows the state file holds for `key` (read directly, so it works
        whether or not the process is alive)."""
        with contextlib.closing(sqlite3.connect(self.state, timeout=5.0)) as conn:
            try:
                row = conn.execute("SELECT count(*) FROM effects WHERE key = ?", (key,)).fetchone()
            except sqlite3.OperationalError:  # no table yet: nothing executed
                return 0
            return int(row[0])

    def effects(self) -> list[dict[str, Any]]:
        """Every effect row in the state file, oldest first."""
        with contextlib.closing(sqlite3.connect(self.state, timeout=5.0)) as conn:
            conn.row_factory = sqlite3.Row
            try:
                rows = conn.execute("SELECT * FROM effects ORDER BY effect_id").fetchall()
            except sqlite3.OperationalError:  # not created yet: nothing executed
                return []
            return [dict(row) for row in rows]


@contextlib.contextmanager
def receivers(directory: Path) -> Iterator[Callable[..., Receiver]]:
    """A factory of started receivers in `directory` (`make(name="r", **options)`); all are
    stopped on the way out. For fixtures: `with receivers(tmp_path) as make: yield make`."""
    started: list[Receiver] = []

    def make(name: str = "receiver", **options: Any) -> Receiver:
        receiver = Receiver(directory / f"{name}.sqlite3", **options)
        started.append(receiver)
        return receiver.start()

    try:
        yield make
    finally:
        for receiver in started:
            receiver.stop()


def deduping_receivers_file(
    directory: Path,
    receiver: Receiver,
    *,
    connect_s: float,
    read_s: float,
    names: Sequence[str] = ("orders",),
) -> Path:
    """`directory/receivers.toml`: one receiver per name (`orders`) at `receiver`, POST under
    `/effects/`, which dedupes and answers a `get` lookup of a key (`read_s` is also the total
    timeout). Each name is a target of its own (docs/actions.md#declaring-a-target)."""
    config = directory / "receivers.toml"
    config.write_text(
        "".join(
            f"""
[receivers.{name}]
base_url = "{receiver.url}"
methods = ["POST"]
path_prefixes = ["/effects/"]
connect_timeout_seconds = {connect_s}
read_timeout_seconds = {read_s}
total_timeout_seconds = {read_s}

[receivers.{name}.idempotency]
dedupes = true
key_retention_seconds = 3600
lookup = "get"
lookup_path = "/idempotency/{{key}}"
"""
            for name in names
        ),
        encoding="utf-8",
    )
    return config
