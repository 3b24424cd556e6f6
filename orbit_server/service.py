"""Use cases of the Orbit server. Each public method is exactly one transaction.

The adapters call every method on ONE store thread (SQLite has one writer), so a method is
plain synchronous code on a sync SQLAlchemy engine. The rules come from ``domain``; this
module loads rows, calls the rules, and writes back with compare-and-set through
``store.rows.UnitOfWork``. Hot paths (``submit``, ``reserve``, ``apply_ops``) use a handful
of set-based statements per call, never one SELECT per item.

After a call the adapters act on the returned ``Effects`` (wake waiters, run a dispatch pass,
push ``cancel`` frames, re-arm the reaper).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.exc import IntegrityError

from orbit_wire.errors import AuthError, ErrorCode, OrbitError, ProtocolError
from orbit_wire.frames import (
    ClaimOp,
    DrainOp,
    FinishOp,
    Hello,
    Op,
    OpResult,
    RenewOp,
    Reservation,
    ResumeEntry,
    ResumeOp,
    StartOp,
)
from orbit_wire.ids import is_id, new_id, new_secret
from orbit_wire.jsonvalue import encode_value
from orbit_wire.limits import (
    MAX_NAME_LEN,
    MAX_RESERVATIONS_PER_FRAME,
    MAX_SUBMIT_BATCH,
    PROTOCOL_VERSION,
)
from orbit_wire.model import (
    AttemptState,
    Capability,
    Disposition,
    Idempotency,
    Outcome,
    Role,
    TaskState,
)

from . import domain
from .auth import (
    Principal,
    hash_secret,
    parse_bearer,
    require_queue,
    require_role,
    secret_matches,
    unauthenticated,
)
from .config import ServerConfig
from .store import claims, queries
from .store.retry import transactional
from .store.rows import INSERT_AUDIT, INSERT_TASK, UnitOfWork
from .store.tables import attempts, audit, credentials, evidence, instances, queues, tasks
from .store.views import attempt_view, audit_view, evidence_view, queue_view, task_view

__all__ = ["NO_CLAIMS", "ClaimRoom", "Effects", "Service", "WorkerBinding"]

SERVER = "server"
_DONE = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED,
                   TaskState.NEEDS_REVIEW})
_PRODUCERS = (Role.ADMIN, Role.PRODUCER)
_AUTH_CACHE_MAX = 10_000


@dataclass(frozen=True)
class WorkerBinding:
    """A worker connection's verified identity (the answer to ``hello``)."""

    instance_id: str
    credential_id: str
    queue_id: str
    capabilities: tuple[Capability, ...]

    @property
    def actor(self) -> str:
        return f"worker:{self.instance_id}"


@dataclass(frozen=True, slots=True)
class ClaimRoom:
    """What a request's ``claim`` ops may do on its connection (the dispatcher decides)."""

    allowed: bool  # False while the session drains or closes: a claim answers nothing
    credit_room: int  # connection credit may still grow by this much (2 x capacity bound)


NO_CLAIMS = ClaimRoom(False, 0)


@dataclass
class Effects:
    """What the adapters must do after a transaction."""

    terminal_tasks: list[str] = field(default_factory=list)  # wake long-poll waiters
    # Task views read in the same transaction for waited-on terminal tasks (apply_ops with
    # ``watched``): a woken long poll answers with it instead of reading the task again.
    terminal_views: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready_queues: set[str] = field(default_factory=set)  # run a dispatch pass
    cancels: list[tuple[str, str, int]] = field(default_factory=list)  # (instance, attempt, epoch)
    next_due_ms: int | None = None  # earliest future instant worth looking again

    def due(self, at_ms: int | None) -> None:
        if at_ms is not None and (self.next_due_ms is None or at_ms < self.next_due_ms):
            self.next_due_ms = at_ms


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class Service:
    """The use cases; see docs/server-design.md for the contract with the adapters."""

    def __init__(self, engine: Engine, config: ServerConfig, clock: Callable[[], int],
                 rng: random.Random) -> None:
        self.engine = engine
        self.config = config
        self.clock = clock
        self.rng = rng
        self._auth_cache: dict[tuple[str, str], tuple[Principal, int]] = {}
        # Retries scheduled in the future, by (available_at_ms, queue_id): reap() turns the
        # due ones into ready queues so the dispatcher looks again without polling the table.
        self._wakeups: list[tuple[int, str]] = []
        self._wakeups_loaded = False

    # ================================================================== transactions

    @contextmanager
    def _write(self) -> Any:
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Any:
        with self.engine.connect() as conn:
            conn.execution_options(orbit_read_only=True)
            with conn.begin():
                yield conn

    # ================================================================== auth and admin

    def authenticate(self, bearer: str) -> Principal:
        """Verify ``<credential_id>.<secret>``; raise AuthError(UNAUTHENTICATED)."""
        cid, secret = parse_bearer(bearer)
        key = (cid, hash_secret(secret))
        now = self.clock()
        cached = self._auth_cache.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        with self._read() as conn:
            stmt = select(credentials).where(credentials.c.id == cid)
            row = conn.execute(stmt).mappings().first()
        principal = self._principal(row, secret)
        if len(self._auth_cache) >= _AUTH_CACHE_MAX:
            self._auth_cache.clear()
        self._auth_cache[key] = (principal, now + self.config.auth_cache_ms)
        return principal

    @staticmethod
    def _principal(row: Mapping[Any, Any] | None, secret: str) -> Principal:
        if row is None or row["revoked_at_ms"] is not None:
            raise unauthenticated()
        if not secret_matches(secret, row["secret_hash"]):
            raise unauthenticated()
        return Principal(row["id"], Role(row["role"]), frozenset(orjson.loads(row["queues"])))

    def create_queue(self, p: Principal, name: str | None) -> dict[str, Any]:
        require_role(p, (Role.ADMIN,))
        _check_name(name)
        now = self.clock()
        row = {"id": new_id(now), "name": name, "created_at_ms": now}
        with self._write() as conn:
            conn.execute(queues.insert(), row)
        return queue_view(row)

    def create_credential(self, p: Principal, role: str, queues_: list[str],
                          name: str | None) -> dict[str, Any]:
        """Admin only. The answer carries the secret; it is never shown again."""
        require_role(p, (Role.ADMIN,))
        return self._create_credential(role, queues_, name)

    def bootstrap_admin(self, name: str | None) -> dict[str, Any]:
        """Create an admin credential without a principal (the CLI's bootstrap-admin)."""
        return self._create_credential(Role.ADMIN.value, [], name)

    def _create_credential(self, role: str, queue_ids: Sequence[str],
                           name: str | None) -> dict[str, Any]:
        try:
            role_ = Role(role)
        except ValueError:
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             "role must be one of admin, producer, worker") from None
        _check_name(name)
        if not isinstance(queue_ids, (list, tuple)) or not all(is_id(q) for q in queue_ids):
            raise OrbitError(ErrorCode.BAD_REQUEST, "queues must be a list of queue IDs")
        wanted = list(dict.fromkeys(queue_ids))
        if role_ is not Role.ADMIN and not wanted:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"a {role_.value} credential needs a queue")
        now = self.clock()
        secret = new_secret()
        row = {
            "id": new_id(now), "secret_hash": hash_secret(secret), "role": role_.value,
            "queues": orjson.dumps(wanted).decode(), "name": name, "created_at_ms": now,
            "revoked_at_ms": None,
        }
        with self._write() as conn:
            if wanted:
                found = set(conn.scalars(select(queues.c.id).where(queues.c.id.in_(wanted))))
                missing = [q for q in wanted if q not in found]
                if missing:
                    raise OrbitError(ErrorCode.NOT_FOUND, f"queue {missing[0]} does not exist")
            conn.execute(credentials.insert(), row)
        return {"credential_id": row["id"], "secret": secret, "role": role_.value,
                "queues": wanted, "name": name}

    def revoke_credential(self, p: Principal, credential_id: str) -> dict[str, Any]:
        require_role(p, (Role.ADMIN,))
        if not is_id(credential_id):
            raise OrbitError(ErrorCode.NOT_FOUND, "no such credential")
        now = self.clock()
        with self._write() as conn:
            found = conn.execute(
                select(credentials.c.revoked_at_ms).where(credentials.c.id == credential_id)
            ).first()
            if found is None:
                raise OrbitError(ErrorCode.NOT_FOUND, "no such credential")
            if found[0] is None:
                conn.execute(credentials.update().where(credentials.c.id == credential_id)
                             .values(revoked_at_ms=now))
        for key in [k for k in self._auth_cache if k[0] == credential_id]:
            del self._auth_cache[key]
        return {"credential_id": credential_id, "revoked": True}

    # ================================================================== producer / operator

    def submit(self, p: Principal, queue_id: str, specs: list[object]
               ) -> tuple[list[tuple[dict[str, Any], bool]], Effects]:
        """Create tasks, all or nothing. Returns (Task view, created) per spec, in order; a
        spec whose operation key already exists in the queue answers the existing task."""
        made, effects, _ = self._submit(p, queue_id, specs, None, 0)
        return made, effects

    def submit_and_reserve(self, p: Principal, queue_id: str, specs: list[object],
                           b: WorkerBinding, n: int
                           ) -> tuple[list[tuple[dict[str, Any], bool]], Effects,
                                      list[Reservation]]:
        """``submit``, then in the SAME transaction ``reserve(b, n)`` for a worker of this
        queue that is waiting with credit: the new task reaches it without a separate
        dispatch transaction. ``effects.ready_queues`` is left empty when that worker took
        every task this call created (no other session needs a hint for them)."""
        return self._submit(p, queue_id, specs, b, max(0, min(n, MAX_RESERVATIONS_PER_FRAME)))

    def _submit(self, p: Principal, queue_id: str, specs: list[object],
                b: WorkerBinding | None, n: int
                ) -> tuple[list[tuple[dict[str, Any], bool]], Effects, list[Reservation]]:
        require_role(p, _PRODUCERS)
        require_queue(p, queue_id)
        if not isinstance(specs, list) or not specs:
            raise OrbitError(ErrorCode.BAD_REQUEST, "at least one task is required")
        if len(specs) > MAX_SUBMIT_BATCH:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"at most {MAX_SUBMIT_BATCH} tasks at once")
        parsed = [domain.parse_task_spec(s, "task" if len(specs) == 1 else f"tasks[{i}]")
                  for i, s in enumerate(specs)]
        now = self.clock()
        out: list[tuple[dict[str, Any], bool]] = []
        new_rows: list[dict[str, Any]] = []
        reservations: list[Reservation] = []
        try:
            with self._write() as conn:
                if conn.execute(select(queues.c.id).where(queues.c.id == queue_id)).first() is None:
                    raise OrbitError(ErrorCode.NOT_FOUND, f"queue {queue_id} does not exist")
                keyed = _existing_by_key(conn, queue_id,
                                         [s.operation_key for s in parsed if s.operation_key])
                for spec in parsed:
                    if spec.operation_key is not None and spec.operation_key in keyed:
                        out.append((task_view(keyed[spec.operation_key]), False))
                        continue
                    row = _new_task_row(queue_id, spec, now)
                    new_rows.append(row)
                    if spec.operation_key is not None:
                        keyed[spec.operation_key] = row
                    out.append((task_view(row), True))
                if new_rows:
                    INSERT_TASK.run(conn, new_rows)
                    actor = p.actor
                    INSERT_AUDIT.run(conn, [
                        {"task_id": r["id"], "attempt_id": None, "at_ms": now, "actor": actor,
                         "kind": "task_submitted", "from_state": None,
                         "to_state": TaskState.PENDING.value, "detail": None}
                        for r in new_rows
                    ])
                if new_rows and b is not None and n > 0 and b.queue_id == queue_id:
                    uow = UnitOfWork(conn, now)
                    reservations = [_reservation(*c) for c in self._reserve_in(uow, b, n)]
                    uow.flush()
        except IntegrityError:
            # Another replica inserted the same operation key first; a retry finds it.
            raise OrbitError(ErrorCode.UNAVAILABLE, "operation key raced; retry",
                             retryable=True) from None
        effects = Effects()
        claimed = {r.task_id for r in reservations}
        if any(row["id"] not in claimed for row in new_rows):
            effects.ready_queues.add(queue_id)
        return out, effects, reservations

    def get_task(self, p: Principal, task_id: str) -> dict[str, Any]:
        with self._read() as conn:
            return task_view(self._task_row(conn, p, task_id))

    def _task_row(self, conn: Connection, p: Principal, task_id: str) -> Mapping[Any, Any]:
        require_role(p, _PRODUCERS)
        row = None
        if is_id(task_id):
            row = conn.execute(queries.TASK_BY_ID, {"id": task_id}).mappings().first()
        if row is None:
            raise OrbitError(ErrorCode.NOT_FOUND, f"task {task_id} does not exist")
        require_queue(p, row["queue_id"])
        return row

    def list_attempts(self, p: Principal, task_id: str) -> dict[str, Any]:
        with self._read() as conn:
            self._task_row(conn, p, task_id)
            a_rows = conn.execute(
                select(attempts).where(attempts.c.task_id == task_id)
                .order_by(attempts.c.epoch)
            ).mappings()
            att = [attempt_view(r) for r in a_rows]
            e_rows = conn.execute(
                select(evidence).where(evidence.c.task_id == task_id)
                .order_by(evidence.c.received_at_ms, evidence.c.id)
            ).mappings()
            return {"attempts": att, "evidence": [evidence_view(r) for r in e_rows]}

    def audit_trail(self, p: Principal, task_id: str) -> dict[str, Any]:
        with self._read() as conn:
            self._task_row(conn, p, task_id)
            rows = conn.execute(
                select(audit).where(audit.c.task_id == task_id)
                .order_by(audit.c.at_ms, audit.c.id)
            ).mappings()
            return {"events": [audit_view(r) for r in rows]}

    def cancel_task(self, p: Principal, task_id: str, reason: str | None
                    ) -> tuple[dict[str, Any], Effects]:
        """PENDING/NEEDS_REVIEW end CANCELLED at once; RUNNING ends CANCELLED and its worker
        is told (Effects.cancels). Idempotent on CANCELLED; CONFLICT on SUCCEEDED/FAILED."""
        _check_reason(reason)
        now = self.clock()
        effects = Effects()
        with self._write() as conn:
            row = self._task_row(conn, p, task_id)
            uow = UnitOfWork(conn, now)
            task = uow.adopt_task_row(row)
            attempt = None
            if task.current_attempt_id is not None:
                uow.load_attempts([task.current_attempt_id])
                attempt = uow.attempts.get(task.current_attempt_id)
            before = task.state
            before_attempt = attempt.state if attempt is not None else None
            if domain.cancel(task, attempt, now):
                detail: dict[str, Any] = {"reason": reason} if reason else {}
                if attempt is not None and before is TaskState.RUNNING:
                    detail["attempt_state"] = [before_attempt, attempt.state]
                    effects.cancels.append((attempt.instance_id, attempt.id, attempt.epoch))
                uow.audit(task.id, attempt.id if attempt else None, p.actor, "task_cancelled",
                          before, task.state, detail)
                effects.terminal_tasks.append(task.id)
                uow.flush()
            out = conn.execute(select(tasks).where(tasks.c.id == task_id)).mappings().one()
        return task_view(out), effects

    def review(self, p: Principal, task_id: str, action: str, result: object,
               reason: str | None) -> tuple[dict[str, Any], Effects]:
        """Resolve NEEDS_REVIEW (retry / succeed / fail); CONFLICT in any other state."""
        try:
            act = domain.ReviewAction(action)
        except ValueError:
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             "action must be one of retry, succeed, fail") from None
        _check_reason(reason)
        result_json = None
        if act is domain.ReviewAction.SUCCEED:
            if result is None:
                raise OrbitError(ErrorCode.BAD_REQUEST, "succeed needs a non-null result")
            result_json = encode_value(result, what="result").decode()
        reason_json = orjson.dumps({"reason": reason} if reason else {}).decode()
        now = self.clock()
        effects = Effects()
        with self._write() as conn:
            row = self._task_row(conn, p, task_id)
            uow = UnitOfWork(conn, now)
            task = uow.adopt_task_row(row)
            before = task.state
            last = conn.execute(queries.LAST_ATTEMPT_OF_TASK,
                                {"task_id": task.id}).mappings().first()
            not_before = domain.retry_not_before(
                uow.adopt_attempt_row(last) if last is not None else None,
                self.config.kill_grace_ms)
            domain.review(task, act, result_json, reason_json, now, not_before)
            uow.audit(task.id, None, p.operator, "task_reviewed", before, task.state,
                      {"action": act.value, **({"reason": reason} if reason else {})})
            uow.flush()
            out = conn.execute(select(tasks).where(tasks.c.id == task_id)).mappings().one()
        if task.state is not TaskState.PENDING:
            effects.terminal_tasks.append(task.id)
        elif task.available_at_ms <= now:
            effects.ready_queues.add(task.queue_id)
        else:
            heapq.heappush(self._wakeups, (task.available_at_ms, task.queue_id))
            effects.due(task.available_at_ms)
        return task_view(out), effects

    def queue_stats(self, p: Principal, queue_id: str) -> dict[str, Any]:
        require_role(p, _PRODUCERS)
        require_queue(p, queue_id)
        now = self.clock()
        with self._read() as conn:
            if conn.execute(select(queues.c.id).where(queues.c.id == queue_id)).first() is None:
                raise OrbitError(ErrorCode.NOT_FOUND, f"queue {queue_id} does not exist")
            counts = {s.value: 0 for s in TaskState}
            for state, n in conn.execute(
                select(tasks.c.state, func.count()).where(tasks.c.queue_id == queue_id)
                .group_by(tasks.c.state)
            ):
                counts[state] = n
            running = conn.scalar(
                select(func.count()).select_from(attempts).where(
                    attempts.c.state == AttemptState.RUNNING.value,
                    attempts.c.queue_id == queue_id,
                )
            )
            oldest = conn.scalar(
                select(func.min(tasks.c.created_at_ms)).where(
                    tasks.c.queue_id == queue_id, tasks.c.state == TaskState.PENDING.value
                )
            )
        return {
            "queue_id": queue_id,
            "counts": counts,
            "running_attempts": running or 0,
            "oldest_pending_age_ms": None if oldest is None else max(0, now - oldest),
        }

    # ================================================================== worker protocol

    def worker_hello(self, hello: Hello) -> WorkerBinding:
        """Authenticate a worker and bind or re-attach its instance.

        Raises ProtocolError(UNSUPPORTED_PROTOCOL), AuthError(UNAUTHENTICATED /
        PERMISSION_DENIED) or OrbitError(INSTANCE_CONFLICT) when the instance ID is bound to
        another secret, credential or queue.
        """
        if hello.protocol != PROTOCOL_VERSION:
            raise ProtocolError(ErrorCode.UNSUPPORTED_PROTOCOL,
                                f"protocol {hello.protocol} is not supported")
        now = self.clock()
        with self._write() as conn:
            row = conn.execute(
                select(credentials).where(credentials.c.id == hello.credential_id)
            ).mappings().first()
            principal = self._principal(row, hello.credential_secret)
            if principal.role is not Role.WORKER:
                raise AuthError(ErrorCode.PERMISSION_DENIED, "only a worker credential may connect")
            require_queue(principal, hello.queue_id)
            inst = conn.execute(
                select(instances).where(instances.c.id == hello.instance_id)
            ).mappings().first()
            if inst is None:
                conn.execute(instances.insert(), {
                    "id": hello.instance_id, "secret_hash": hash_secret(hello.instance_secret),
                    "credential_id": hello.credential_id, "queue_id": hello.queue_id,
                    "created_at_ms": now, "last_seen_at_ms": now,
                })
            else:
                if not (secret_matches(hello.instance_secret, inst["secret_hash"])
                        and inst["credential_id"] == hello.credential_id
                        and inst["queue_id"] == hello.queue_id):
                    raise OrbitError(ErrorCode.INSTANCE_CONFLICT,
                                     "instance ID is bound to another secret, credential or queue")
                conn.execute(instances.update().where(instances.c.id == hello.instance_id)
                             .values(last_seen_at_ms=now))
        return WorkerBinding(hello.instance_id, hello.credential_id, hello.queue_id,
                             tuple(dict.fromkeys(hello.capabilities)))

    def release_reservations(self, instance_id: str) -> Effects:
        """The instance's connection ended: every unstarted reservation is released (task
        back to PENDING, available now, no attempt spent)."""
        now = self.clock()
        effects = Effects()
        with self._write() as conn:
            uow = UnitOfWork(conn, now)
            for row in conn.execute(
                select(attempts).where(attempts.c.instance_id == instance_id,
                                       attempts.c.state == AttemptState.RESERVED.value)
                .with_for_update()
            ).mappings():
                uow.adopt_attempt_row(row)
            self._release_all(uow, list(uow.attempts.values()), domain.Rule.SESSION_ENDED,
                              f"worker:{instance_id}", effects)
            uow.flush()
        return effects

    def _release_all(self, uow: UnitOfWork, recs: list[domain.AttemptRec], rule: domain.Rule,
                     actor: str, effects: Effects) -> None:
        uow.load_tasks(a.task_id for a in recs)
        for attempt in recs:
            task = uow.tasks[attempt.task_id]
            before = task.state
            if domain.release(task, attempt, uow.now_ms, rule):
                effects.ready_queues.add(task.queue_id)
            uow.audit(task.id, attempt.id, actor, "attempt_released", before, task.state,
                      {"rule": rule.value})

    def reserve(self, b: WorkerBinding, n: int) -> list[Reservation]:
        """Claim up to ``n`` dispatchable tasks of the binding's queue and capabilities:
        one SELECT, then one executemany each for tasks, attempts and audit rows."""
        n = max(0, min(n, MAX_RESERVATIONS_PER_FRAME))
        if n == 0 or not b.capabilities:
            return []
        with self._write() as conn:
            uow = UnitOfWork(conn, self.clock())
            claimed = self._reserve_in(uow, b, n)
            uow.flush()
        return [_reservation(*c) for c in claimed]

    def _reserve_in(self, uow: UnitOfWork, b: WorkerBinding, n: int
                    ) -> list[tuple[domain.TaskRec, domain.AttemptRec, Mapping[str, Any]]]:
        """Reserve up to ``n`` tasks in ``uow``: (task, RESERVED attempt, task row) each."""
        conn, now = uow.conn, uow.now_ms
        if len(b.capabilities) > 1 and conn.dialect.name != "sqlite":
            rows = claims.lock_each(conn, b.queue_id, b.capabilities, now, n)
        else:
            stmt, params = _dispatch_query(b.queue_id, b.capabilities, now, n)
            result = conn.execute(stmt, params)
            names = tuple(result.keys())
            rows = [dict(zip(names, r, strict=True)) for r in result.all()]
        out: list[tuple[domain.TaskRec, domain.AttemptRec, Mapping[str, Any]]] = []
        actor = b.actor
        for row in rows:
            task = uow.adopt_task_row(row)
            attempt = domain.reserve(task, new_id(now), b.instance_id, now)
            uow.add_attempt(attempt)
            uow.audit(task.id, attempt.id, actor, "attempt_reserved",
                      TaskState.PENDING.value, task.state.value, None)
            out.append((task, attempt, row))
        return out

    def apply_ops(self, b: WorkerBinding, ops: Sequence[Op], room: ClaimRoom = NO_CLAIMS,
                  watched: Callable[[str], bool] | None = None
                  ) -> tuple[list[OpResult], Effects]:
        """Apply a control request's operations in order, in one transaction.

        Receipts, attempts and tasks are loaded with one SELECT each (by id IN ...); every
        op's answer is stored as a receipt (resume excepted: it changes nothing and its
        answer must be fresh). A retransmitted msg_id gets its stored answer; start/renew
        answers are re-based on the stored lease expiry so a replay never lengthens a lease.
        A ``claim`` reserves and starts within ``room`` (docs/protocol.md), and only if every
        ``finish`` before it was answered ok.

        ``watched(task_id)`` (optional, called on this thread) says whether a long poll
        waits on a task; the views of such tasks that became terminal are read in the same
        transaction into ``effects.terminal_views``."""
        now = self.clock()
        effects = Effects()
        with self._write() as conn:
            uow = UnitOfWork(conn, now)
            stored = _load_receipts(conn, b.instance_id,
                                    [op.msg_id for op in ops if not isinstance(op, ResumeOp)])
            wanted: list[str] = []
            for op in ops:
                if isinstance(op, ResumeOp):
                    wanted.extend(ref.attempt_id for ref in op.attempts)
                elif isinstance(op, (StartOp, RenewOp, FinishOp)) and op.msg_id not in stored:
                    wanted.append(op.attempt_id)
            uow.load_attempts_and_tasks(wanted)
            results: list[OpResult] = []
            for op in ops:
                if isinstance(op, ClaimOp):
                    may = room if finishes_confirmed(ops, results) else NO_CLAIMS
                    results.append(self._claim(uow, b, op, stored, may, effects))
                else:
                    results.append(self._apply_op(uow, b, op, stored, effects))
            uow.flush()
            if watched is not None:
                for task_id in effects.terminal_tasks:
                    if watched(task_id):
                        row = conn.execute(queries.TASK_BY_ID, {"id": task_id}).mappings().first()
                        if row is not None:
                            effects.terminal_views[task_id] = task_view(row)
        return results, effects

    def _claim(self, uow: UnitOfWork, b: WorkerBinding, op: ClaimOp,
               stored: dict[str, tuple[str, dict[str, Any]]], room: ClaimRoom,
               effects: Effects) -> OpResult:
        """Reserve and start up to ``op.count`` tasks; unfilled slots become credit. The
        receipt keeps the attempt IDs; a replay reads them again with their current lease
        and grants no credit (credit belongs to the connection that applied the claim)."""
        seen = stored.get(op.msg_id)
        if seen is not None:
            return self._replay_claim(uow, op.msg_id, seen)
        now = uow.now_ms
        n = min(op.count, MAX_RESERVATIONS_PER_FRAME) if room.allowed else 0
        claimed: list[Reservation] = []
        for task, attempt, row in self._reserve_in(uow, b, n) if n else ():
            granted = domain.start(task, attempt, attempt.epoch, b.instance_id, None, now)
            _audit_started(uow, b, task, attempt, AttemptState.RESERVED, None, granted)
            effects.due(attempt.lease_expires_at_ms)
            claimed.append(_reservation(task, attempt, row, granted))
        credited = min(op.count - len(claimed), room.credit_room) if room.allowed else 0
        answer = {"ok": True, "claimed": [r.attempt_id for r in claimed], "credited": credited}
        stored[op.msg_id] = (op.op, answer)
        uow.receipt_rows.append({
            "instance_id": b.instance_id, "msg_id": op.msg_id, "op": op.op,
            "answer": orjson.dumps(answer).decode(), "created_at_ms": now,
        })
        return OpResult(op.msg_id, True, claimed=tuple(claimed), credited=credited)

    def _replay_claim(self, uow: UnitOfWork, msg_id: str,
                      seen: tuple[str, dict[str, Any]]) -> OpResult:
        kind, answer = seen
        if kind != "claim":
            return _replay(msg_id, "claim", seen, uow.now_ms)
        ids = answer["claimed"]
        rows = {row["attempt_id"]: row for row in uow.conn.execute(
            queries.CLAIMED_ATTEMPTS, {"ids": ids}).mappings()} if ids else {}
        claimed = []
        for attempt_id in ids:
            row = rows.get(attempt_id)
            if row is None:
                continue
            expires = row["lease_expires_at_ms"]
            held = row["attempt_state"] == AttemptState.RUNNING.value and expires is not None
            claimed.append(_reservation_of(row, row["task_id"], attempt_id, row["epoch"],
                                           row["attempt_number"],
                                           max(0, expires - uow.now_ms) if held else 0))
        return OpResult(msg_id, True, claimed=tuple(claimed), credited=0)

    def _apply_op(self, uow: UnitOfWork, b: WorkerBinding, op: Op,
                  stored: dict[str, tuple[str, dict[str, Any]]], effects: Effects) -> OpResult:
        if isinstance(op, ResumeOp):
            return self._resume(uow, b, op)
        kind = op.op
        seen = stored.get(op.msg_id)
        if seen is not None:
            return _replay(op.msg_id, kind, seen, uow.now_ms)
        try:
            answer = self._op_answer(uow, b, op, effects)
        except OrbitError as exc:
            answer = {"ok": False, "error_code": exc.code.value, "error_message": exc.message}
        stored[op.msg_id] = (kind, answer)
        uow.receipt_rows.append({
            "instance_id": b.instance_id, "msg_id": op.msg_id, "op": kind,
            "answer": orjson.dumps(answer).decode(), "created_at_ms": uow.now_ms,
        })
        return _op_result(op.msg_id, answer)

    def _op_answer(self, uow: UnitOfWork, b: WorkerBinding, op: Op,
                   effects: Effects) -> dict[str, Any]:
        if isinstance(op, DrainOp):
            return {"ok": True}
        assert isinstance(op, (StartOp, RenewOp, FinishOp))
        attempt = uow.attempts.get(op.attempt_id)
        task = uow.tasks.get(attempt.task_id) if attempt is not None else None
        if attempt is None or task is None:
            raise OrbitError(ErrorCode.NOT_FOUND, f"attempt {op.attempt_id} does not exist")
        if isinstance(op, StartOp):
            return self._start(uow, b, task, attempt, op, effects)
        if isinstance(op, RenewOp):
            granted = domain.renew(task, attempt, op.epoch, b.instance_id, uow.now_ms)
            effects.due(attempt.lease_expires_at_ms)
            return {"ok": True, "lease_ms": granted,
                    "lease_expires_at_ms": attempt.lease_expires_at_ms}
        return self._finish(uow, b, task, attempt, op, effects)

    def _start(self, uow: UnitOfWork, b: WorkerBinding, task: domain.TaskRec,
               attempt: domain.AttemptRec, op: StartOp, effects: Effects) -> dict[str, Any]:
        now = uow.now_ms
        before = attempt.state
        try:
            granted = domain.start(task, attempt, op.epoch, b.instance_id, op.child_pid, now)
        except OrbitError as exc:
            if (exc.code is ErrorCode.LEASE_EXPIRED and attempt.state is AttemptState.RESERVED
                    and attempt.instance_id == b.instance_id and attempt.epoch == op.epoch
                    and task.deadline_at_ms <= now):
                # Too late to start: the reservation goes back and the deadline ends the task.
                self._deadline_release(uow, task, attempt, b.actor, effects)
            raise
        if before is AttemptState.RESERVED:
            _audit_started(uow, b, task, attempt, before, op.child_pid, granted)
        effects.due(attempt.lease_expires_at_ms)
        return {"ok": True, "lease_ms": granted, "lease_expires_at_ms": now + granted}

    def _deadline_release(self, uow: UnitOfWork, task: domain.TaskRec,
                          attempt: domain.AttemptRec, actor: str, effects: Effects) -> None:
        now = uow.now_ms
        domain.release(task, attempt, now, domain.Rule.DEADLINE_PASSED)
        uow.audit(task.id, attempt.id, actor, "attempt_released", TaskState.RUNNING.value,
                  task.state.value, {"rule": domain.Rule.DEADLINE_PASSED.value})
        if task.state is TaskState.PENDING:
            domain.expire_deadline(task, now)
            uow.audit(task.id, None, SERVER, "task_deadline_exceeded", TaskState.PENDING.value,
                      task.state.value, None)
            effects.terminal_tasks.append(task.id)

    def _finish(self, uow: UnitOfWork, b: WorkerBinding, task: domain.TaskRec,
                attempt: domain.AttemptRec, op: FinishOp, effects: Effects) -> dict[str, Any]:
        now = uow.now_ms
        r = op.report
        report = domain.Report(
            outcome=op.outcome, code=op.code, retryable=op.retryable,
            result_json=op.result_json, details_json=op.details_json, child_pid=r.child_pid,
            exit_code=r.exit_code, signal=r.signal, cpu_ms=r.cpu_ms,
            peak_rss_bytes=r.peak_rss_bytes, kill_reason=r.kill_reason,
        )
        checked = domain.check_report(report)
        before_task = task.state
        result = domain.finish(task, attempt, op.epoch, b.instance_id, checked, now,
                               self.rng.random())
        if result.evidence is not None:
            uow.evidence_rows.append({
                "id": new_id(now), "task_id": task.id, "attempt_id": attempt.id,
                "epoch": op.epoch, "instance_id": b.instance_id, "received_at_ms": now,
                "outcome": checked.outcome.value, "code": checked.code,
                "reason": result.evidence.value, "result": checked.result,
                "details": checked.details,
            })
            return {"ok": True, "disposition": Disposition.EVIDENCE_ONLY.value,
                    "task_state": task.state.value}
        # The attempt's renewal count is the server's own (renewals it granted), not the
        # worker's figure, which may include requests that never arrived.
        domain.apply_report_facts(attempt, report)
        self._after_close(uow, b.actor, task, attempt, before_task, checked, result, effects)
        return {"ok": True, "disposition": Disposition.ACCEPTED.value,
                "task_state": task.state.value}

    def _after_close(self, uow: UnitOfWork, actor: str, task: domain.TaskRec,
                     attempt: domain.AttemptRec, before_task: TaskState,
                     checked: domain.Checked, result: domain.FinishResult,
                     effects: Effects) -> None:
        detail: dict[str, Any] = {
            "outcome": checked.outcome.value, "code": checked.code,
            "decision": attempt.decision, "rule": attempt.decision_rule,
        }
        verdict = result.verdict
        if verdict is not None and verdict.available_at_ms is not None:
            detail["next_attempt_at_ms"] = verdict.available_at_ms
            if verdict.available_at_ms <= uow.now_ms:
                effects.ready_queues.add(task.queue_id)
            else:
                heapq.heappush(self._wakeups, (verdict.available_at_ms, task.queue_id))
                effects.due(verdict.available_at_ms)
        uow.audit(task.id, attempt.id, actor, "attempt_finished", before_task.value,
                  task.state.value, detail)
        if task.state in _DONE and before_task is not task.state:
            effects.terminal_tasks.append(task.id)

    def _resume(self, uow: UnitOfWork, b: WorkerBinding, op: ResumeOp) -> OpResult:
        entries = []
        for ref in op.attempts:
            attempt = uow.attempts.get(ref.attempt_id)
            task = uow.tasks.get(attempt.task_id) if attempt is not None else None
            status, lease, reason = domain.resume_status(task, attempt, ref.epoch,
                                                         b.instance_id, uow.now_ms)
            entries.append(ResumeEntry(ref.attempt_id, status.value, lease, reason))
        return OpResult(op.msg_id, True, attempts=tuple(entries))

    # ================================================================== reaper

    def reap(self) -> Effects:
        """One reaper pass, one transaction: expire lapsed leases (UNKNOWN/LEASE_EXPIRED and
        the policy), release stale reservations, fail PENDING tasks past their deadline.
        ``next_due_ms`` is when something is next known to fall due (now if a batch was full)."""
        now = self.clock()
        cfg = self.config
        limit = cfg.reap_batch
        effects = Effects()
        with self._write() as conn:
            uow = UnitOfWork(conn, now)
            if not self._wakeups_loaded:
                self._load_wakeups(conn)
            expired = [uow.adopt_attempt_row(r) for r in conn.execute(
                queries.EXPIRED_LEASES, {"now": now, "n": limit}).mappings()]
            stale_before = now - cfg.reservation_ttl_ms
            stale = [uow.adopt_attempt_row(r) for r in conn.execute(
                queries.STALE_RESERVATIONS, {"before": stale_before, "n": limit}).mappings()]
            uow.load_tasks([a.task_id for a in expired] + [a.task_id for a in stale])
            lease_ex = domain.Checked(Outcome.UNKNOWN, "LEASE_EXPIRED", False, None, None)
            for attempt in expired:
                task = uow.tasks[attempt.task_id]
                before = task.state
                result = domain.expire(task, attempt, now, self.rng.random(), cfg.kill_grace_ms)
                self._after_close(uow, SERVER, task, attempt, before, lease_ex, result, effects)
            self._release_all(uow, stale, domain.Rule.RESERVATION_EXPIRED, SERVER, effects)
            overdue = [uow.adopt_task_row(r) for r in conn.execute(
                queries.OVERDUE_PENDING, {"now": now, "n": limit}).mappings()]
            # Tasks released just above are PENDING in memory only; include them too.
            overdue_ids = {t.id for t in overdue}
            overdue += [t for t in uow.tasks.values() if t.id not in overdue_ids
                        and t.state is TaskState.PENDING and t.deadline_at_ms <= now]
            for task in overdue:
                if task.state is not TaskState.PENDING:
                    continue
                domain.expire_deadline(task, now)
                uow.audit(task.id, None, SERVER, "task_deadline_exceeded",
                          TaskState.PENDING.value, task.state.value, None)
                effects.terminal_tasks.append(task.id)
            uow.flush()
            full = len(expired) >= limit or len(stale) >= limit or len(overdue) >= limit
            effects.due(now if full else None)
            effects.due(conn.scalar(queries.NEXT_LEASE_EXPIRY))
            oldest_reserved = conn.scalar(queries.OLDEST_RESERVATION)
            if oldest_reserved is not None:
                effects.due(oldest_reserved + cfg.reservation_ttl_ms)
            effects.due(conn.scalar(queries.NEXT_PENDING_DEADLINE))
        while self._wakeups and self._wakeups[0][0] <= now:
            effects.ready_queues.add(heapq.heappop(self._wakeups)[1])
        if self._wakeups:
            effects.due(self._wakeups[0][0])
        return effects

    def _load_wakeups(self, conn: Connection) -> None:
        """At the first pass, learn when each queue's waiting tasks become dispatchable."""
        for queue_id, first in conn.execute(
            select(tasks.c.queue_id, func.min(tasks.c.available_at_ms))
            .where(tasks.c.state == TaskState.PENDING.value).group_by(tasks.c.queue_id)
        ):
            heapq.heappush(self._wakeups, (first, queue_id))
        self._wakeups_loaded = True


# ====================================================================== helpers


def _check_name(name: str | None) -> None:
    if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LEN):
        raise OrbitError(ErrorCode.BAD_REQUEST, f"name must be 1-{MAX_NAME_LEN} characters")


def _check_reason(reason: str | None) -> None:
    if reason is not None and (not isinstance(reason, str) or len(reason) > 1024):
        raise OrbitError(ErrorCode.BAD_REQUEST, "reason must be a string of at most 1024 chars")


def _new_task_row(queue_id: str, spec: domain.TaskSpec, now: int) -> dict[str, Any]:
    policy = spec.policy
    cap = spec.capability
    return {
        "id": new_id(now), "queue_id": queue_id, "state": TaskState.PENDING.value,
        "handler": cap.handler, "handler_version": cap.handler_version,
        "payload_version": cap.payload_version, "payload": spec.payload_json,
        "idempotency": policy.idempotency.value, "max_attempts": policy.max_attempts,
        "backoff_initial_ms": policy.backoff.initial_ms,
        "backoff_max_ms": policy.backoff.max_ms,
        "backoff_multiplier": policy.backoff.multiplier,
        "backoff_jitter": policy.backoff.jitter,
        "attempt_timeout_ms": policy.attempt_timeout_ms, "lease_ttl_ms": policy.lease_ttl_ms,
        "deadline_at_ms": now + policy.deadline_ms, "operation_key": spec.operation_key,
        "created_at_ms": now, "updated_at_ms": now, "available_at_ms": now, "epoch": 0,
        "attempts_started": 0, "uncertain": False, "result": None, "failure_code": None,
        "failure_details": None, "cancel_requested": False, "current_attempt_id": None,
    }


def _existing_by_key(conn: Connection, queue_id: str,
                     keys: list[str | None]) -> dict[str, Mapping[Any, Any]]:
    found: dict[str, Mapping[Any, Any]] = {}
    wanted = [k for k in dict.fromkeys(keys) if k is not None]
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        for row in conn.execute(
            select(tasks).where(tasks.c.queue_id == queue_id, tasks.c.operation_key.in_(chunk))
        ).mappings():
            found[row["operation_key"]] = row
    return found


def _dispatch_query(queue_id: str, caps: Iterable[Capability], now: int,
                    n: int) -> tuple[Any, dict[str, Any]]:
    """Oldest-available PENDING tasks of exactly these capabilities, within the deadline
    (statements built once, see queries.dispatch_many)."""
    cap_list = list(caps)
    params: dict[str, Any] = {"queue_id": queue_id, "now": now, "n": n}
    if len(cap_list) == 1:
        cap = cap_list[0]
        params.update(handler=cap.handler, handler_version=cap.handler_version,
                      payload_version=cap.payload_version)
        return queries.DISPATCH_ONE, params
    for i, cap in enumerate(cap_list):
        params[f"handler_{i}"] = cap.handler
        params[f"handler_version_{i}"] = cap.handler_version
        params[f"payload_version_{i}"] = cap.payload_version
    return queries.dispatch_many(len(cap_list)), params


def _audit_started(uow: UnitOfWork, b: WorkerBinding, task: domain.TaskRec,
                   attempt: domain.AttemptRec, before: AttemptState, child_pid: int | None,
                   granted: int) -> None:
    uow.audit(task.id, attempt.id, b.actor, "attempt_started", task.state.value,
              task.state.value, {"attempt_state": [before.value, attempt.state.value],
                                 "child_pid": child_pid, "lease_ms": granted})


def _reservation(task: domain.TaskRec, attempt: domain.AttemptRec, row: Mapping[str, Any],
                 lease_ms: int | None = None) -> Reservation:
    return _reservation_of(row, task.id, attempt.id, attempt.epoch, attempt.attempt_number,
                           lease_ms)


def _reservation_of(row: Mapping[Any, Any], task_id: str, attempt_id: str, epoch: int,
                    attempt_number: int, lease_ms: int | None) -> Reservation:
    """A reservation from a row holding the task's capability, payload and policy."""
    return Reservation(
        attempt_id=attempt_id, task_id=task_id, epoch=epoch,
        attempt_number=attempt_number,
        capability=Capability(row["handler"], row["handler_version"], row["payload_version"]),
        payload=orjson.Fragment(row["payload"]),
        idempotency=Idempotency(row["idempotency"]),
        lease_ttl_ms=row["lease_ttl_ms"],
        attempt_timeout_ms=row["attempt_timeout_ms"],
        deadline_at_ms=row["deadline_at_ms"],
        lease_ms=lease_ms,
    )


def finishes_confirmed(ops: Sequence[Op], results: Sequence[OpResult]) -> bool:
    """True when every ``finish`` among ``ops`` answered so far was ok: a claim after them
    offers the slots those finishes free, so it applies only then (docs/protocol.md)."""
    return all(result.ok for op, result in zip(ops, results, strict=False)  # results so far
               if isinstance(op, FinishOp))


def _load_receipts(conn: Connection, instance_id: str,
                   msg_ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    wanted = list(dict.fromkeys(msg_ids))
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        for msg_id, op, answer in conn.execute(
            queries.RECEIPTS_BY_MSG, {"instance_id": instance_id, "msg_ids": chunk}
        ).all():
            out[msg_id] = (op, orjson.loads(answer))
    return out


def _replay(msg_id: str, kind: str, seen: tuple[str, dict[str, Any]], now: int) -> OpResult:
    stored_kind, answer = seen
    if stored_kind != kind:
        return OpResult(msg_id, False, ErrorCode.MESSAGE_ID_REUSED,
                        f"msg_id {msg_id} was used for a {stored_kind} operation")
    expires = answer.get("lease_expires_at_ms")
    if answer.get("ok") and expires is not None:
        # Never hand out the original duration again: the worker counts from its resend.
        remaining = expires - now
        if remaining <= 0:
            return OpResult(msg_id, False, ErrorCode.LEASE_EXPIRED, "attempt lease has expired")
        answer = {**answer, "lease_ms": min(answer["lease_ms"], remaining)}
    return _op_result(msg_id, answer)


def _op_result(msg_id: str, answer: Mapping[Any, Any]) -> OpResult:
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

