"""The pauses in force and the log of every pause and resume (tables ``pauses`` and
``pause_log``, docs/flow-control.md "Pause and resume"). Keys are stored with "" for
"every" (domain.pauses.PauseKey.stored)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import Connection, RowMapping, and_, bindparam, delete, insert, select, update

from .tables import pause_log, pauses

__all__ = ["all_pauses", "delete_pause", "log_pause", "pause_log_of", "pauses_of_queues",
           "put_pause"]

# Bound under names of their own: an UPDATE reserves its columns' names for its SET clause.
_KEY = and_(pauses.c.queue_id == bindparam("k_queue"), pauses.c.handler == bindparam("k_handler"),
            pauses.c.handler_version == bindparam("k_version"))
ALL_PAUSES = select(pauses)
PAUSE_BY_KEY = select(pauses.c.queue_id).where(_KEY)
INSERT_PAUSE = insert(pauses)
UPDATE_PAUSE = update(pauses).where(_KEY).values(
    reason=bindparam("new_reason"), paused_by=bindparam("new_paused_by"),
    paused_at_ms=bindparam("new_paused_at_ms"))
DELETE_PAUSE = delete(pauses).where(_KEY)
INSERT_LOG = insert(pause_log)
LOG_OF_QUEUE = (select(pause_log).where(pause_log.c.queue_id == bindparam("queue_id"))
                .order_by(pause_log.c.at_ms.desc(), pause_log.c.id.desc())
                .limit(bindparam("n")))


def _key(key: tuple[str, str, str]) -> dict[str, str]:
    return {"queue_id": key[0], "handler": key[1], "handler_version": key[2]}


def _where(key: tuple[str, str, str]) -> dict[str, str]:
    return {"k_queue": key[0], "k_handler": key[1], "k_version": key[2]}


def all_pauses(conn: Connection) -> list[RowMapping]:
    """Every pause in force (a handful: read by every server once per heartbeat)."""
    return list(conn.execute(ALL_PAUSES).mappings())


def pauses_of_queues(conn: Connection, queue_ids: Collection[str]) -> list[RowMapping]:
    if not queue_ids:
        return []
    stmt = ALL_PAUSES.where(pauses.c.queue_id.in_(sorted(queue_ids)))
    return list(conn.execute(stmt).mappings())


def put_pause(conn: Connection, key: tuple[str, str, str], reason: str, actor: str,
              now: int) -> bool:
    """Pause ``key`` (a pause already in force takes the new reason, actor and instant).
    True when it was not paused before."""
    if conn.execute(PAUSE_BY_KEY, _where(key)).first() is None:
        conn.execute(INSERT_PAUSE, {**_key(key), "reason": reason, "paused_by": actor,
                                    "paused_at_ms": now})
        return True
    conn.execute(UPDATE_PAUSE, {**_where(key), "new_reason": reason, "new_paused_by": actor,
                                "new_paused_at_ms": now})
    return False


def delete_pause(conn: Connection, key: tuple[str, str, str]) -> bool:
    """Resume ``key``; True when a pause was in force."""
    return bool(conn.execute(DELETE_PAUSE, _where(key)).rowcount)


def log_pause(conn: Connection, key: tuple[str, str, str], action: str, actor: str,
              reason: str | None, now: int) -> None:
    conn.execute(INSERT_LOG, {**_key(key), "action": action, "actor": actor,
                              "reason": reason, "at_ms": now})


def pause_log_of(conn: Connection, queue_id: str, n: int) -> list[Mapping[str, Any]]:
    """The queue's last ``n`` pauses and resumes, newest first."""
    return [dict(r) for r in conn.execute(LOG_OF_QUEUE, {"queue_id": queue_id, "n": n})
            .mappings()]
