"""Credentials: hashing, bearer parsing, principals and role/scope checks.

Secrets are 256-bit random hex (orbit_wire.ids.new_secret), so one SHA-256 is a sound
hash; comparisons use ``hmac.compare_digest``. A bearer token is
``<credential_id>.<secret>``. Nothing here touches the database: the use cases load the
credential row and call these helpers.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from orbit_wire.errors import AuthError, ErrorCode, OrbitError
from orbit_wire.ids import is_id
from orbit_wire.model import Role

MAX_SECRET_LEN = 256


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified credential. ``queues`` is empty for admins, who are unscoped."""

    credential_id: str
    role: Role
    queues: frozenset[str]
    # When this verification stops holding (expiry, or the grace end of a rotated-out
    # secret); None: until revoked. Caches and worker sessions end there.
    valid_until_ms: int | None = None
    secret_hash: str = ""  # the hash of the secret presented (fencing of worker sessions)

    @property
    def actor(self) -> str:
        """How audit rows name this principal when it acts as a producer."""
        return f"producer:{self.credential_id}"

    @property
    def operator(self) -> str:
        return f"operator:{self.credential_id}"

    def may_use_queue(self, queue_id: str) -> bool:
        return self.role is Role.ADMIN or queue_id in self.queues


def hash_secret(secret: str) -> str:
    """Hex SHA-256 of a secret; what the database stores."""
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)


def parse_bearer(bearer: str) -> tuple[str, str]:
    """Split ``<credential_id>.<secret>``; raise AuthError(UNAUTHENTICATED) on any other form."""
    credential_id, sep, secret = bearer.partition(".")
    if not sep or not is_id(credential_id) or not secret or len(secret) > MAX_SECRET_LEN:
        raise AuthError(ErrorCode.UNAUTHENTICATED, "malformed bearer token")
    return credential_id, secret


def unauthenticated() -> AuthError:
    # One message for every failure so a caller cannot probe which part was wrong.
    return AuthError(ErrorCode.UNAUTHENTICATED, "invalid or revoked credential")


def secret_opens(row: Mapping[Any, Any] | None, hashed: str,
                 now_ms: int) -> tuple[bool, int | None]:
    """Whether a secret (by its hash) opens a ``credentials`` row now, and until when (None:
    until revoked). It must not be revoked or expired, and be either the current secret or
    the rotated-out one within its grace period."""
    if row is None or row["revoked_at_ms"] is not None:
        return False, None
    expires = row.get("expires_at_ms")
    if expires is not None and now_ms >= expires:
        return False, None
    if hmac.compare_digest(hashed, row["secret_hash"]):
        return True, expires
    previous, until = row.get("previous_secret_hash"), row.get("previous_secret_until_ms")
    if (previous and until is not None and now_ms < until
            and hmac.compare_digest(hashed, previous)):
        return True, until if expires is None else min(until, expires)
    return False, None


def principal_from_row(row: Mapping[Any, Any] | None, secret: str, now_ms: int) -> Principal:
    """The principal of a ``credentials`` row, if ``secret`` opens it now (see
    ``secret_opens``); else UNAUTHENTICATED (the same error for every reason, so
    none is revealed)."""
    hashed = hash_secret(secret)
    opens, until = secret_opens(row, hashed, now_ms)
    if not opens or row is None:
        raise unauthenticated()
    return Principal(row["id"], Role(row["role"]), frozenset(orjson.loads(row["queues"])),
                     until, hashed)


def require_role(principal: Principal, roles: Iterable[Role]) -> None:
    allowed = frozenset(roles)
    if principal.role not in allowed:
        names = ", ".join(sorted(role.value for role in allowed))
        raise AuthError(ErrorCode.PERMISSION_DENIED,
                        f"role {principal.role.value} may not do this (needs {names})")


def require_queue(principal: Principal, queue_id: str) -> None:
    """For a worker's hello: a queue outside the credential's scope is refused, whether it
    exists or not (so the answer tells nothing about other queues)."""
    if not principal.may_use_queue(queue_id):
        raise AuthError(
            ErrorCode.PERMISSION_DENIED, f"credential has no access to queue {queue_id}"
        )


def queue_not_found(queue_id: str) -> OrbitError:
    return OrbitError(ErrorCode.NOT_FOUND, f"queue {queue_id} does not exist")


def task_not_found(task_id: str) -> OrbitError:
    return OrbitError(ErrorCode.NOT_FOUND, f"task {task_id} does not exist")


def require_visible_queue(principal: Principal, queue_id: str) -> None:
    """A queue outside the principal's scope answers exactly as a queue that does not exist:
    a principal learns nothing of queues it cannot use (the same 404 everywhere)."""
    if not principal.may_use_queue(queue_id):
        raise queue_not_found(queue_id)
