"""A throw-away PostgreSQL server that asks for a password (SCRAM), unlike the suite's
trust-auth server on 5432: where a password must come from somewhere, the libpq passfile."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
from collections.abc import Iterator

from tests.support import pg_ha


@dataclasses.dataclass(frozen=True)
class PasswordServer:
    port: int
    password: str
    """The superuser `postgres`'s password."""

    def url(self, database: str = "postgres") -> str:
        """A URL without the password."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


@contextlib.contextmanager
def password_server() -> Iterator[PasswordServer]:
    """initdb with SCRAM on TCP, start it on a free port; always stopped and removed."""
    bindir = pg_ha.bin_dir()
    base = pg_ha.owned_tempdir()
    cluster = pg_ha.Cluster(base, bindir)
    node = cluster.primary
    password = secrets.token_hex(16)
    pwfile = base / "pw"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:  # the server runs as `postgres` (initdb refuses root)
        shutil.chown(pwfile, "postgres")
    try:
        cluster._run(
            "initdb", "-D", str(node.data), "-U", "postgres", "--pwfile", str(pwfile),
            "--auth-host=scram-sha-256", "--auth-local=trust", "--no-sync", "--locale=C",
        )  # fmt: skip
        pwfile.unlink()
        with (node.data / "postgresql.conf").open("a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1'\nunix_socket_directories = '{base}'\n")
            conf.write("fsync = off\nmax_connections = 20\nshared_buffers = '16MB'\n")
        cluster._start(node)
        yield PasswordServer(port=node.port, password=password)
    finally:
        cluster.kill_all()
        shutil.rmtree(base, ignore_errors=True)
