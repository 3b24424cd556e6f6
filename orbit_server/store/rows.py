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

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection, and_, bindparam

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import AttemptState, Idempotency, Outcome, TaskState

from ..domain import AttemptRec, Backoff, TaskRec
from . import batched_cas, queries
from .prepared import Prepared, prepared_select
from .queries import ATTEMPTS_BY_ID, ATTEMPTS_WITH_TASKS_BY_ID, TASKS_BY_ID
from .tables import attempts, audit, evidence, receipts, tasks

# Chunk IN (...) lists: portable and well under every engine's parameter limit.
IN_CHUNK = 500

TASK_MUTABLE = (
    "state", "max_attempts", "deadline_at_ms", "available_at_ms", "epoch", "attempts_started",
    "uncertain", "cancel_requested", "current_attempt_id", "result", "failure_code",
    "failure_details", "updated_at_ms", "finished_at_ms", "start_by_at_ms",
)
ATTEMPT_MUTABLE = (
    "state", "child_pid", "started_at_ms", "finished_at_ms", "lease_expires_at_ms",
    "attempt_deadline_at_ms", "renewals", "outcome", "code", "retryable", "details",
    "exit_code", "signal", "cpu_ms", "peak_rss_bytes", "kill_reason", "decision",
    "decision_rule", "killed_at_ms", "reap_ms", "ended_by",
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
# The same compare-and-set conditions for store.batched_cas: column -> parameter.
_CAS_TABLES = {"task": ("tasks", {"state": "_state", "epoch": "_epoch"}),
               "attempt": ("attempts", {"state": "_state"})}
_TASK_SNAP = operator.attrgetter(*TASK_MUTABLE)
_ATTEMPT_SNAP = operator.attrgetter(*ATTEMPT_MUTABLE)
_TASK_EPOCH_AT = TASK_MUTABLE.index("epoch")
TASK_COLUMN_NAMES = tuple(c.name for c in tasks.c)
TASK_REC_COLUMN_NAMES = tuple(c.name for c in queries.TASK_REC_COLUMNS)
ATTEMPT_COLUMN_NAMES = tuple(c.name for c in attempts.c)
AUDIT_KEYS = ("task_id", "attempt_id", "at_ms", "actor", "kind", "from_state", "to_state",
              "detail")
INSERT_ATTEMPT = Prepared(attempts.insert(), ATTEMPT_COLUMNS)
INSERT_AUDIT = Prepared(audit.insert(), AUDIT_KEYS)
INSERT_EVIDENCE = Prepared(evidence.insert(), [c.name for c in evidence.c])
INSERT_RECEIPT = Prepared(receipts.insert(), [c.name for c in receipts.c])
INSERT_TASK = Prepared(tasks.insert(), TASK_COLUMN_NAMES)
# One compiled CAS update per set of changed columns, made on first use.
_cas_cache: dict[tuple[str, tuple[str, ...]], Prepared] = {}


def _cas(what: str, changed: tuple[str, ...]) -> Prepared:
    key = (what, changed)
    prepared = _cas_cache.get(key)
    if prepared is None:
        stmt = _TASK_CAS if what == "task" else _ATTEMPT_CAS
        prepared = _cas_cache[key] = Prepared(stmt, changed)
    return prepared


# Enum lookups by value through a dict: calling the enum class costs several times more.
_TASK_STATE = {s.value: s for s in TaskState}
_ATTEMPT_STATE = {s.value: s for s in AttemptState}
_IDEMPOTENCY = {s.value: s for s in Idempotency}
_OUTCOME = {s.value: s for s in Outcome}


def task_rec(row: Mapping[Any, Any]) -> TaskRec:
    """A record from a task row; ``result`` and ``failure_details`` may be absent (loads for
    a state change skip the big JSON columns; no rule reads them, only writes)."""
    return TaskRec(
        id=row["id"],
        queue_id=row["queue_id"],
        state=_TASK_STATE[row["state"]],
        idempotency=_IDEMPOTENCY[row["idempotency"]],
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
        result=row.get("result"),
        failure_code=row["failure_code"],
        failure_details=row.get("failure_details"),
        updated_at_ms=row["updated_at_ms"],
        finished_at_ms=row["finished_at_ms"],
        start_by_at_ms=row["start_by_at_ms"],
    )


def attempt_rec(row: Mapping[Any, Any]) -> AttemptRec:
    rec = AttemptRec(
        id=row["id"], task_id=row["task_id"], queue_id=row["queue_id"], epoch=row["epoch"],
        attempt_number=row["attempt_number"], state=_ATTEMPT_STATE[row["state"]],
        instance_id=row["instance_id"], reserved_at_ms=row["reserved_at_ms"],
    )
    for name in ATTEMPT_MUTABLE[1:]:
        setattr(rec, name, row[name])
    if rec.outcome is not None:
        rec.outcome = _OUTCOME[rec.outcome]
    if rec.retryable is not None:
        rec.retryable = bool(rec.retryable)
    return rec


_ATTEMPT_ROW = operator.attrgetter(*ATTEMPT_COLUMNS)


def attempt_row(rec: AttemptRec) -> dict[str, Any]:
    # StrEnum values are str already, so records go to the driver as they are.
    return dict(zip(ATTEMPT_COLUMNS, _ATTEMPT_ROW(rec), strict=True))


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
        self._task_snap[rec.id] = _TASK_SNAP(rec)
        return rec

    def adopt_attempt_row(self, row: Mapping[Any, Any]) -> AttemptRec:
        existing = self.attempts.get(row["id"])
        if existing is not None:
            return existing
        rec = attempt_rec(row)
        self.attempts[rec.id] = rec
        self._attempt_snap[rec.id] = _ATTEMPT_SNAP(rec)
        return rec

    def load_tasks(self, ids: Iterable[str]) -> None:
        wanted = [i for i in dict.fromkeys(ids) if i not in self.tasks]
        for chunk in _chunks(wanted):
            for row in prepared_select(TASKS_BY_ID).all(self.conn, {"ids": list(chunk)}):
                self.adopt_task_row(dict(zip(TASK_REC_COLUMN_NAMES, row, strict=True)))

    def load_attempts_and_tasks(self, ids: Iterable[str]) -> None:
        """Load attempts and their tasks with one joined SELECT."""
        wanted = [i for i in dict.fromkeys(ids) if i not in self.attempts]
        split = len(ATTEMPT_COLUMN_NAMES)
        for chunk in _chunks(wanted):
            for row in prepared_select(ATTEMPTS_WITH_TASKS_BY_ID).all(self.conn,
                                                                      {"ids": list(chunk)}):
                self.adopt_attempt_row(dict(zip(ATTEMPT_COLUMN_NAMES, row[:split], strict=True)))
                self.adopt_task_row(dict(zip(TASK_REC_COLUMN_NAMES, row[split:], strict=True)))

    def load_attempts(self, ids: Iterable[str]) -> None:
        wanted = [i for i in dict.fromkeys(ids) if i not in self.attempts]
        for chunk in _chunks(wanted):
            for row in prepared_select(ATTEMPTS_BY_ID).all(self.conn, {"ids": list(chunk)}):
                self.adopt_attempt_row(dict(zip(ATTEMPT_COLUMN_NAMES, row, strict=True)))

    def moved_from_pending(self) -> list[str]:
        """Tasks loaded PENDING that this transaction moved on: until ``flush`` the database
        still shows them PENDING (a second claim in the same transaction must skip them)."""
        pending = TaskState.PENDING.value
        return [tid for tid, rec in self.tasks.items()
                if self._task_snap[tid][0] == pending and rec.state is not TaskState.PENDING]

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
        conn = self.conn
        new_ids = {a.id for a in self.new_attempts}
        if self.new_attempts:
            INSERT_ATTEMPT.run(conn, [attempt_row(a) for a in self.new_attempts])
        for rec in self.tasks.values():
            if rec.finished_at_ms is None and rec.state.terminal:
                rec.finished_at_ms = self.now_ms  # retention and listing count from here
        self._flush_changed(self.tasks, self._task_snap, _TASK_SNAP, TASK_MUTABLE, "task",
                            skip=set())
        self._flush_changed(self.attempts, self._attempt_snap, _ATTEMPT_SNAP, ATTEMPT_MUTABLE,
                            "attempt", skip=new_ids)
        INSERT_EVIDENCE.run(conn, self.evidence_rows)
        INSERT_RECEIPT.run(conn, self.receipt_rows)
        INSERT_AUDIT.run(conn, self.audit_rows)

    def _flush_changed(self, recs: Mapping[str, Any], snaps: Mapping[str, tuple[Any, ...]],
                       snap: Any, fields: Sequence[str], what: str, skip: set[str]) -> None:
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for rec_id, rec in recs.items():
            if rec_id in skip:
                continue
            before = snaps[rec_id]
            after = snap(rec)
            if after == before:
                continue
            changed = tuple(
                f for f, old, new in zip(fields, before, after, strict=True) if new != old
            )
            params = {f: getattr(rec, f) for f in changed}
            params["_id"] = rec_id
            params["_state"] = before[0]  # "state" is the first mutable field of both
            if what == "task":
                params["_epoch"] = before[_TASK_EPOCH_AT]
            groups.setdefault(changed, []).append(params)
        for changed, group in groups.items():
            if batched_cas.worth_batching(self.conn, len(group)):  # MySQL: one round trip
                table, conditions = _CAS_TABLES[what]
                matched = batched_cas.cas_update_many(self.conn, table, changed, conditions,
                                                      group)
            else:
                matched = _cas(what, changed).run(self.conn, group)
            if matched != len(group):
                raise OrbitError(
                    ErrorCode.UNAVAILABLE,
                    f"a concurrent writer changed a {what}; the whole request was rolled back",
                    retryable=True,
                )


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), IN_CHUNK):
        yield items[start:start + IN_CHUNK]
