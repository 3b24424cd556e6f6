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
from orbit_wire.model import IDEMPOTENCY_OF, AttemptState, Outcome, TaskState

from ..domain import AttemptRec, Backoff, TaskRec
from . import batched_cas, queries, workflow_rows
from .prepared import Prepared, SparseInsert, prepared_select
from .queries import ATTEMPTS_BY_ID, ATTEMPTS_WITH_TASKS_BY_ID, TASKS_BY_ID
from .tables import attempts, audit, evidence, receipts, tasks

# Chunk IN (...) lists: portable and well under every engine's parameter limit.
IN_CHUNK = 500

TASK_MUTABLE = (
    "state", "max_attempts", "deadline_at_ms", "available_at_ms", "epoch", "attempts_started",
    "uncertain", "cancel_requested", "current_attempt_id", "result", "failure_code",
    "failure_details", "updated_at_ms", "finished_at_ms", "start_by_at_ms", "checkpoint",
    "parents_json",
)
ATTEMPT_MUTABLE = (
    "state", "child_pid", "started_at_ms", "finished_at_ms", "lease_expires_at_ms",
    "attempt_deadline_at_ms", "renewals", "outcome", "code", "retryable", "details",
    "exit_code", "signal", "cpu_ms", "peak_rss_bytes", "kill_reason", "decision",
    "decision_rule", "killed_at_ms", "reap_ms", "ended_by", "grant_connection",
    "progress_fraction", "progress_json", "progress_at_ms",
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
# A new attempt has none of its outcome and kill facts; a new task no outputs and, mostly,
# no operation key or start bound.
INSERT_ATTEMPT = SparseInsert(attempts, ATTEMPT_COLUMNS,
                              [c for c in ATTEMPT_MUTABLE if attempts.c[c].nullable])
INSERT_AUDIT = Prepared(audit.insert(), AUDIT_KEYS)
INSERT_EVIDENCE = Prepared(evidence.insert(), [c.name for c in evidence.c])
INSERT_RECEIPT = Prepared(receipts.insert(), [c.name for c in receipts.c if c.name != "seq"])
# A new task has run no retry yet: its run_* columns stay NULL (left out of the insert).
INSERT_TASK = SparseInsert(tasks, [c for c in TASK_COLUMN_NAMES if not c.startswith("run_")], [
    "operation_key", "result", "failure_code", "failure_details", "current_attempt_id",
    "finished_at_ms", "schedule_to_start_ms", "start_by_at_ms", "spec_digest",
    "policy_source", "progress_timeout_ms", "checkpoint", "requires", "requires_key",
    "limit_keys", "workflow_id", "node_key", "parents_left", "parents_json", "fair_turn"])
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
_OUTCOME = {s.value: s for s in Outcome}


# The task columns a TaskRec is made of, in the order _task_rec_of reads them.
_TASK_REC_SOURCE = (
    "id", "queue_id", "state", "idempotency", "max_attempts", "backoff_initial_ms",
    "backoff_max_ms", "backoff_multiplier", "backoff_jitter", "attempt_timeout_ms",
    "lease_ttl_ms", "deadline_at_ms", "available_at_ms", "epoch", "attempts_started",
    "uncertain", "cancel_requested", "current_attempt_id", "failure_code", "updated_at_ms",
    "finished_at_ms", "start_by_at_ms", "workflow_id",
)
_TASK_ARGS_BY_NAME = operator.itemgetter(*_TASK_REC_SOURCE)
_TASK_ARGS_BY_POSITION = operator.itemgetter(*(TASK_REC_COLUMN_NAMES.index(c)
                                               for c in _TASK_REC_SOURCE))


def task_rec(row: Mapping[Any, Any]) -> TaskRec:
    """A record from a task row; ``result`` and ``failure_details`` may be absent (loads for
    a state change skip the big JSON columns; no rule reads them, only writes)."""
    return _task_rec_of(_TASK_ARGS_BY_NAME(row), row.get("result"), row.get("failure_details"))


def _task_rec_of(v: Sequence[Any], result: str | None = None,
                 failure_details: str | None = None) -> TaskRec:
    """``v``: the columns of _TASK_REC_SOURCE, in its order."""
    return TaskRec(
        id=v[0], queue_id=v[1], state=_TASK_STATE[v[2]], idempotency=IDEMPOTENCY_OF[v[3]],
        max_attempts=v[4], backoff=Backoff(v[5], v[6], v[7], v[8]),
        attempt_timeout_ms=v[9], lease_ttl_ms=v[10], deadline_at_ms=v[11],
        available_at_ms=v[12], epoch=v[13], attempts_started=v[14], uncertain=bool(v[15]),
        cancel_requested=bool(v[16]), current_attempt_id=v[17], result=result,
        failure_code=v[18], failure_details=failure_details, updated_at_ms=v[19],
        finished_at_ms=v[20], start_by_at_ms=v[21], workflow_id=v[22],
    )


# An AttemptRec has a field per attempts column: its constructor's arguments, in order, are
# taken from a row by name, or from a SELECT of every column (table order) by position.
_ATTEMPT_FIELDS = AttemptRec.__struct_fields__
_ATTEMPT_ARGS_BY_NAME = operator.itemgetter(*_ATTEMPT_FIELDS)
_ATTEMPT_ARGS_BY_POSITION = operator.itemgetter(*(ATTEMPT_COLUMN_NAMES.index(f)
                                                  for f in _ATTEMPT_FIELDS))


def attempt_rec(row: Mapping[Any, Any]) -> AttemptRec:
    return _attempt_rec_of(_ATTEMPT_ARGS_BY_NAME(row))


def _attempt_rec_of(args: Sequence[Any]) -> AttemptRec:
    rec = AttemptRec(*args)
    rec.state = _ATTEMPT_STATE[rec.state]
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
        # Workflow nodes whose end this unit of work has already passed on to their children.
        self.workflow_seen: set[str] = set()

    # ------------------------------------------------------------------ loading

    def adopt_task_row(self, row: Mapping[Any, Any]) -> TaskRec:
        existing = self.tasks.get(row["id"])
        return existing if existing is not None else self._adopt_task(task_rec(row))

    def _adopt_task(self, rec: TaskRec) -> TaskRec:
        self.tasks[rec.id] = rec
        self._task_snap[rec.id] = _TASK_SNAP(rec)
        return rec

    def _adopt_task_values(self, values: Sequence[Any]) -> None:
        """A task row selected as TASK_REC_COLUMN_NAMES (the loads below)."""
        if values[0] not in self.tasks:
            self._adopt_task(_task_rec_of(_TASK_ARGS_BY_POSITION(values)))

    def adopt_attempt_row(self, row: Mapping[Any, Any]) -> AttemptRec:
        existing = self.attempts.get(row["id"])
        return existing if existing is not None else self._adopt_attempt(attempt_rec(row))

    def _adopt_attempt(self, rec: AttemptRec) -> AttemptRec:
        self.attempts[rec.id] = rec
        self._attempt_snap[rec.id] = _ATTEMPT_SNAP(rec)
        return rec

    def _adopt_attempt_values(self, values: Sequence[Any]) -> None:
        """An attempt row selected as every column in table order (the loads below)."""
        if values[0] not in self.attempts:
            self._adopt_attempt(_attempt_rec_of(_ATTEMPT_ARGS_BY_POSITION(values)))

    def load_tasks(self, ids: Iterable[str]) -> None:
        wanted = [i for i in dict.fromkeys(ids) if i not in self.tasks]
        for chunk in _chunks(wanted):
            for row in prepared_select(TASKS_BY_ID).all(self.conn, {"ids": list(chunk)}):
                self._adopt_task_values(row)

    def load_attempts_and_tasks(self, ids: Iterable[str]) -> None:
        """Load attempts and their tasks with one joined SELECT."""
        wanted = [i for i in dict.fromkeys(ids) if i not in self.attempts]
        split = len(ATTEMPT_COLUMN_NAMES)
        for chunk in _chunks(wanted):
            for row in prepared_select(ATTEMPTS_WITH_TASKS_BY_ID).all(self.conn,
                                                                      {"ids": list(chunk)}):
                self._adopt_attempt_values(row[:split])
                self._adopt_task_values(row[split:])

    def load_attempts(self, ids: Iterable[str]) -> None:
        wanted = [i for i in dict.fromkeys(ids) if i not in self.attempts]
        for chunk in _chunks(wanted):
            for row in prepared_select(ATTEMPTS_BY_ID).all(self.conn, {"ids": list(chunk)}):
                self._adopt_attempt_values(row)

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
        """Write everything; raise UNAVAILABLE (retryable) if a compare-and-set lost a race.
        Receipts go first: an op applied before fails their unique key before anything
        else is written (``WorkerService.apply_ops`` then answers it from its receipt)."""
        conn = self.conn
        INSERT_RECEIPT.run(conn, self.receipt_rows)
        new_ids = {a.id for a in self.new_attempts}
        if self.new_attempts:
            INSERT_ATTEMPT.run(conn, [attempt_row(a) for a in self.new_attempts])
        if any(rec.workflow_id is not None for rec in self.tasks.values()):
            # A workflow node that ended moves its children in this transaction.
            workflow_rows.pass_on_ends(self)
        for rec in self.tasks.values():
            if rec.finished_at_ms is None and rec.state.terminal:
                rec.finished_at_ms = self.now_ms  # retention and listing count from here
        self._flush_changed(self.tasks, self._task_snap, _TASK_SNAP, TASK_MUTABLE, "task",
                            skip=set())
        self._flush_changed(self.attempts, self._attempt_snap, _ATTEMPT_SNAP, ATTEMPT_MUTABLE,
                            "attempt", skip=new_ids)
        INSERT_EVIDENCE.run(conn, self.evidence_rows)
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
            if what == "task" and rec.state is TaskState.PENDING and (
                    "state" in changed or "available_at_ms" in changed):
                # Back to waiting (a retry, a release, a new start instant): its fair turn,
                # if any, is given again when it is ready (store.fairness).
                changed += ("fair_turn",)
                params["fair_turn"] = None
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
