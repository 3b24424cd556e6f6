"""Credential rows: read by ID (every authentication, hello and worker request), listed,
made, rotated, revoked, and their last use recorded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Row, RowMapping, bindparam, select

from . import queries
from .prepared import first_row
from .tables import credentials

__all__ = ["credential_for_update", "credential_row", "credentials_in_order",
           "insert_credential", "revocation_of", "revoke_credential", "touch_credential",
           "update_credential"]

_THIS: Any = credentials.c.id == bindparam("_id")
INSERT_CREDENTIAL = credentials.insert()
CREDENTIALS_IN_ORDER = select(credentials).order_by(credentials.c.created_at_ms,
                                                    credentials.c.id)
CREDENTIAL_FOR_UPDATE = select(credentials).where(_THIS).with_for_update()
REVOKED_AT = select(credentials.c.revoked_at_ms).where(_THIS)
TOUCH = credentials.update().where(_THIS).values(last_used_at_ms=bindparam("_at"))
REVOKE = credentials.update().where(_THIS).values(revoked_at_ms=bindparam("_at"))


def credential_row(conn: Connection, credential_id: str) -> dict[str, Any] | None:
    """The credential's row, or None (a statement built once: every request asks)."""
    return first_row(conn, queries.CREDENTIAL_BY_ID, {"id": credential_id})


def credential_for_update(conn: Connection, credential_id: str) -> RowMapping | None:
    """The credential's row, locked until the transaction ends, or None."""
    return conn.execute(CREDENTIAL_FOR_UPDATE, {"_id": credential_id}).mappings().first()


def revocation_of(conn: Connection, credential_id: str) -> Row[Any] | None:
    """The credential's ``(revoked_at_ms,)``, or None when there is no such credential."""
    return conn.execute(REVOKED_AT, {"_id": credential_id}).first()


def credentials_in_order(conn: Connection) -> list[RowMapping]:
    """Every credential, oldest first."""
    return list(conn.execute(CREDENTIALS_IN_ORDER).mappings())


def insert_credential(conn: Connection, row: Mapping[str, Any]) -> None:
    conn.execute(INSERT_CREDENTIAL, dict(row))


def update_credential(conn: Connection, credential_id: str, values: Mapping[str, Any]) -> None:
    """Set ``values`` (column -> value) on the credential's row."""
    conn.execute(credentials.update().where(credentials.c.id == credential_id)
                 .values(**values))


def touch_credential(conn: Connection, credential_id: str, now_ms: int) -> None:
    """Record the credential's last use."""
    conn.execute(TOUCH, {"_id": credential_id, "_at": now_ms})


def revoke_credential(conn: Connection, credential_id: str, now_ms: int) -> None:
    conn.execute(REVOKE, {"_id": credential_id, "_at": now_ms})
