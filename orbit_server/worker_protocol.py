"""The worker protocol's use cases (docs/protocol.md): hello, reservations, and the
operations of a control request (resume, start, renew, finish, drain, claim), each request
one transaction. Mixed into ``service.Service``; the rules come from ``domain``.

Receipts make every op apply once: an op's answer is stored in the transaction that applied
it, and a retransmitted ``msg_id`` gets the stored answer (a lease in it re-based on the
stored expiry, so a replay never lengthens a lease).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, select

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
from orbit_wire.ids import new_id
from orbit_wire.jsonvalue import utf8_len
from orbit_wire.limits import (
    MAX_PAYLOAD_BYTES_PER_FRAME,
    MAX_RESERVATIONS_PER_FRAME,
    PROTOCOL_VERSION,
)
from orbit_wire.model import (
    AttemptState,
    Capability,
    Disposition,
    Idempotency,
    Role,
    TaskState,
)

from . import domain
from .auth import (
    hash_secret,
    principal_from_row,
    require_queue,
    secret_matches,
)
from .store import claims, queries
from .store.prepared import prepared_select
from .store.retry import transactional
from .store.rows import UnitOfWork
from .store.tables import attempts, credentials, instances
from .store.views import task_view
from .use_cases import SERVER, Effects, UseCases

__all__ = ["NO_CLAIMS", "ClaimRoom", "WorkerBinding", "WorkerProtocol"]


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


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class WorkerProtocol(UseCases):
    """The worker protocol's use cases; every public method is one transaction."""

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
            principal = principal_from_row(row, hello.credential_secret)
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

    def reserve(self, b: WorkerBinding, n: int) -> Reservations:
        """Claim up to ``n`` dispatchable tasks of the binding's queue and capabilities:
        one SELECT, then one executemany each for tasks, attempts and audit rows."""
        n = max(0, min(n, MAX_RESERVATIONS_PER_FRAME))
        if n == 0 or not b.capabilities:
            return Reservations()
        with self._write() as conn:
            uow = UnitOfWork(conn, self.clock())
            reservations = self._reserve_for(uow, b, n)
            uow.flush()
        return reservations

    def _reserve_for(self, uow: UnitOfWork, b: WorkerBinding, n: int) -> Reservations:
        """Reserve up to ``n`` tasks in ``uow``, as the reservations a worker receives."""
        made, more, _used = self._reserve_in(uow, b, n)
        out = Reservations(_reservation(*c) for c in made)
        out.more = more
        return out

    def _reserve_in(self, uow: UnitOfWork, b: WorkerBinding, n: int,
                    budget: int = MAX_PAYLOAD_BYTES_PER_FRAME,
                    ) -> tuple[list[tuple[domain.TaskRec, domain.AttemptRec, Mapping[str, Any]]],
                               bool, int]:
        """Reserve up to ``n`` tasks in ``uow``: (task, RESERVED attempt, task row) each,
        whether more were ready than ``budget`` bytes of payload let in (a frame's whole
        budget always takes at least one: MAX_PAYLOAD_BYTES_PER_FRAME), and the payload
        bytes taken."""
        conn, now = uow.conn, uow.now_ms
        # Rows this transaction changed are not written yet, so the query still sees them
        # PENDING (and our own locks never skip them): ask for enough to make up for those.
        taken = uow.moved_from_pending()
        want = n + len(taken)
        if len(b.capabilities) > 1 and conn.dialect.name != "sqlite":
            rows = claims.lock_each(conn, b.queue_id, b.capabilities, now, want)
        else:
            stmt, params = _dispatch_query(b.queue_id, b.capabilities, now, want)
            query = prepared_select(stmt)
            names = query.keys
            rows = [dict(zip(names, r, strict=True)) for r in query.all(conn, params)]
        skip = set(taken)
        rows = [row for row in rows if row["id"] not in skip][:n]
        more = False
        size = 0
        for i, row in enumerate(rows):
            row_bytes = utf8_len(row["payload"])
            if size + row_bytes > budget and (i or budget < MAX_PAYLOAD_BYTES_PER_FRAME):
                rows, more = rows[:i], True
                break
            size += row_bytes
        out: list[tuple[domain.TaskRec, domain.AttemptRec, Mapping[str, Any]]] = []
        actor = b.actor
        for row in rows:
            task = uow.adopt_task_row(row)
            attempt = domain.reserve(task, new_id(now), b.instance_id, now)
            uow.add_attempt(attempt)
            uow.audit(task.id, attempt.id, actor, "attempt_reserved",
                      TaskState.PENDING.value, task.state.value, None)
            out.append((task, attempt, row))
        return out, more, size

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
            # The claims' answers share one response frame: one payload budget for all.
            payload_left = MAX_PAYLOAD_BYTES_PER_FRAME
            for op in ops:
                if isinstance(op, ClaimOp):
                    may = room if finishes_confirmed(ops, results) else NO_CLAIMS
                    result, used = self._claim(uow, b, op, stored, may, effects, payload_left)
                    payload_left -= used
                    results.append(result)
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
               effects: Effects, payload_left: int) -> tuple[OpResult, int]:
        """Reserve and start up to ``op.count`` tasks, within ``payload_left`` bytes of
        payload; unfilled slots become credit. Returns the answer and the payload bytes it
        carries. The receipt keeps the attempt IDs; a replay reads them again with their
        current lease and grants no credit (credit belongs to the connection that applied
        the claim)."""
        seen = stored.get(op.msg_id)
        if seen is not None:
            return self._replay_claim(uow, op.msg_id, seen)
        now = uow.now_ms
        n = min(op.count, MAX_RESERVATIONS_PER_FRAME) if room.allowed else 0
        claimed: list[Reservation] = []
        made, more, used = self._reserve_in(uow, b, n, payload_left) if n else ([], False, 0)
        if more:  # the answer's payload budget, not the queue, ended the claim
            effects.ready_queues.add(b.queue_id)
        for task, attempt, row in made:
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
        return OpResult(op.msg_id, True, claimed=tuple(claimed), credited=credited), used

    def _replay_claim(self, uow: UnitOfWork, msg_id: str,
                      seen: tuple[str, dict[str, Any]]) -> tuple[OpResult, int]:
        kind, answer = seen
        if kind != "claim":
            return _replay(msg_id, "claim", seen, uow.now_ms), 0
        ids = answer["claimed"]
        rows = {row["attempt_id"]: row for row in uow.conn.execute(
            queries.CLAIMED_ATTEMPTS, {"ids": ids}).mappings()} if ids else {}
        claimed = []
        used = 0
        for attempt_id in ids:
            row = rows.get(attempt_id)
            if row is None:
                continue
            used += utf8_len(row["payload"])
            expires = row["lease_expires_at_ms"]
            held = row["attempt_state"] == AttemptState.RUNNING.value and expires is not None
            claimed.append(_reservation_of(row, row["task_id"], attempt_id, row["epoch"],
                                           row["attempt_number"],
                                           max(0, expires - uow.now_ms) if held else 0))
        return OpResult(msg_id, True, claimed=tuple(claimed), credited=0), used

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
        report = domain.FinishReport(
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
                     checked: domain.CheckedReport, result: domain.FinishResult,
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
        if task.state.settled and before_task is not task.state:
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


class Reservations(list[Reservation]):
    """The reservations one call made; ``more`` when a frame's payload budget, not the
    queue, ended them (the dispatcher then claims again instead of waiting for work)."""

    more: bool = False


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
        for msg_id, op, answer in prepared_select(queries.RECEIPTS_BY_MSG).all(
            conn, {"instance_id": instance_id, "msg_ids": chunk}
        ):
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
