"""Worker instance rows as the connections of this replica keep them: read and written at a
hello, kept current by presence writes, marked disconnected when the connection ends (each
write only while that connection still holds the row), and the reservations an ended
connection leaves behind."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, RowMapping, and_, bindparam, select

from orbit_wire.model import AttemptState

from .prepared import first_row
from .tables import attempts, instances, open_attempt

__all__ = ["holds_connection", "insert_instance", "instance_row", "mark_disconnected",
           "record_presence", "reserved_attempts_of", "unconfirmed_grants_of",
           "update_instance"]

INSERT_INSTANCE = instances.insert()
INSTANCE_BY_ID = select(instances).where(instances.c.id == bindparam("_id"))
# A connection's row, only while that connection (replica, connect instant) still holds it.
_THIS_CONNECTION = and_(instances.c.id == bindparam("_id"),
                        instances.c.connected_at_ms == bindparam("_connected"),
                        instances.c.replica == bindparam("_replica"))
PRESENCE = instances.update().where(_THIS_CONNECTION).values(
    last_seen_at_ms=bindparam("_seen"), credit=bindparam("_credit"),
    last_heartbeat_at_ms=bindparam("_heard"))
DISCONNECTED = instances.update().where(
    _THIS_CONNECTION, instances.c.disconnected_at_ms.is_(None)).values(
    disconnected_at_ms=bindparam("_seen"), last_seen_at_ms=bindparam("_seen"), credit=0)
# Locked (MySQL): a hello of the same instance on another replica updates this row, so a
# grant and the takeover are ordered.
CONNECTION_HOLDS = (select(instances.c.id).where(_THIS_CONNECTION).with_for_update())
UNCONFIRMED_GRANTS_OF = (
    select(attempts)
    .where(attempts.c.instance_id == bindparam("instance_id"),
           open_attempt(AttemptState.RUNNING), attempts.c.grant_connection.is_not(None))
    .with_for_update()
)
RESERVED_OF_INSTANCE = (
    select(attempts)
    .where(attempts.c.instance_id == bindparam("instance_id"),
           open_attempt(AttemptState.RESERVED))
    .with_for_update()
)


def instance_row(conn: Connection, instance_id: str) -> RowMapping | None:
    return conn.execute(INSTANCE_BY_ID, {"_id": instance_id}).mappings().first()


def insert_instance(conn: Connection, row: Mapping[str, Any]) -> None:
    conn.execute(INSERT_INSTANCE, dict(row))


def update_instance(conn: Connection, instance_id: str, values: Mapping[str, Any]) -> None:
    """Set ``values`` (column -> value) on the instance's row."""
    conn.execute(instances.update().where(instances.c.id == instance_id).values(**values))


def record_presence(conn: Connection, replica: str, now: int,
                    sessions: Iterable[tuple[str, int, int, int]]) -> int:
    """Each connection of ``replica`` (instance ID, connect instant, credit, last frame
    instant) seen ``now``, with its credit and last frame: one executemany. A row another
    connection took over is left alone. Returns the rows updated."""
    updated: int = conn.execute(PRESENCE, [
        {"_id": instance_id, "_connected": connected, "_replica": replica, "_seen": now,
         "_credit": credit, "_heard": heard}
        for instance_id, connected, credit, heard in sessions
    ]).rowcount
    return updated


def mark_disconnected(conn: Connection, instance_id: str, connected_at_ms: int, replica: str,
                      now: int) -> None:
    """The instance's connection (of ``replica``, made at ``connected_at_ms``) ended ``now``,
    unless a newer connection has taken the row over."""
    conn.execute(DISCONNECTED, {"_id": instance_id, "_connected": connected_at_ms,
                                "_replica": replica, "_seen": now})


def holds_connection(conn: Connection, instance_id: str, connected_at_ms: int,
                     replica: str) -> bool:
    """Whether the instance's row still names this connection (replica, connect instant);
    the row stays locked until the transaction ends."""
    return first_row(conn, CONNECTION_HOLDS, {"_id": instance_id, "_connected": connected_at_ms,
                                             "_replica": replica}) is not None


def unconfirmed_grants_of(conn: Connection, instance_id: str) -> list[RowMapping]:
    """The instance's RUNNING attempts whose grant it has not confirmed, locked until the
    transaction ends."""
    return list(conn.execute(UNCONFIRMED_GRANTS_OF, {"instance_id": instance_id}).mappings())


def reserved_attempts_of(conn: Connection, instance_id: str) -> list[RowMapping]:
    """The instance's RESERVED attempts, locked until the transaction ends."""
    return list(conn.execute(RESERVED_OF_INSTANCE, {"instance_id": instance_id}).mappings())
