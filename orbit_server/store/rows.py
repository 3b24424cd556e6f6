"""Rows ↔ domain records, and a unit of work that writes records back in batches.

A ``UnitOfWork`` lives inside one transaction. It loads task and attempt rows into
``TaskRec``/``AttemptRec`` (remembering what each looked like), lets the domain mutate them,
and ``flush()`` writes every changed record with compare-and-set
(``UPDATE ... WHERE id = :id AND state = :old_state [AND epoch = :old_epoch]``), grouping
records that changed the same columns into one ``executemany``. New attempts, audit rows,
evidence and receipts are inserted with one ``executemany`` each. A compare-and-set that
matches fewer rows than expected means another writer moved first: the whole transaction is
rolled back with a retryable UNAVAILABLE, so nothing partial is ever committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection, and_, bindparam, select

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import AttemptState, Idempotency, Outcome, TaskState

from ..domain import AttemptRec, Backoff, TaskRec
from .tables import attempts, audit, evidence, receipts, tasks

# Chunk IN (...) lists: portable and well under every engine's parameter limit.
IN_CHUNK = 500

TASK_MUTABLE = (
    "state", "max_attempts", "deadline_at_ms", "available_at_ms", "epoch", "attempts_started",
    "uncertain", "cancel_requested", "current_attempt_id", "result", "failure_code",
    "failure_details", "updated_at_ms",
)
ATTEMPT_MUTABLE = (
    "state", "child_pid", "started_at_ms", "finished_at_ms", "lease_expires_at_ms",
    "attempt_deadline_at_ms", "renewals", "outcome", "code", "retryable", "details",
    "exit_code", "signal", "cpu_ms", "peak_rss_bytes", "kill_reason", "decision",
    "decision_rule",
)
ATTEMPT_COLUMNS = ("id", "task_id", "queue_id", "epoch", "attempt_number", "instance_id",
                   "reserved_at_ms", *ATTEMPT_MUTABLE)

_TASK_CAS = tasks.update().where(
    and_(tasks.c.id == bindparam("_id"), tasks.c.state == bindparam("_state"),
         tasks.c.epoch == bindparam("_epoch"))
)
_ATTEMPT_CAS = attempts.update().where(
    and_(attempts.c.id == bindparam("_id"), attempts.c.state == bindparam("_state"))
)


def task_rec(row: Mapping[Any, Any]) -> TaskRec:
    return TaskRec(
        id=row["id"],
        queue_id=row["queue_id"],
        state=TaskState(row["state"]),
        idempotency=Idempotency(row["idempotency"]),
        max_attempts=row["max_attempts"],
        backoff=Backoff(row["backoff_initial_ms"], row["backoff_max_ms"],
                        row["backoff_multiplier"], row["backoff_jitter"]),
        attempt_timeout_ms=row["attempt_timeout_ms"],
        lease_ttl_ms=row["lease_ttl_ms"],
        deadline_at_ms=row["deadline_at_ms"],
        available_at_ms=row["available_at_ms"],
        epoch=row["epoch"],
        attempts_started=row["attempts_started"],
        uncertain=bool(row["uncertain"]),
        cancel_requested=bool(row["cancel_requested"]),
        current_attempt_id=row["current_attempt_id"],
        result=row["result"],
        failure_code=row["failure_code"],
        failure_details=row["failure_details"],
        updated_at_ms=row["updated_at_ms"],
    )


def attempt_rec(row: Mapping[Any, Any]) -> AttemptRec:
    rec = AttemptRec(
        id=row["id"], task_id=row["task_id"], queue_id=row["queue_id"], epoch=row["epoch"],
        attempt_number=row["attempt_number"], state=AttemptState(row["state"]),
        instance_id=row["instance_id"], reserved_at_ms=row["reserved_at_ms"],
    )
    for name in ATTEMPT_MUTABLE[1:]:
        setattr(rec, name, row[name])
    if rec.outcome is not None:
        rec.outcome = Outcome(rec.outcome)
    if rec.retryable is not None:
        rec.retryable = bool(rec.retryable)
    return rec


def _db_value(value: Any) -> Any:
    # StrEnum values are str already; bools and ints pass through unchanged.
    return value


def attempt_row(rec: AttemptRec) -> dict[str, Any]:
    return {name: _db_value(getattr(rec, name)) for name in ATTEMPT_COLUMNS}


class UnitOfWork:
    """Records and pending writes of one transaction (see the module docstring)."""

    def __init__(self, conn: Connection, now_ms: int) -> None:
        self.conn = conn
        self.now_ms = now_ms
        self.tasks: dict[str, TaskRec] = {}
        self.attempts: dict[str, AttemptRec] = {}
        self._task_snap: dict[str, tuple[Any, ...]] = {}
        self._attempt_snap: dict[str, tuple[Any, ...]] = {}
        self.new_attempts: list[AttemptRec] = []
        self.audit_rows: list[dict[str, Any]] = []
        self.evidence_rows: list[dict[str, Any]] = []
        self.receipt_rows: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ loading

    def adopt_task_row(self, row: Mapping[Any, Any]) -> TaskRec:
        existing = self.tasks.get(row["id"])
        if existing is not None:
            return existing
        rec = task_rec(row)
        self.tasks[rec.id] = rec
        self._task_snap[rec.id] = tuple(getattr(rec, f) for f in TASK_MUTABLE)
        return rec

    def adopt_attempt_row(self, row: Mapping[Any, Any]) -> AttemptRec:
        existing = self.attempts.get(row["id"])
        if existing is not None:
            return existing
        rec = attempt_rec(row)
        self.attempts[rec.id] = rec
        self._attempt_snap[rec.id] = tuple(getattr(rec, f) for f in ATTEMPT_MUTABLE)
        return rec

    def load_tasks(self, ids: Iterable[str]) -> None:
        wanted = [i for i in dict.fromkeys(ids) if i not in self.tasks]
        for chunk in _chunks(wanted):
            stmt = select(tasks).where(tasks.c.id.in_(chunk)).with_for_update()
            for row in self.conn.execute(stmt).mappings():
                self.adopt_task_row(row)

    def load_attempts(self, ids: Iterable[str]) -> None:
        wanted = [i for i in dict.fromkeys(ids) if i not in self.attempts]
        for chunk in _chunks(wanted):
            stmt = select(attempts).where(attempts.c.id.in_(chunk)).with_for_update()
            for row in self.conn.execute(stmt).mappings():
                self.adopt_attempt_row(row)

    # ------------------------------------------------------------------ recording

    def add_attempt(self, rec: AttemptRec) -> None:
        self.attempts[rec.id] = rec
        self.new_attempts.append(rec)

    def audit(self, task_id: str, attempt_id: str | None, actor: str, kind: str,
              from_state: str | None, to_state: str | None,
              detail: Mapping[Any, Any] | None = None) -> None:
        self.audit_rows.append({
            "task_id": task_id, "attempt_id": attempt_id, "at_ms": self.now_ms,
            "actor": actor, "kind": kind, "from_state": from_state, "to_state": to_state,
            "detail": None if detail is None else orjson.dumps(detail).decode(),
        })

    # ------------------------------------------------------------------ writing

    def flush(self) -> None:
        """Write everything; raise UNAVAILABLE (retryable) if a compare-and-set lost a race."""
        new_ids = {a.id for a in self.new_attempts}
        if self.new_attempts:
            self.conn.execute(attempts.insert(), [attempt_row(a) for a in self.new_attempts])
        self._flush_changed(self.tasks, self._task_snap, TASK_MUTABLE, _TASK_CAS, "task",
                            skip=set())
        self._flush_changed(self.attempts, self._attempt_snap, ATTEMPT_MUTABLE, _ATTEMPT_CAS,
                            "attempt", skip=new_ids)
        if self.evidence_rows:
            self.conn.execute(evidence.insert(), self.evidence_rows)
        if self.receipt_rows:
            self.conn.execute(receipts.insert(), self.receipt_rows)
        if self.audit_rows:
            self.conn.execute(audit.insert(), self.audit_rows)

    def _flush_changed(self, recs: Mapping[Any, Any], snaps: Mapping[str, tuple[Any, ...]],
                       fields: Sequence[str], stmt: Any, what: str, skip: set[str]) -> None:
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for rec_id, rec in recs.items():
            if rec_id in skip:
                continue
            before = snaps[rec_id]
            changed = tuple(
                f for f, old in zip(fields, before, strict=True) if getattr(rec, f) != old
            )
            if not changed:
                continue
            params = {f: getattr(rec, f) for f in changed}
            params["_id"] = rec_id
            params["_state"] = before[0]  # "state" is the first mutable field of both
            if what == "task":
                params["_epoch"] = before[fields.index("epoch")]
            groups.setdefault(changed, []).append(params)
        for group in groups.values():
            result = self.conn.execute(stmt, group)
            if result.rowcount != len(group):
                raise OrbitError(
                    ErrorCode.UNAVAILABLE,
                    f"a concurrent writer changed a {what}; the whole request was rolled back",
                    retryable=True,
                )


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), IN_CHUNK):
        yield items[start:start + IN_CHUNK]
