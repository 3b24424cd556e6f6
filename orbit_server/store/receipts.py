"""Operation receipts: every worker op's answer is stored in the transaction that applied it,
so a retransmitted ``msg_id`` gets the stored answer instead of applying twice
(docs/protocol.md). ``load_receipts`` reads a request's receipts in one statement per 500
message IDs, ``receipt_row`` is the row a caller queues on its ``UnitOfWork``, ``replay``
turns a stored answer into the op's result again, and ``prune_receipts`` deletes the oldest
past the retention.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson
from sqlalchemy import Connection

from orbit_wire.errors import ErrorCode
from orbit_wire.frames import OpResult
from orbit_wire.model import Disposition, TaskState

from . import queries
from .prepared import prepared_select
from .rows import IN_CHUNK

__all__ = ["Receipt", "answer_result", "load_receipts", "prune_receipts", "receipt_row",
           "replay"]

# A stored answer: (the op's kind, its answer as JSON-ready data).
Receipt = tuple[str, dict[str, Any]]


def load_receipts(conn: Connection, instance_id: str, msg_ids: list[str]) -> dict[str, Receipt]:
    """The stored answers of ``instance_id`` for these message IDs, by message ID."""
    out: dict[str, Receipt] = {}
    wanted = list(dict.fromkeys(msg_ids))
    query = prepared_select(queries.RECEIPTS_BY_MSG)
    for start in range(0, len(wanted), IN_CHUNK):
        chunk = wanted[start:start + IN_CHUNK]
        for msg_id, op, answer in query.all(conn, {"instance_id": instance_id,
                                                   "msg_ids": chunk}):
            out[msg_id] = (op, orjson.loads(answer))
    return out


def receipt_row(instance_id: str, msg_id: str, op: str, answer: Mapping[str, Any],
                now_ms: int) -> dict[str, Any]:
    """The ``receipts`` row for one applied op; append it to ``UnitOfWork.receipt_rows``."""
    return {"instance_id": instance_id, "msg_id": msg_id, "op": op,
            "answer": orjson.dumps(answer).decode(), "created_at_ms": now_ms}


def replay(msg_id: str, kind: str, seen: Receipt, now_ms: int) -> OpResult:
    """The result for a resent op of ``kind`` whose answer was stored as ``seen``.

    A message ID stored for another kind of op is MESSAGE_ID_REUSED. A stored lease is
    re-based on its stored expiry, so a replay never lengthens a lease (and one that has
    ended answers LEASE_EXPIRED)."""
    stored_kind, answer = seen
    if stored_kind != kind:
        return OpResult(msg_id, False, ErrorCode.MESSAGE_ID_REUSED,
                        f"msg_id {msg_id} was used for a {stored_kind} operation")
    expires = answer.get("lease_expires_at_ms")
    if answer.get("ok") and expires is not None:
        # Never hand out the original duration again: the worker counts from its resend.
        remaining = expires - now_ms
        if remaining <= 0:
            return OpResult(msg_id, False, ErrorCode.LEASE_EXPIRED, "attempt lease has expired")
        answer = {**answer, "lease_ms": min(answer["lease_ms"], remaining)}
    return answer_result(msg_id, answer)


def answer_result(msg_id: str, answer: Mapping[Any, Any]) -> OpResult:
    """The wire result of an op's answer (as stored in its receipt)."""
    if not answer.get("ok"):
        return OpResult(msg_id, False, ErrorCode(answer["error_code"]),
                        answer.get("error_message"))
    disposition = answer.get("disposition")
    state = answer.get("task_state")
    return OpResult(
        msg_id, True,
        lease_ms=answer.get("lease_ms"),
        disposition=Disposition(disposition) if disposition else None,
        task_state=TaskState(state) if state else None,
    )


def prune_receipts(conn: Connection, before: int, batch: int) -> int:
    """Delete the oldest receipts created before ``before``, about ``batch`` of them, in
    insertion order (the primary key ``seq``): the first ``batch`` receipts and those right
    after them that share the last one's millisecond, stopping at the first created at or
    after ``before`` (after a clock was set back, older ones behind it wait for a later
    pass). Returns how many were deleted."""
    upto, last_at, full = _leading(conn, 0, batch, lambda created: created < before)
    while full and upto is not None:  # the batch may end inside a millisecond: finish it
        upto, _, full = _leading(conn, upto, _SAME_MS_STEP,
                                 lambda created: created == last_at, upto)
    if upto is None:
        return 0
    deleted: int = conn.execute(queries.DELETE_RECEIPTS_UP_TO,
                                {"upto": upto, "before": before}).rowcount
    return deleted


# Receipts read at a time past a batch's end while they share its last millisecond.
_SAME_MS_STEP = 64


def _leading(conn: Connection, after: int, n: int, keep: Callable[[int], bool],
             upto: int | None = None) -> tuple[int | None, int | None, bool]:
    """Of the ``n`` receipts after ``after`` in insertion order, the leading ones whose
    creation instant ``keep`` accepts: (the last one's seq, else ``upto``; its instant;
    whether all ``n`` were accepted)."""
    rows = conn.execute(queries.RECEIPTS_AFTER, {"after": after, "n": n}).all()
    last_at: int | None = None
    for seq, created in rows:
        if not keep(created):
            return upto, last_at, False
        upto, last_at = seq, created
    return upto, last_at, len(rows) == n
