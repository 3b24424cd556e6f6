"""Queue rows: a queue made, whether queues exist, the queues listed, their names. A queue is
never deleted."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import Connection, RowMapping, bindparam, select

from . import queries
from .tables import queues

__all__ = ["existing_queue_ids", "insert_queue", "queue_exists", "queue_names", "queue_rows"]

INSERT_QUEUE = queues.insert()
QUEUES_IN = select(queues.c.id).where(queues.c.id.in_(bindparam("ids", expanding=True)))
QUEUES_IN_ORDER = select(queues).order_by(queues.c.created_at_ms, queues.c.id)
QUEUE_NAMES = select(queues.c.id, queues.c.name)


def insert_queue(conn: Connection, row: Mapping[str, Any]) -> None:
    """A new queue: ``id``, ``name``, ``created_at_ms``."""
    conn.execute(INSERT_QUEUE, dict(row))


def queue_exists(conn: Connection, queue_id: str) -> bool:
    return conn.execute(queries.QUEUE_EXISTS, {"id": queue_id}).first() is not None


def existing_queue_ids(conn: Connection, queue_ids: Collection[str]) -> set[str]:
    """Which of ``queue_ids`` name a queue."""
    return set(conn.scalars(QUEUES_IN, {"ids": list(queue_ids)}))


def queue_rows(conn: Connection, queue_ids: Collection[str] | None = None) -> list[RowMapping]:
    """Every queue, or those of ``queue_ids`` (None: all), oldest first."""
    if queue_ids is None:
        return list(conn.execute(QUEUES_IN_ORDER).mappings())
    stmt = QUEUES_IN_ORDER.where(queues.c.id.in_(sorted(queue_ids)))
    return list(conn.execute(stmt).mappings())


def queue_names(conn: Connection) -> dict[str, str]:
    """Each named queue's name, by ID."""
    return {queue_id: name for queue_id, name in conn.execute(QUEUE_NAMES) if name}
