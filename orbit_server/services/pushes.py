"""Pushes between replicas: a cancel, a revocation or a declared policy written in its own
transaction to the ``pushes`` table, so the replica a worker is connected to acts on it too.

The replica that made the change acts at once (``Effects``); every replica on a shared
database reads the rows of the last ``PUSH_WINDOW_MS`` every poll (``OrbitServer``'s push
loop, well within a heartbeat) and acts on the ones it has not seen: a ``cancel`` frame to
the attempt's worker, the credential's sessions closed and its cached tokens forgotten.
Rows are read by age, not by id: on MySQL an id can become visible after a larger one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import Connection

from ..store.pushes import delete_pushes_before, insert_push, pushes_since
from ..store.retry import transactional
from .context import TxContext

# How far back each poll reads: commits that became visible late, and clock differences
# between replicas, within this are still seen.
PUSH_WINDOW_MS = 10_000
# Rows older than this are deleted (any poll has long read them).
PUSH_RETENTION_MS = 600_000


class PushKind(StrEnum):
    CANCEL = "CANCEL"  # instance_id, attempt_id, epoch
    REVOKE = "REVOKE"  # credential_id: close its sessions, forget its tokens
    FORGET = "FORGET"  # credential_id: its secret changed; forget its tokens
    POLICIES = "POLICIES"  # a capability's policy was first declared: forget cached policies


@dataclass(frozen=True, slots=True)
class Push:
    id: int
    kind: PushKind
    credential_id: str | None
    instance_id: str | None
    attempt_id: str | None
    epoch: int | None
    created_at_ms: int


def record_push(conn: Connection, now_ms: int, kind: PushKind, *,
                credential_id: str | None = None, instance_id: str | None = None,
                attempt_id: str | None = None, epoch: int | None = None) -> None:
    """Write a push row in the caller's transaction (it lands with the change it tells)."""
    insert_push(conn, kind.value, credential_id, instance_id, attempt_id, epoch, now_ms)


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class PushService:
    def __init__(self, tx: TxContext) -> None:
        self._tx = tx

    def recent(self) -> list[Push]:
        """The pushes of the last PUSH_WINDOW_MS (the caller skips the ones it has seen)."""
        since = self._tx.clock() - PUSH_WINDOW_MS
        with self._tx.read() as conn:
            rows = pushes_since(conn, since)
            return [Push(r["id"], PushKind(r["kind"]), r["credential_id"], r["instance_id"],
                         r["attempt_id"], r["epoch"], r["created_at_ms"]) for r in rows]

    def prune(self) -> int:
        """Delete pushes past the retention; returns how many."""
        before = self._tx.clock() - PUSH_RETENTION_MS
        with self._tx.write() as conn:
            return delete_pushes_before(conn, before)
