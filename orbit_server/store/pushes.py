"""Push rows (services/pushes.py): a cancel or a revocation written in the transaction of the
change it tells, read and pruned by age (``ix_pushes_created``)."""

from __future__ import annotations

from sqlalchemy import Connection, RowMapping, bindparam, delete, select

from .tables import pushes

__all__ = ["delete_pushes_before", "insert_push", "pushes_since"]

INSERT_PUSH = pushes.insert()
PUSHES_SINCE = (select(pushes).where(pushes.c.created_at_ms >= bindparam("since"))
                .order_by(pushes.c.id))
DELETE_PUSHES_BEFORE = delete(pushes).where(pushes.c.created_at_ms < bindparam("before"))


def insert_push(conn: Connection, kind: str, credential_id: str | None,
                instance_id: str | None, attempt_id: str | None, epoch: int | None,
                created_at_ms: int) -> None:
    conn.execute(INSERT_PUSH, {
        "kind": kind, "credential_id": credential_id, "instance_id": instance_id,
        "attempt_id": attempt_id, "epoch": epoch, "created_at_ms": created_at_ms,
    })


def pushes_since(conn: Connection, since: int) -> list[RowMapping]:
    """The pushes created at or after ``since``, by id."""
    return list(conn.execute(PUSHES_SINCE, {"since": since}).mappings())


def delete_pushes_before(conn: Connection, before: int) -> int:
    """Delete the pushes created before ``before``; returns how many."""
    return int(conn.execute(DELETE_PUSHES_BEFORE, {"before": before}).rowcount)
