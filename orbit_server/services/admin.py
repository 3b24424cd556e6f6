"""Credentials and queues: authenticate a bearer token, create queues, create and revoke
credentials, and the CLI's bootstrap admin. Every public method is one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from orbit_wire.errors import AuthError, ErrorCode, OrbitError
from orbit_wire.ids import is_id, new_id, new_secret
from orbit_wire.limits import MAX_NAME_LEN
from orbit_wire.model import Role

from ..auth import Principal, hash_secret, parse_bearer, principal_from_row, require_role
from ..domain.bodies import MAX_GRACE_MS
from ..store import credentials as stored
from ..store.queues import existing_queue_ids, insert_queue
from ..store.retry import transactional
from ..store.views import queue_view
from .context import TxContext
from .effects import Effects
from .pushes import PushKind, record_push

# Verified tokens kept at most; past it the cache starts over rather than tracking age.
_AUTH_CACHE_MAX = 10_000
# A credential's last use is written at most this often (a write per verification is not).
LAST_USED_STEP_MS = 60_000
# The longest grace period a rotated-out secret may keep.


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class AdminService:
    """The admin's use cases and authentication, with a short cache of verified tokens
    (``config.auth_cache_ms``, so another replica's revocation applies soon)."""

    def __init__(self, tx: TxContext) -> None:
        self._tx = tx
        self._auth_cache: dict[tuple[str, str], tuple[Principal, int]] = {}

    def cached_principal(self, bearer: str) -> Principal | None:
        """The principal of a token verified less than the cache time ago, else None. Safe
        on any thread (one dict read): the HTTP adapter authenticates a request before it
        reads its body without a store hop when the token is known."""
        try:
            credential_id, secret = parse_bearer(bearer)
        except AuthError:
            return None
        cached = self._auth_cache.get((credential_id, hash_secret(secret)))
        if cached is not None and cached[1] > self._tx.clock():
            return cached[0]
        return None

    def authenticate(self, bearer: str) -> Principal:
        """Verify ``<credential_id>.<secret>``; raise AuthError(UNAUTHENTICATED)."""
        credential_id, secret = parse_bearer(bearer)
        key = (credential_id, hash_secret(secret))
        now = self._tx.clock()
        cached = self._auth_cache.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        table = self._tx.credentials
        row = table.kept(credential_id, now)
        if row is None:  # no transaction at all while the row is kept in memory
            with self._tx.read() as conn:
                row = table.read(conn, credential_id, now)
        principal = principal_from_row(row, secret, now)
        assert row is not None
        if row["last_used_at_ms"] is None or row["last_used_at_ms"] < now - LAST_USED_STEP_MS:
            with self._tx.write() as conn:
                stored.touch_credential(conn, credential_id, now)
            table.used(credential_id, now)
        if len(self._auth_cache) >= _AUTH_CACHE_MAX:
            self._auth_cache.clear()
        cached_until = now + self._tx.config.auth_cache_ms
        if principal.valid_until_ms is not None:
            cached_until = min(cached_until, principal.valid_until_ms)
        self._auth_cache[key] = (principal, cached_until)
        return principal

    def forget(self, credential_id: str) -> None:
        """Drop the credential's verified tokens and its row kept in memory (after a
        revocation or rotation)."""
        self._tx.credentials.forget(credential_id)
        for key in [k for k in self._auth_cache if k[0] == credential_id]:
            self._auth_cache.pop(key, None)

    def create_queue(self, principal: Principal, name: str | None) -> dict[str, Any]:
        """Admin only: a new queue's view."""
        require_role(principal, (Role.ADMIN,))
        _check_name(name)
        now = self._tx.clock()
        row = {"id": new_id(now), "name": name, "created_at_ms": now}
        with self._tx.write() as conn:
            insert_queue(conn, row)
        return queue_view(row)

    def create_credential(self, principal: Principal, role: str, queue_ids: list[str],
                          name: str | None, expires_at_ms: int | None = None
                          ) -> dict[str, Any]:
        """Admin only. The answer carries the secret; it is never shown again."""
        require_role(principal, (Role.ADMIN,))
        _check_expiry(expires_at_ms, self._tx.clock())
        return self._create_credential(role, queue_ids, name, expires_at_ms)

    def list_credentials(self, principal: Principal) -> dict[str, Any]:
        """Admin only: every credential without its secret (oldest first)."""
        require_role(principal, (Role.ADMIN,))
        with self._tx.read() as conn:
            rows = stored.credentials_in_order(conn)
            return {"credentials": [_credential_view(row) for row in rows]}

    def rotate_credential(self, principal: Principal, credential_id: str, grace_ms: int,
                          expires_at_ms: int | None = None) -> tuple[dict[str, Any], Effects]:
        """Admin only: a new secret; the old one still opens the credential for ``grace_ms``
        (0: refused at once), then is refused. A new expiry may be set with it."""
        require_role(principal, (Role.ADMIN,))
        now = self._tx.clock()
        if not isinstance(grace_ms, int) or not 0 <= grace_ms <= MAX_GRACE_MS:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"grace_ms must be 0-{MAX_GRACE_MS}")
        _check_expiry(expires_at_ms, now)
        secret = new_secret()
        with self._tx.write() as conn:
            row = stored.credential_for_update(conn, credential_id)
            if row is None or row["revoked_at_ms"] is not None:
                raise OrbitError(ErrorCode.NOT_FOUND, "no such credential")
            values: dict[str, Any] = {
                "secret_hash": hash_secret(secret),
                "previous_secret_hash": row["secret_hash"] if grace_ms else None,
                "previous_secret_until_ms": now + grace_ms if grace_ms else None,
            }
            if expires_at_ms is not None:
                values["expires_at_ms"] = expires_at_ms
            stored.update_credential(conn, credential_id, values)
            record_push(conn, now, PushKind.FORGET, credential_id=credential_id)
        self.forget(credential_id)
        effects = Effects()
        if not grace_ms:
            effects.revoked_credentials.append(credential_id)  # sessions on the old secret
        return {"credential_id": credential_id, "secret": secret, "role": row["role"],
                "queues": orjson.loads(row["queues"]),
                "previous_secret_until_ms": values["previous_secret_until_ms"]}, effects

    def bootstrap_admin(self, name: str | None) -> dict[str, Any]:
        """Create an admin credential without a principal (the CLI's bootstrap-admin)."""
        return self._create_credential(Role.ADMIN.value, [], name)

    def _create_credential(self, role: str, queue_ids: Sequence[str],
                           name: str | None, expires_at_ms: int | None = None
                           ) -> dict[str, Any]:
        try:
            role_ = Role(role)
        except ValueError:
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             "role must be one of admin, producer, worker") from None
        _check_name(name)
        if not isinstance(queue_ids, (list, tuple)) or not all(is_id(q) for q in queue_ids):
            raise OrbitError(ErrorCode.BAD_REQUEST, "queues must be a list of queue IDs")
        wanted = list(dict.fromkeys(queue_ids))
        if role_ is not Role.ADMIN and not wanted:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"a {role_.value} credential needs a queue")
        now = self._tx.clock()
        secret = new_secret()
        row = {
            "id": new_id(now), "secret_hash": hash_secret(secret), "role": role_.value,
            "queues": orjson.dumps(wanted).decode(), "name": name, "created_at_ms": now,
            "revoked_at_ms": None, "expires_at_ms": expires_at_ms,
        }
        with self._tx.write() as conn:
            if wanted:
                found = existing_queue_ids(conn, wanted)
                missing = [q for q in wanted if q not in found]
                if missing:
                    raise OrbitError(ErrorCode.NOT_FOUND, f"queue {missing[0]} does not exist")
            stored.insert_credential(conn, row)
        return {"credential_id": row["id"], "secret": secret, "role": role_.value,
                "queues": wanted, "name": name, "expires_at_ms": expires_at_ms}

    def revoke_credential(self, principal: Principal, credential_id: str
                          ) -> tuple[dict[str, Any], Effects]:
        """Admin only; revoking twice is harmless. This server forgets the credential's
        cached tokens and closes its worker sessions at once (``effects``); other replicas
        do so when they read the ``pushes`` row written here (services/pushes.py)."""
        require_role(principal, (Role.ADMIN,))
        if not is_id(credential_id):
            raise OrbitError(ErrorCode.NOT_FOUND, "no such credential")
        now = self._tx.clock()
        with self._tx.write() as conn:
            found = stored.revocation_of(conn, credential_id)
            if found is None:
                raise OrbitError(ErrorCode.NOT_FOUND, "no such credential")
            if found[0] is None:
                stored.revoke_credential(conn, credential_id, now)
                record_push(conn, now, PushKind.REVOKE, credential_id=credential_id)
        self.forget(credential_id)
        effects = Effects()
        effects.revoked_credentials.append(credential_id)
        return {"credential_id": credential_id, "revoked": True}, effects


def _credential_view(row: Any) -> dict[str, Any]:
    return {"credential_id": row["id"], "name": row["name"], "role": row["role"],
            "queues": orjson.loads(row["queues"]), "created_at_ms": row["created_at_ms"],
            "last_used_at_ms": row["last_used_at_ms"], "expires_at_ms": row["expires_at_ms"],
            "revoked_at_ms": row["revoked_at_ms"],
            "previous_secret_until_ms": row["previous_secret_until_ms"]}


def _check_expiry(expires_at_ms: int | None, now: int) -> None:
    if expires_at_ms is not None and (not isinstance(expires_at_ms, int)
                                      or isinstance(expires_at_ms, bool)
                                      or not now < expires_at_ms < 2**62):
        raise OrbitError(ErrorCode.BAD_REQUEST, "expires_at_ms must be a future instant (ms)")


def _check_name(name: str | None) -> None:
    if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LEN):
        raise OrbitError(ErrorCode.BAD_REQUEST, f"name must be 1-{MAX_NAME_LEN} characters")
