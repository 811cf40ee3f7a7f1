"""The plan key ring: a private TOML file of AES-256 keys, one active, read and written safely.

The file (written by `generate`, extended by `add_key`; never hand-edited in normal use)::

    # qinglong plan key ring: keep it private (0600); losing it loses every encrypted plan.
    format = "qinglong/plan-keyring@v1"
    active = "k20250314-9f3a1c"
    digest = "<base64 of 32 random bytes>"

    [keys]
    "k20250101-04be77" = "<base64 of 32 random bytes>"
    "k20250314-9f3a1c" = "<base64 of 32 random bytes>"

- `format` is exactly `qinglong/plan-keyring@v1`; no other top-level entry is allowed.
- `[keys]` maps a key id (`[A-Za-z0-9][A-Za-z0-9._-]{0,63}`, always written quoted since a
  bare TOML key may not hold a dot) to standard base64 of exactly 32 bytes. `active` names the
  one key that encrypts; the others only decrypt what they once encrypted.
- `digest` is the secret behind keyed plan digests (`KeyRing.digest_key`). It is not an
  encryption key and is never rotated by `add_key`, so a keyed digest stored under one
  active key still verifies after any number of rotations and after old keys are retired.

Every error is a `ConfigurationError` subclass naming the file and the problem in one line,
never a key byte: ids are shown only when they are identifiers, other names and values never.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import datetime
import errno
import os
import re
import secrets
import stat
import tomllib
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from qinglong_dispatcher.domain import errors

FORMAT: Final = "qinglong/plan-keyring@v1"
"""The value of the ring file's `format` entry."""

KEY_BYTES: Final = 32
"""AES-256: every key and the digest secret are 32 random bytes."""

RING_MAX_BYTES: Final = 64 * 1024
"""A ring file: about 900 keys, far more than any rotation schedule needs."""

FILE_MODE: Final = 0o600
"""The mode `generate` and `add_key` give the file, whatever the umask."""

KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""What a key id looks like: an identifier, safe to log and store beside a ciphertext."""

_ENTRIES: Final = frozenset({"format", "active", "digest", "keys"})
_TOML_POSITION = re.compile(r"\((at line \d+, column \d+|at end of document)\)$")


class PlanKeyRingError(errors.ConfigurationError):
    """The plan key ring cannot be used."""

    code = "plan_keyring_invalid"


class PlanKeyRingUnreadable(PlanKeyRingError):
    """The plan key ring file cannot be read (missing, not a regular file, or too large)."""

    code = "plan_keyring_unreadable"


class PlanKeyRingExposed(PlanKeyRingError):
    """The plan key ring file is readable or writable by users other than its owner."""

    code = "plan_keyring_exposed"


class PlanKeyRingInvalid(PlanKeyRingError):
    """The plan key ring file is not a valid ring (format, ids, keys or the active key)."""

    code = "plan_keyring_invalid"


class PlanKeyRingExists(PlanKeyRingError):
    """The plan key ring file exists already; `add_key` extends a ring, `generate` starts one."""

    code = "plan_keyring_exists"


class PlanKeyRingUnwritable(PlanKeyRingError):
    """The plan key ring file cannot be written; the previous file, if any, is unchanged."""

    code = "plan_keyring_unwritable"


@dataclasses.dataclass(frozen=True, slots=True)
class KeyRing:
    """A loaded ring. Its repr shows ids only; key bytes stay out of logs and tracebacks."""

    active: str
    keys: Mapping[str, bytes] = dataclasses.field(repr=False)
    """Every key by id, in file order, the active one included."""
    digest_secret: bytes = dataclasses.field(repr=False)

    def __post_init__(self) -> None:
        # Callers (and tests) may build a ring directly; it holds the same rules as a file.
        problem = _problem(self.active, self.keys, self.digest_secret)
        if problem is not None:
            raise PlanKeyRingInvalid(f"plan key ring: {problem}")
        object.__setattr__(self, "keys", types.MappingProxyType(dict(self.keys)))

    @property
    def ids(self) -> tuple[str, ...]:
        """Every key id, oldest first (file order)."""
        return tuple(self.keys)

    def digest_key(self) -> bytes:
        """The HMAC-SHA256 key of keyed plan digests: HKDF-SHA256 over the `digest` secret.

        It depends on the `digest` entry alone (info `qinglong/plan-digest@v1`), so it stays
        the same across `add_key` rotations and the retirement of old encryption keys.
        """
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf import hkdf

        return hkdf.HKDF(
            algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=b"qinglong/plan-digest@v1"
        ).derive(self.digest_secret)


def _problem(active: str, keys: Mapping[str, bytes], digest_secret: bytes) -> str | None:
    if not keys:
        return "no keys"
    if not all(KEY_ID.fullmatch(key_id) for key_id in keys):
        return "a key id is not an identifier [A-Za-z0-9][A-Za-z0-9._-]{0,63}"
    if not KEY_ID.fullmatch(active):
        return "active is not a key id"
    if active not in keys:
        return f"the active key {active} is not in [keys]"
    for key_id, key in keys.items():
        if len(key) != KEY_BYTES:
            return f"key {key_id} is not {KEY_BYTES} bytes"
    if len(digest_secret) != KEY_BYTES:
        return f"digest is not {KEY_BYTES} bytes"
    distinct = {bytes(key) for key in keys.values()}
    if len(distinct) != len(keys):
        return "two key ids hold the same key"
    if bytes(digest_secret) in distinct:
        return "digest repeats an encryption key"
    return None


def _decode(value: object) -> bytes | None:
    if not isinstance(value, str) or len(value) != 44:  # 32 bytes in padded base64
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _parse(path: Path, data: bytes) -> KeyRing:
    def fail(problem: str) -> PlanKeyRingInvalid:
        return PlanKeyRingInvalid(f"plan key ring {path}: {problem}")

    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise fail("not valid UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib may quote the input (`Illegal character 'x'`): keep only the position.
        found = _TOML_POSITION.search(str(exc))
        where = f" ({found.group(1)})" if found else ""
        what = "a duplicate entry" if str(exc).startswith("Cannot overwrite") else "not valid TOML"
        raise fail(what + where) from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise fail("not valid TOML (nested too deeply)") from None
    if set(document) - _ENTRIES:
        raise fail(f"an unknown top-level entry (allowed: {', '.join(sorted(_ENTRIES))})")
    if document.get("format") != FORMAT:
        raise fail(f'format must be "{FORMAT}"')
    active = document.get("active")
    if not isinstance(active, str) or not KEY_ID.fullmatch(active):
        raise fail("active must name a key id")
    digest_secret = _decode(document.get("digest"))
    if digest_secret is None:
        raise fail(f"digest must be base64 of {KEY_BYTES} bytes")
    table = document.get("keys")
    if not isinstance(table, dict):
        raise fail("a [keys] table is required")
    keys: dict[str, bytes] = {}
    for key_id, value in table.items():
        if not KEY_ID.fullmatch(key_id):
            raise fail("a key id in [keys] is not an identifier (ids are quoted, dots allowed)")
        key = _decode(value)
        if key is None:
            raise fail(f"key {key_id} must be base64 of {KEY_BYTES} bytes")
        keys[key_id] = key
    problem = _problem(active, keys, digest_secret)
    if problem is not None:
        raise fail(problem)
    return KeyRing(active=active, keys=keys, digest_secret=digest_secret)


def load(path: Path, *, allow_group_read: bool = False) -> KeyRing:
    """Read and check the ring at `path` (a symlink is followed: its target is checked).

    The file must be a regular file of at most RING_MAX_BYTES with no permission bits for
    group or other (`mode & 0o077 == 0`). `allow_group_read` relaxes that to group *read*
    only (0o440, 0o640): Kubernetes adds group read to Secret volume files when the pod sets
    `fsGroup`, whatever `defaultMode` says, so such a pod cannot present a 0400 file. Write
    or execute for group, and any bit for other, are refused either way.
    """
    try:
        # O_NONBLOCK: a FIFO put in the ring's place is refused below instead of hanging here.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            # The checks look at the file that was opened, not at whatever the path names now.
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise PlanKeyRingUnreadable(f"plan key ring {path}: not a regular file")
            allowed = 0o040 if allow_group_read else 0
            if stat.S_IMODE(info.st_mode) & 0o077 & ~allowed:
                mode = oct(stat.S_IMODE(info.st_mode))
                need = "0400/0600 (or 0440/0640 with group read allowed)"
                raise PlanKeyRingExposed(
                    f"plan key ring {path}: mode {mode} lets other users at it; make it {need}"
                )
            data = handle.read(RING_MAX_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise PlanKeyRingUnreadable(f"plan key ring {path} cannot be read ({reason})") from None
    if len(data) > RING_MAX_BYTES:
        raise PlanKeyRingUnreadable(f"plan key ring {path}: larger than {RING_MAX_BYTES} bytes")
    return _parse(path, data)


def _new_key_id(taken: Mapping[str, bytes]) -> str:
    day = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
    while True:
        key_id = f"k{day}-{secrets.token_hex(3)}"
        if key_id not in taken:
            return key_id


def _render(ring: KeyRing) -> bytes:
    def b64(key: bytes) -> str:
        return base64.b64encode(key).decode("ascii")

    lines = [
        "# qinglong plan key ring: keep it private (0600); losing it loses every encrypted plan.",
        "# Rotate with `add_key` (the newest key encrypts); keep old keys while rows use them.",
        f'format = "{FORMAT}"',
        f'active = "{ring.active}"',
        f'digest = "{b64(ring.digest_secret)}"',
        "",
        "[keys]",
        *(f'"{key_id}" = "{b64(key)}"' for key_id, key in ring.keys.items()),
    ]
    return ("\n".join(lines) + "\n").encode("ascii")


@contextlib.contextmanager
def _directory_locked(path: Path) -> Iterator[int]:
    """An exclusive flock on the ring's folder, so that two writers of one ring take turns
    (each `add_key` reads the ring it extends under the lock); yields the folder's fd."""
    import fcntl  # POSIX only, like the modes this module enforces

    try:
        fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def _unwritable(path: Path, exc: OSError) -> PlanKeyRingUnwritable:
    reason = exc.strerror or errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    return PlanKeyRingUnwritable(f"plan key ring {path} cannot be written ({reason})")


def _write(
    directory_fd: int, target: Path, ring: KeyRing, *, replace: bool, owner: os.stat_result | None
) -> None:
    """Put `ring` at `target` atomically as a 0600 file; the temp file is 0600 from birth."""
    temp = target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(temp, flags, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)  # the umask may have taken bits; make it exact
            if owner is not None and os.geteuid() == 0:
                # root rotating a service user's ring must not leave it unreadable to it.
                os.fchown(fd, owner.st_uid, owner.st_gid)
            view = memoryview(_render(ring))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(temp, target)
        else:
            # link() refuses an existing name atomically, where rename would clobber it.
            os.link(temp, target)
            temp.unlink()
        os.fsync(directory_fd)
    except FileExistsError:
        temp.unlink(missing_ok=True)
        raise _exists(target) from None
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise _unwritable(target, exc) from None


def _exists(path: Path) -> PlanKeyRingExists:
    return PlanKeyRingExists(
        f"plan key ring {path} exists already; add a key with `keys generate --add`"
    )


def generate(path: Path, *, overwrite: bool = False) -> KeyRing:
    """Write a new ring at `path`: one fresh active key and a fresh digest secret, mode 0600.

    An existing file is refused (`PlanKeyRingExists`) unless `overwrite`, because replacing a
    ring makes every plan it encrypted unreadable; `add_key` is how a ring grows.
    """
    key_id = _new_key_id({})
    ring = KeyRing(
        active=key_id,
        keys={key_id: secrets.token_bytes(KEY_BYTES)},
        digest_secret=secrets.token_bytes(KEY_BYTES),
    )
    if not overwrite and os.path.lexists(path):
        raise _exists(path)
    target = Path(os.path.realpath(path)) if overwrite else path
    with _directory_locked(target) as directory_fd:
        _write(directory_fd, target, ring, replace=overwrite, owner=None)
    return ring


def add_key(path: Path, *, allow_group_read: bool = False) -> KeyRing:
    """Add a fresh key to the ring at `path` and make it active, keeping every older key and
    the digest secret; the file is rewritten atomically as 0600 (a symlink's target is)."""
    target = Path(os.path.realpath(path))
    with _directory_locked(target) as directory_fd:
        old = load(target, allow_group_read=allow_group_read)
        try:
            owner = target.stat()
        except OSError as exc:
            raise _unwritable(target, exc) from None
        key_id = _new_key_id(old.keys)
        ring = KeyRing(
            active=key_id,
            keys={**old.keys, key_id: secrets.token_bytes(KEY_BYTES)},
            digest_secret=old.digest_secret,
        )
        _write(directory_fd, target, ring, replace=True, owner=owner)
    return ring
