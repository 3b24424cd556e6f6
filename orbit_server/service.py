"""Use cases of the Orbit server (the worker protocol's in ``worker_protocol``). Each public
method is exactly one transaction.

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.exc import IntegrityError

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id, new_id, new_secret
from orbit_wire.jsonvalue import encode_value
from orbit_wire.limits import (
    MAX_NAME_LEN,
    MAX_RESERVATIONS_PER_FRAME,
    MAX_SUBMIT_BATCH,
)
from orbit_wire.model import (
    AttemptState,
    Outcome,
    Role,
    TaskState,
)

from . import domain
from .auth import (
    Principal,
    hash_secret,
    parse_bearer,
    principal_from_row,
    require_queue,
    require_role,
)
from .config import ServerConfig
from .store import queries
from .store.retry import transactional
from .store.rows import INSERT_AUDIT, INSERT_TASK, UnitOfWork
from .store.tables import attempts, audit, credentials, evidence, queues, tasks
from .store.views import attempt_view, audit_view, evidence_view, queue_view, task_view
from .use_cases import SERVER, Effects
from .worker_protocol import NO_CLAIMS, ClaimRoom, Reservations, WorkerBinding, WorkerProtocol

__all__ = ["NO_CLAIMS", "ClaimRoom", "Effects", "Service", "WorkerBinding"]

_PRODUCERS = (Role.ADMIN, Role.PRODUCER)
_AUTH_CACHE_MAX = 10_000


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class Service(WorkerProtocol):
    """The server's use cases: credentials and queues, producers and operators, the reaper,
    and (from ``worker_protocol.WorkerProtocol``) the worker protocol. The adapters call
    them on the store thread and act on the ``Effects`` they return."""

    def __init__(self, engine: Engine, config: ServerConfig, clock: Callable[[], int],
                 rng: random.Random) -> None:
        super().__init__(engine, config, clock, rng)
        self._auth_cache: dict[tuple[str, str], tuple[Principal, int]] = {}

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
        principal = principal_from_row(row, secret)
        if len(self._auth_cache) >= _AUTH_CACHE_MAX:
            self._auth_cache.clear()
        self._auth_cache[key] = (principal, now + self.config.auth_cache_ms)
        return principal

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
                                      Reservations]:
        """``submit``, then in the SAME transaction ``reserve(b, n)`` for a worker of this
        queue that is waiting with credit: the new task reaches it without a separate
        dispatch transaction. ``effects.ready_queues`` is left empty when that worker took
        every task this call created (no other session needs a hint for them)."""
        return self._submit(p, queue_id, specs, b, max(0, min(n, MAX_RESERVATIONS_PER_FRAME)))

    def _submit(self, p: Principal, queue_id: str, specs: list[object],
                b: WorkerBinding | None, n: int
                ) -> tuple[list[tuple[dict[str, Any], bool]], Effects, Reservations]:
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
        reservations = Reservations()
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
                    reservations = self._reserve_for(uow, b, n)
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
            lease_ex = domain.CheckedReport(Outcome.UNKNOWN, "LEASE_EXPIRED", False, None, None)
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

    def prune_receipts(self) -> int:
        """Delete the oldest receipts past the retention, about ``reap_batch`` of them in one
        transaction; the number deleted (fewer than ``reap_batch``: none are left). A receipt
        only answers a resent op, and past the retention every lease it concerned is long
        over: a resend then gets the attempt's current answer (docs/protocol.md)."""
        before = self.clock() - self.config.receipt_retention_ms
        with self._write() as conn:
            nth = conn.scalar(queries.NTH_OLD_RECEIPT,
                              {"before": before, "skip": self.config.reap_batch - 1})
            upto = before - 1 if nth is None else nth  # rows of nth's millisecond go too
            deleted: int = conn.execute(queries.DELETE_RECEIPTS_UP_TO, {"upto": upto}).rowcount
        return deleted

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
