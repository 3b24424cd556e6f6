"""The credentials file: what `orbit credentials create -o FILE` writes and workers read.

    {"url": "http://127.0.0.1:8080", "credential_id": "<32 hex>", "secret": "<hex>",
     "role": "worker", "queues": ["<32 hex>"]}

The file holds a secret: it is written with mode 0600, a file that group or others may
read (or write) is refused when loaded, and its secret is never logged.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import orjson

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id


@dataclass(frozen=True, slots=True)
class Credentials:
    url: str
    credential_id: str
    secret: str
    role: str
    queues: tuple[str, ...] = ()

    @property
    def bearer(self) -> str:
        return f"{self.credential_id}.{self.secret}"

    def __repr__(self) -> str:  # never show the secret
        return (
            f"Credentials(url={self.url!r}, credential_id={self.credential_id!r}, "
            f"role={self.role!r})"
        )

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "url": self.url,
                "credential_id": self.credential_id,
                "secret": self.secret,
                "role": self.role,
                "queues": list(self.queues),
            },
            option=orjson.OPT_INDENT_2,
        )


# Permission bits a credentials file may not have: any access for group or others.
LOOSE_BITS = 0o077


class CredentialsFileError(OrbitError):
    """The credentials file is missing, unreadable or malformed."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.BAD_REQUEST, message)


def load_credentials(path: str | os.PathLike[str]) -> Credentials:
    """Read and check a credentials file; raise CredentialsFileError with a one-line reason."""
    p = Path(path)
    try:
        # O_CLOEXEC (Python's default): no process this one starts inherits the descriptor.
        with p.open("rb") as fh:
            mode = stat.S_IMODE(os.fstat(fh.fileno()).st_mode)
            if mode & LOOSE_BITS:
                raise CredentialsFileError(
                    f"credentials file {p} is accessible to group or others (mode "
                    f"{mode:04o}); it holds a secret: run `chmod 600 {p}`")
            raw = fh.read()
    except FileNotFoundError:
        raise CredentialsFileError(f"credentials file {p} does not exist") from None
    except OSError as exc:
        raise CredentialsFileError(f"credentials file {p} cannot be read: {exc.strerror}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CredentialsFileError(f"credentials file {p} is not valid JSON") from None
    if not isinstance(data, dict):
        raise CredentialsFileError(f"credentials file {p} must hold a JSON object")
    url, cid, secret = data.get("url"), data.get("credential_id"), data.get("secret")
    role, queues = data.get("role", ""), data.get("queues", [])
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise CredentialsFileError(f"credentials file {p}: 'url' must be an http(s) URL")
    if not is_id(cid):
        raise CredentialsFileError(f"credentials file {p}: 'credential_id' must be a 32-hex ID")
    if not isinstance(secret, str) or not secret:
        raise CredentialsFileError(f"credentials file {p}: 'secret' is missing")
    if not isinstance(queues, list) or not all(is_id(q) for q in queues):
        raise CredentialsFileError(f"credentials file {p}: 'queues' must be a list of queue IDs")
    return Credentials(url.rstrip("/"), str(cid), secret, str(role), tuple(queues))


def write_credentials(path: str | os.PathLike[str], creds: Credentials) -> None:
    """Write the file with mode 0600, replacing any file at ``path`` atomically.

    The secret goes into a fresh file created 0600 next to the target, which is then renamed
    over it: an existing file's looser mode is never inherited and readers never see half a
    file. Raises CredentialsFileError when the file cannot be written.
    """
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(creds.to_json() + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, p)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise CredentialsFileError(
            f"credentials file {p} cannot be written: {exc.strerror}"
        ) from None
