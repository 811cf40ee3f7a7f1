"""The documentation holds together: links resolve, the README stays a README, and its quick
starts still run as pasted: the edge one, then the API's on its file, and the cluster one
with two replicas.

The cluster quick start names its database once per block (`db=qinglong`), and its roles and
logins after it: the test gives it a name of this session instead (roles are server-wide,
and the server is shared), and drops the database and every role afterwards. The API quick
start's address (`127.0.0.1:8443`) becomes a free port the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import stores

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
DOCUMENTS = [README, *PAGES]

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w&/])#\d+\b", re.IGNORECASE)
_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans (their brackets are not links)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, with GitHub's -1, -2 … for repeats."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _relative_links(path: Path) -> list[str]:
    targets = _LINK.findall(_prose(path.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_docs_pages_exist() -> None:
    names = {_name(p) for p in PAGES}
    for page in (
        "docs/README.md",
        "docs/installation.md",
        "docs/configuration.md",
        "docs/cli.md",
        "docs/operations.md",
        "docs/troubleshooting.md",
        "docs/actions.md",
        "docs/state-machine.md",
        "docs/security.md",
        "docs/metrics.md",
        "docs/performance.md",
        "docs/development.md",
        "docs/decisions/README.md",
    ):
        assert page in names, page
    decisions = [p for p in PAGES if p.parent.name == "decisions" and p.name != "README.md"]
    assert decisions
    numbers = sorted(int(p.name[:4]) for p in decisions)
    assert numbers == list(range(1, len(numbers) + 1)), "decision numbers are 0001, 0002, …"
    assert all(re.fullmatch(r"\d{4}-[a-z0-9-]+\.md", p.name) for p in decisions)


@pytest.mark.parametrize("document", DOCUMENTS, ids=_name)
def test_every_relative_link_resolves_inside_the_clone(document: Path) -> None:
    """Files and folders exist inside the repository; anchors name a heading of their page."""
    problems = []
    for target in _relative_links(document):
        file_part, _, anchor = target.partition("#")
        resolved = (document.parent / file_part).resolve() if file_part else document
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{target}: outside the clone")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} in {_name(resolved)}")
    assert not problems, "\n".join(problems)


def test_every_page_is_reachable_from_the_index() -> None:
    """docs/README.md (or the decisions index) links every page, so none is an orphan."""
    linked: set[Path] = set()
    for index in (ROOT / "docs" / "README.md", ROOT / "docs" / "decisions" / "README.md"):
        for target in _relative_links(index):
            linked.add((index.parent / target.partition("#")[0]).resolve())
    orphans = [_name(p) for p in PAGES if p.name != "README.md" and p.resolve() not in linked]
    assert not orphans, orphans


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail to docs/"


@pytest.mark.parametrize("document", DOCUMENTS, ids=_name)
def test_no_issue_numbers_or_commit_hashes(document: Path) -> None:
    """A manual, not a diary: no `issue 12`, `#12` or commit hash (a hex run with a digit and a
    letter, as git prints one), in prose or in code."""
    text = document.read_text(encoding="utf-8")
    assert not _ISSUE.findall(text)
    hashes = [h for h in _HEX.findall(text) if re.search(r"\d", h) and re.search(r"[a-f]", h)]
    assert not hashes


SOURCES = sorted(
    path
    for folder in ("qinglong_dispatcher", "tests", "examples", "migrations", "deploy")
    for path in (ROOT / folder).rglob("*")
    if path.suffix in {".py", ".sql", ".toml", ".yaml", ".service"} and path.name != "test_docs.py"
)


def test_code_cites_no_issue_numbers() -> None:
    """Docstrings and comments point at docs/, never at an issue a reader cannot open."""
    cited = [
        f"{path.relative_to(ROOT)}: {match}"
        for path in SOURCES
        for match in re.findall(r"\bissues?\s+#?\d+", path.read_text(encoding="utf-8"), re.I)
    ]
    assert not cited, cited


def _quick_start(title: str) -> list[str]:
    """The shell blocks of the README section "Quick start: <title>", in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split(f"\n## Quick start: {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)


def _quick_start_edge() -> list[str]:
    return _quick_start("edge")


def _bash(block: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A block run as pasted into a new terminal (bash, stopping at the first failure)."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextlib.contextmanager
def _terminal(block: str, cwd: Path, env: dict[str, str], log: Path) -> Iterator[Path]:
    """A block that runs in the foreground of a terminal of its own (a daemon), in the
    background here, its output in `log`; SIGTERM to its process group at the end, and its
    daemon must stop with status 0."""
    with log.open("wb") as out:
        shell = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield log
        assert shell.poll() is None, log.read_text()
        os.killpg(shell.pid, signal.SIGTERM)
        assert shell.wait(timeout=60) == 0, log.read_text()
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    assert "Traceback" not in log.read_text()


def _listening_port(log: Path) -> int | None:
    """The metrics port a daemon logged (`http.listening`), once it has."""
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "http.listening":
                return int(event["port"])
    return None


def _wait(predicate: Callable[[], object], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _descendants(pid: int) -> Iterator[int]:
    with contextlib.suppress(OSError):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for child in map(int, children):
            yield child
            yield from _descendants(child)


def _daemon_of(make: subprocess.Popen[bytes]) -> int | None:
    """The `qinglong-dispatcher … run` process that `make run` started."""
    for pid in _descendants(make.pid):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if any(a.endswith(b"qinglong-dispatcher") for a in argv[:2]) and b"run" in argv:
                return pid
    return None


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@pytest.mark.slow
def test_the_readme_edge_quick_start_runs_as_pasted(tmp_path: Path) -> None:
    """In a folder laid out like the clone (the Makefile and a `.venv` holding the command),
    the first block (`make run`, a foreground daemon) is started and waited for until ready;
    every other block runs with bash as pasted, against it; then SIGTERM stops the daemon and
    `make run` ends with status 0. Then the API quick start runs on the same file.

    The venv is the one running this test, already installed: `make -o .venv/.installed-runtime`
    tells make so instead of letting it reinstall the package into it.
    """
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    blocks = _quick_start_edge()
    assert len(blocks) >= 2
    assert blocks[0].split("#", 1)[0].strip() == "make run"
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QINGLONG_", "MAKE", "MFLAGS"))}
    env["PATH"] = "/usr/bin:/bin"  # nothing of ours: the blocks put the command on PATH
    daemon_env = {**env, "QINGLONG_METRICS_PORT": str(port), "QINGLONG_LOG_LEVEL": "warning"}
    log = (tmp_path / "make-run.log").open("wb")
    make = subprocess.Popen(
        ["make", "-o", ".venv/.installed-runtime", "run"],
        cwd=tmp_path,
        env=daemon_env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _ready(port):
            assert make.poll() is None, (tmp_path / "make-run.log").read_text()
            assert time.monotonic() < deadline, "the daemon did not become ready"
            time.sleep(0.1)
        for block in blocks[1:]:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert "Traceback" not in done.stderr
        assert "succeeded" in done.stdout
        assert "run_created" in done.stdout  # dispatch show: the result code of the Run
        daemon = _daemon_of(make)
        assert daemon is not None
        os.kill(daemon, signal.SIGTERM)
        assert make.wait(timeout=60) == 0, (tmp_path / "make-run.log").read_text()
        _run_the_api_quick_start(tmp_path, env)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        log.close()
    assert "Traceback" not in (tmp_path / "make-run.log").read_text()


TROUBLESHOOTING_LINES = (
    # (what the page quotes, as the package's source writes it)
    (
        "SQLite must run WAL with synchronous=FULL (got",
        "SQLite must run WAL with synchronous=FULL (got",
    ),
    ("an acknowledged start barrier could be lost", "an acknowledged start barrier could "),
    ("this process has no plan key ring", "and this process has no "),
    (
        "is not registered in the database; run `migrate` with this ring",
        "is not registered in the ",
    ),
    (
        "holds none of the 1 plan key(s) registered",
        "holds none of the {len(known)} plan key(s) registered",
    ),
    ("lets other users at it; make it", "lets other users at it; make it"),
    ("QINGLONG_METRICS_PORT: cannot listen on", "QINGLONG_METRICS_PORT: cannot listen on "),
    # SQLite's own words, then the file the adapter names and why.
    (
        "attempt to write a readonly database (SQLITE_READONLY); SQLite file",
        "is not writable ({why})",
    ),
    ('"event": "dispatch.handler_missing"', '"dispatch.handler_missing"'),
    (
        "exceeds QINGLONG_MAX_CLOCK_SKEW_SECONDS",
        'f"QINGLONG_MAX_CLOCK_SKEW_SECONDS ({settings.max_clock_skew_seconds}); "',
    ),
    ("is damaged (", "is damaged ({problem}); restore it from a backup"),
    (
        "does not have: pip install 'qinglong-dispatcher[cluster]'",
        "pip install 'qinglong-dispatcher[cluster]'",
    ),
)


def test_the_troubleshooting_page_quotes_lines_the_code_prints() -> None:
    page = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    source = "\n".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "qinglong_dispatcher").rglob("*.py")
    )
    for quoted, written in TROUBLESHOOTING_LINES:
        assert quoted in page, quoted
        assert written in source, written


def _run_the_api_quick_start(clone: Path, env: dict[str, str]) -> None:
    """The API quick start on the edge file `make run` left: its first block (tokens, then the
    daemon with the API, in the foreground) in a terminal of its own, its second (the two
    requests) in another; the dispatch they made then succeeds."""
    blocks = _quick_start("the API and the operator UI")
    assert len(blocks) == 2
    assert all("127.0.0.1:8443" in block for block in blocks)
    listen = f"127.0.0.1:{_free_port()}"
    daemon_block, requests = (block.replace("127.0.0.1:8443", listen) for block in blocks)
    metrics = _free_port()
    daemon_env = {**env, "QINGLONG_METRICS_PORT": str(metrics)}
    with _terminal(daemon_block, clone, daemon_env, clone / "api-daemon.log") as log:
        _wait(lambda: _ready(metrics), f"the API daemon did not become ready: {log}")
        for token in ("sam", "ann"):
            secret = clone / "var" / f"{token}.token"
            assert secret.read_text().startswith("qlt_")
            assert secret.stat().st_mode & 0o077 == 0  # umask 077: only its owner reads it
        done = _bash(requests, clone, env)
        assert done.returncode == 0, done.stdout + done.stderr
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        dispatch = answer["dispatch_id"]
        show = [str(clone / ".venv" / "bin" / "qinglong-dispatcher"), "dispatch", "show"]
        keys = {**env, "QINGLONG_PLAN_KEYRING_FILE": str(clone / "var" / "plan-keys")}

        def succeeded() -> bool:
            shown = subprocess.run(
                [*show, dispatch, "--json", "--database", "sqlite:///var/qinglong.db"],
                cwd=clone,
                env=keys,
                capture_output=True,
                text=True,
                check=False,
            )
            return shown.returncode == 0 and '"succeeded"' in shown.stdout

        _wait(succeeded, "the API's dispatch did not succeed within the daemon's cadences")


@pytest.mark.slow
@pytest.mark.postgres
def test_the_readme_cluster_quick_start_runs_as_pasted_with_two_replicas(tmp_path: Path) -> None:
    """The administrator's block, then the replica block in two terminals at once (each takes
    a free metrics port: the second is not refused for the first's), then the submit block;
    the submitted dispatch succeeds, and both replicas stop with status 0 on SIGTERM."""
    for tool in ("createdb", "psql"):
        if shutil.which(tool) is None:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{tool} is not installed; under CI=true this test may not skip")
            pytest.skip(f"{tool} is not installed")
    asyncio.run(stores.require_server())
    blocks = _quick_start("cluster")
    assert len(blocks) == 3
    assert all(block.count("db=qinglong\n") == 1 for block in blocks)
    # A name of this session: its roles and the two logins are dropped at the session's end.
    db = stores.session_installation("readme")
    logins = [stores.session_login(f"readme_{kind}") for kind in ("daemon", "planner")]
    assert logins == [f"{db}_daemon", f"{db}_planner"]
    setup, replica, submit = (block.replace("db=qinglong\n", f"db={db}\n") for block in blocks)
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QINGLONG_", "PG"))}
    env["PATH"] = "/usr/bin:/bin"
    env["QINGLONG_LOG_FORMAT"] = "json"  # what a terminal shows as text, for the test to read
    try:
        done = _bash(setup, tmp_path, env)
        assert done.returncode == 0, done.stdout + done.stderr
        with contextlib.ExitStack() as terminals:
            ports = []
            for n in (1, 2):
                log = terminals.enter_context(
                    _terminal(replica, tmp_path, env, tmp_path / f"replica-{n}.log")
                )
                _wait(functools.partial(_listening_port, log), f"replica {n} did not listen")
                port = _listening_port(log)
                assert port is not None
                _wait(functools.partial(_ready, port), f"replica {n} did not become ready")
                ports.append(port)
            assert ports[0] != ports[1]
            done = _bash(submit, tmp_path, env)
            assert done.returncode == 0, done.stdout + done.stderr
            assert '"dispatch_id"' in done.stdout
            lines = submit.strip().split("\n")
            status = "\n".join([*lines[:2], *lines[-2:]])  # `status`, as the runtime login
            assert status.endswith("qinglong-dispatcher status")

            def succeeded() -> bool:
                shown = _bash(status, tmp_path, env).stdout
                return bool(re.search(r"^succeeded +1$", shown, re.MULTILINE))

            _wait(succeeded, "the submitted dispatch did not succeed")
    finally:
        subprocess.run(
            ["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", "--force", db],
            env=env,
            capture_output=True,
            check=False,
        )
        asyncio.run(stores.drop_roles(*logins))
