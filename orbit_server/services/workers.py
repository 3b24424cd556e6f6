"""The worker protocol's use cases (docs/protocol.md): hello, the release of a closed
connection's reservations, reserve, and the operations of a control request (resume, start,
renew, finish, drain, claim), each call one transaction. The rules come from ``domain``.

Receipts make every op apply once: an op's answer is stored in the transaction that applied
it, and a retransmitted ``msg_id`` gets the stored answer (a lease in it re-based on the
stored expiry, so a replay never lengthens a lease; ``store.receipts``).

``reserve`` and ``apply_ops`` are hot paths: a handful of set-based statements per call (one
SELECT for attempts with their tasks, one executemany per table written; receipts are read
only when an op turns out to be a resend), never one SELECT per op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError

from orbit_wire.errors import AuthError, ErrorCode, OrbitError, ProtocolError
from orbit_wire.frames import (
    ClaimOp,
    DeclineOp,
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
from orbit_wire.limits import (
    FEATURE_GRANT,
    MAX_PAYLOAD_BYTES_PER_FRAME,
    MAX_RESERVATIONS_PER_FRAME,
    PROTOCOL_VERSION,
)
from orbit_wire.model import AttemptState, Disposition, Role, TaskState

from .. import domain
from ..auth import hash_secret, principal_from_row, require_queue, secret_matches
from ..store import instances
from ..store.credentials import touch_credential
from ..store.receipts import Receipt, answer_result, load_receipts, receipt_row, replay
from ..store.retry import transactional
from ..store.rows import UnitOfWork
from ..store.task_rows import claimed_attempts, task_row
from ..store.views import task_view
from .binding import NO_CLAIMS, ClaimRoom, Presence, WorkerBinding, worker_actor
from .context import TxContext
from .effects import Counted, Effects
from .listing import capabilities_json, labels_json
from .offers import OfferCache
from .policies import PolicyCache
from .recording import fail_at_deadline, record_close, release_all
from .reservations import (
    Reservations,
    audit_started,
    count_start,
    credential_holds,
    reservation,
    reservation_of,
    reserve_for,
    reserve_in,
    reserved_bytes,
    start_granted,
)
from .wakeups import Wakeups

SESSIONS_FULL = "too many worker connections for this credential or server; retry later"
# Evidence of the attempt's own epoch whose kill facts the attempt keeps (domain
# keep_late_facts): the lease ran out before the report came, or the reaper closed it.
_LATE_FACTS_KEPT = frozenset({domain.EvidenceReason.LEASE_EXPIRED,
                              domain.EvidenceReason.ATTEMPT_FINISHED})


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class WorkerService:
    """The worker protocol's use cases; every public method is one transaction. Finishes
    that retry later are scheduled on the shared ``Wakeups``."""

    def __init__(self, tx: TxContext, wakeups: Wakeups, replica: str = "local",
                 offers: OfferCache | None = None, policies: PolicyCache | None = None
                 ) -> None:
        self._tx = tx
        self._wakeups = wakeups
        self._offers = offers
        self._policies = policies if policies is not None else PolicyCache(tx)
        self._replica = replica  # recorded on the instances this server connects

    def worker_hello(self, hello: Hello, admitted: bool = True) -> WorkerBinding:
        """Authenticate a worker and bind or re-attach its instance.

        Raises ProtocolError(UNSUPPORTED_PROTOCOL), AuthError(UNAUTHENTICATED /
        PERMISSION_DENIED), OrbitError(INSTANCE_CONFLICT) when the instance ID is bound to
        another secret, credential or queue, or OrbitError(POLICY_CONFLICT) when a declared
        policy differs from the one registered; then, when the server's session limits leave
        no room (``admitted`` False), a retryable OrbitError(RATE_LIMITED); nothing is kept
        then. Registers the hello's capabilities and declared policies for its queue.
        """
        if hello.protocol != PROTOCOL_VERSION:
            raise ProtocolError(ErrorCode.UNSUPPORTED_PROTOCOL,
                                f"protocol {hello.protocol} is not supported")
        now = self._tx.clock()
        policies = self._policies
        with self._tx.write() as conn:
            row = self._tx.credentials.read(conn, hello.credential_id, now)
            principal = principal_from_row(row, hello.credential_secret, now)
            if principal.role is not Role.WORKER:
                raise AuthError(ErrorCode.PERMISSION_DENIED, "only a worker credential may connect")
            require_queue(principal, hello.queue_id)
            instance = instances.instance_row(conn, hello.instance_id)
            connection = {
                "last_seen_at_ms": now, "replica": self._replica, "agent": hello.agent,
                "capabilities": capabilities_json(dict.fromkeys(hello.capabilities)),
                "slots": hello.capacity, "credit": 0, "connected_at_ms": now,
                "last_heartbeat_at_ms": now, "disconnected_at_ms": None,
                "labels": labels_json(hello.labels),
            }
            if instance is not None and not (
                    secret_matches(hello.instance_secret, instance["secret_hash"])
                    and instance["credential_id"] == hello.credential_id
                    and instance["queue_id"] == hello.queue_id):
                raise OrbitError(ErrorCode.INSTANCE_CONFLICT,
                                 "instance ID is bound to another secret, credential or queue")
            # A conflict is fatal, a full server is not: the conflict is said first (the
            # refusal below rolls back what this wrote).
            registered = policies.register(conn, hello, now)
            if not admitted:
                raise OrbitError(ErrorCode.RATE_LIMITED, SESSIONS_FULL, retryable=True)
            if instance is None:
                instances.insert_instance(conn, {
                    "id": hello.instance_id, "secret_hash": hash_secret(hello.instance_secret),
                    "credential_id": hello.credential_id, "queue_id": hello.queue_id,
                    "created_at_ms": now, **connection,
                })
            else:
                instances.update_instance(conn, hello.instance_id, connection)
            touch_credential(conn, hello.credential_id, now)
            self._tx.credentials.used(hello.credential_id, now)
            self._forget_offers()
        policies.learn(hello.queue_id, registered, now)
        return WorkerBinding(hello.instance_id, hello.credential_id, hello.queue_id,
                             tuple(dict.fromkeys(hello.capabilities)),
                             secret_hash=principal.secret_hash,
                             valid_until_ms=principal.valid_until_ms, connected_at_ms=now,
                             replica=self._replica,
                             grants=FEATURE_GRANT in hello.features,
                             labels=dict(hello.labels or {}))

    def _forget_offers(self) -> None:
        if self._offers is not None:
            self._offers.forget()

    def presence(self, sessions: Sequence[Presence]) -> int:
        """Record that these connections of this replica are alive: seen now, their credit
        and last frame; one executemany. A row another connection took over (a newer hello
        on any replica) is left alone. Returns the rows updated."""
        if not sessions:
            return 0
        now = self._tx.clock()
        with self._tx.write() as conn:
            updated = instances.record_presence(conn, self._replica, now, [
                (p.instance_id, p.connected_at_ms, p.credit, p.last_frame_at_ms)
                for p in sessions
            ])
        return updated

    def release_reservations(self, instance_id: str, connected_at_ms: int | None = None
                             ) -> Effects:
        """The instance's connection ended: every unstarted reservation is released (task
        back to PENDING, available now, no attempt spent). With ``connected_at_ms`` (the
        ended connection's) the instance's row is marked disconnected, unless a newer
        connection has taken it over."""
        effects = Effects()
        with self._tx.write() as conn:
            uow = UnitOfWork(conn, self._tx.clock())
            if connected_at_ms is not None:
                instances.mark_disconnected(conn, instance_id, connected_at_ms,
                                            self._replica, uow.now_ms)
                self._forget_offers()
            for row in instances.reserved_attempts_of(conn, instance_id):
                uow.adopt_attempt_row(row)
            release_all(uow, list(uow.attempts.values()), domain.Rule.SESSION_ENDED,
                        worker_actor(instance_id), effects)
            uow.flush()
        return effects

    def reserve(self, binding: WorkerBinding, count: int) -> Reservations:
        """Claim up to ``count`` dispatchable tasks of the binding's queue and capabilities
        (started too, for a binding with grants): one SELECT, then one executemany each for
        tasks, attempts and audit rows. The caller sends the reservations, spends the
        session's credit on them and acts on their ``effects`` (a grant's lease falls
        due)."""
        count = max(0, min(count, MAX_RESERVATIONS_PER_FRAME))
        binding = self._tx.pauses.narrow(binding)  # paused capabilities start nothing
        if count == 0 or not binding.capabilities:
            return Reservations()
        with self._tx.write() as conn:
            now = self._tx.clock()
            if not credential_holds(self._tx.credentials, conn, binding, now):
                return Reservations()  # the session is closed by the revocation's push
            uow = UnitOfWork(conn, now)
            effects = Effects()
            reservations = reserve_for(uow, binding, count, effects, self._tx.credentials,
                                       self._tx.limits, self._tx.fair)
            if reservations.wake_at_ms is not None:  # a task a rate held
                self._wakeups.schedule(binding.queue_id, reservations.wake_at_ms, now, effects)
            reservations.effects = effects
            uow.flush()
        return reservations

    def apply_ops(self, binding: WorkerBinding, ops: Sequence[Op], room: ClaimRoom = NO_CLAIMS,
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
        transaction into ``effects.terminal_views``.

        Receipts are read only for a resend: ops are first applied as new, and the receipts'
        unique key refuses one that was applied before (receipts are written first); that
        transaction is rolled back and the request runs again with its receipts read."""
        try:
            return self._apply_ops(binding, ops, room, watched, resent=False)
        except IntegrityError:
            return self._apply_ops(binding, ops, room, watched, resent=True)

    def _apply_ops(self, binding: WorkerBinding, ops: Sequence[Op], room: ClaimRoom,
                   watched: Callable[[str], bool] | None, *, resent: bool
                   ) -> tuple[list[OpResult], Effects]:
        now = self._tx.clock()
        effects = Effects()
        with self._tx.write() as conn:
            if not credential_holds(self._tx.credentials, conn, binding, now):
                # Fenced: nothing a revoked or expired credential's session sends is applied
                # (its running attempts end by their leases, as for a vanished worker).
                raise AuthError(ErrorCode.UNAUTHENTICATED,
                                "the worker's credential was revoked or has expired")
            uow = UnitOfWork(conn, now)
            stored = load_receipts(conn, binding.instance_id, [
                op.msg_id for op in ops if not isinstance(op, ResumeOp)]) if resent else {}
            wanted: list[str] = []
            for op in ops:
                if isinstance(op, ResumeOp):
                    wanted.extend(ref.attempt_id for ref in op.attempts)
                elif (isinstance(op, (StartOp, RenewOp, FinishOp, DeclineOp))
                      and op.msg_id not in stored):
                    wanted.append(op.attempt_id)
            uow.load_attempts_and_tasks(wanted)
            results: list[OpResult] = []
            # The claims' answers share one response frame: one payload budget for all.
            payload_left = MAX_PAYLOAD_BYTES_PER_FRAME
            for op in ops:
                if isinstance(op, ClaimOp):
                    may = room if finishes_confirmed(ops, results) else NO_CLAIMS
                    result, used = self._claim(uow, binding, op, stored, may, effects,
                                               payload_left)
                    payload_left -= used
                    results.append(result)
                else:
                    results.append(self._apply_op(uow, binding, op, stored, effects))
            uow.flush()
            if watched is not None:
                for task_id in effects.terminal_tasks:
                    if watched(task_id):
                        row = task_row(conn, task_id)
                        if row is not None:
                            effects.terminal_views[task_id] = task_view(row)
        return results, effects

    # ------------------------------------------------------------------ the ops

    def _claim(self, uow: UnitOfWork, binding: WorkerBinding, op: ClaimOp,
               stored: dict[str, Receipt], room: ClaimRoom, effects: Effects,
               payload_left: int) -> tuple[OpResult, int]:
        """Reserve and start up to ``op.count`` tasks, within ``payload_left`` bytes of
        payload; unfilled slots become credit. Returns the answer and the payload bytes it
        carries. The receipt keeps the attempt IDs; a replay reads them again with their
        current lease and grants no credit (credit belongs to the connection that applied
        the claim)."""
        seen = stored.get(op.msg_id)
        if seen is not None:
            return _replay_claim(uow, op.msg_id, seen)
        now = uow.now_ms
        wanted = min(op.count, MAX_RESERVATIONS_PER_FRAME) if room.allowed else 0
        claimed: list[Reservation] = []
        # Paused capabilities start nothing (the claim's slots become credit).
        made, more, used, wake = (
            reserve_in(uow, self._tx.pauses.narrow(binding), wanted, payload_left,
                       self._tx.limits, self._tx.fair) if wanted
            else ([], False, 0, None))
        if wake is not None:  # a task a rate held: the queue is looked at again then
            self._wakeups.schedule(binding.queue_id, wake, now, effects)
        if more:  # the answer's payload budget, not the queue, ended the claim
            effects.ready_queues.add(binding.queue_id)
        for task, attempt, row in made:
            granted = start_granted(uow, binding, task, attempt, effects, grant=False)
            claimed.append(reservation(task, attempt, row, granted))
        credited = min(op.count - len(claimed), room.credit_room) if room.allowed else 0
        answer = {"ok": True, "claimed": [r.attempt_id for r in claimed], "credited": credited}
        stored[op.msg_id] = (op.op, answer)
        uow.receipt_rows.append(receipt_row(binding.instance_id, op.msg_id, op.op, answer, now))
        return OpResult(op.msg_id, True, claimed=tuple(claimed), credited=credited), used

    def _apply_op(self, uow: UnitOfWork, binding: WorkerBinding, op: Op,
                  stored: dict[str, Receipt], effects: Effects) -> OpResult:
        if isinstance(op, ResumeOp):
            return _resume(uow, binding, op, effects)
        kind = op.op
        seen = stored.get(op.msg_id)
        if seen is not None:
            return replay(op.msg_id, kind, seen, uow.now_ms)
        try:
            answer = self._op_answer(uow, binding, op, effects)
        except OrbitError as exc:
            answer = {"ok": False, "error_code": exc.code.value, "error_message": exc.message}
        stored[op.msg_id] = (kind, answer)
        uow.receipt_rows.append(receipt_row(binding.instance_id, op.msg_id, kind, answer,
                                            uow.now_ms))
        return answer_result(op.msg_id, answer)

    def _op_answer(self, uow: UnitOfWork, binding: WorkerBinding, op: Op,
                   effects: Effects) -> dict[str, Any]:
        if isinstance(op, DrainOp):
            return {"ok": True}
        assert isinstance(op, (StartOp, RenewOp, FinishOp, DeclineOp))
        attempt = uow.attempts.get(op.attempt_id)
        task = uow.tasks.get(attempt.task_id) if attempt is not None else None
        if attempt is None or task is None:
            raise OrbitError(ErrorCode.NOT_FOUND, f"attempt {op.attempt_id} does not exist")
        if isinstance(op, StartOp):
            return _start(uow, binding, task, attempt, op, effects)
        if isinstance(op, DeclineOp):
            back = domain.decline(task, attempt, op.epoch, binding.instance_id, uow.now_ms)
            _record_given_back(uow, binding.actor, task, attempt, "attempt_declined", back,
                               effects, reason=op.reason)
            return {"ok": True}
        if isinstance(op, RenewOp):
            granted = domain.renew(task, attempt, op.epoch, binding.instance_id, uow.now_ms)
            if op.progress is not None:  # None: the attempt's row gets no progress columns
                checked = domain.check_progress(op.progress)
                _record_progress(uow, binding, task, attempt, checked, effects)
                domain.apply_progress(attempt, checked, uow.now_ms)
            effects.due(attempt.lease_expires_at_ms)
            return {"ok": True, "lease_ms": granted,
                    "lease_expires_at_ms": attempt.lease_expires_at_ms}
        return self._finish(uow, binding, task, attempt, op, effects)

    def _finish(self, uow: UnitOfWork, binding: WorkerBinding, task: domain.TaskRec,
                attempt: domain.AttemptRec, op: FinishOp, effects: Effects) -> dict[str, Any]:
        now = uow.now_ms
        report = domain.FinishReport(op.outcome, op.code, op.retryable, op.result_json,
                                     op.details_json, op.report)
        checked = domain.check_report(report)
        before_task = task.state
        known_kill = attempt.kill_reason
        progress = None if op.progress is None else domain.check_progress(op.progress)
        result = domain.finish(task, attempt, op.epoch, binding.instance_id, checked, now,
                               self._tx.rng.random(), progress)
        if progress is not None and result.evidence is None:  # kept on a decided attempt only
            _record_progress(uow, binding, task, attempt, progress, effects)
        if result.evidence is not None:
            if result.evidence in _LATE_FACTS_KEPT and domain.keep_late_facts(
                    attempt, report, now):
                domain.name_late_cause(task, attempt)
            if (result.evidence is domain.EvidenceReason.ATTEMPT_FINISHED
                    and domain.is_reap_follow_up(known_kill, report)):
                # The reap's facts of a kill already recorded: merged, not a late report.
                return {"ok": True, "disposition": Disposition.EVIDENCE_ONLY.value,
                        "task_state": task.state.value}
            counted = effects.counted()
            counted.evidence.append((task.queue_id, result.evidence.value))
            _count_kill(counted, task, attempt, known_kill)
            uow.evidence_rows.append({
                "id": new_id(now), "task_id": task.id, "attempt_id": attempt.id,
                "epoch": op.epoch, "instance_id": binding.instance_id, "received_at_ms": now,
                "outcome": checked.outcome.value, "code": checked.code,
                "reason": result.evidence.value, "result": checked.result,
                "details": checked.details,
            })
            return {"ok": True, "disposition": Disposition.EVIDENCE_ONLY.value,
                    "task_state": task.state.value}
        domain.apply_report_facts(attempt, report, now)
        record_close(uow, self._wakeups, binding.actor, task, attempt, before_task, checked,
                     result, effects)
        _count_kill(effects.counted(), task, attempt, known_kill)
        return {"ok": True, "disposition": Disposition.ACCEPTED.value,
                "task_state": task.state.value}


def _start(uow: UnitOfWork, binding: WorkerBinding, task: domain.TaskRec,
           attempt: domain.AttemptRec, op: StartOp, effects: Effects) -> dict[str, Any]:
    now = uow.now_ms
    before = attempt.state
    try:
        granted = domain.start(task, attempt, op.epoch, binding.instance_id, op.child_pid, now)
    except OrbitError as exc:
        if (exc.code is ErrorCode.LEASE_EXPIRED and attempt.state is AttemptState.RESERVED
                and attempt.instance_id == binding.instance_id and attempt.epoch == op.epoch
                and task.deadline_at_ms <= now):
            # Too late to start: the reservation goes back and the deadline ends the task.
            _release_past_deadline(uow, binding, task, attempt, effects)
        raise
    if before is AttemptState.RESERVED:
        audit_started(uow, binding.instance_id, task, attempt, before, op.child_pid, granted)
        count_start(effects, task, attempt, now)
    effects.due(attempt.lease_expires_at_ms)
    return {"ok": True, "lease_ms": granted, "lease_expires_at_ms": now + granted}


def _release_past_deadline(uow: UnitOfWork, binding: WorkerBinding, task: domain.TaskRec,
                           attempt: domain.AttemptRec, effects: Effects) -> None:
    rule = domain.Rule.DEADLINE_PASSED
    domain.release(task, attempt, uow.now_ms, rule)
    uow.audit(task.id, attempt.id, binding.actor, "attempt_released", TaskState.RUNNING.value,
              task.state.value, {"rule": rule.value})
    if task.state is TaskState.PENDING:
        fail_at_deadline(uow, task, effects)


def _replay_claim(uow: UnitOfWork, msg_id: str, seen: Receipt) -> tuple[OpResult, int]:
    """A resent claim: its attempts again, with their current lease, and no credit."""
    kind, answer = seen
    if kind != "claim":
        return replay(msg_id, "claim", seen, uow.now_ms), 0
    ids = answer["claimed"]
    rows = claimed_attempts(uow.conn, ids)
    claimed = []
    used = 0
    for attempt_id in ids:
        row = rows.get(attempt_id)
        if row is None:
            continue
        used += reserved_bytes(row)
        expires = row["lease_expires_at_ms"]
        held = row["attempt_state"] == AttemptState.RUNNING.value and expires is not None
        claimed.append(reservation_of(row, row["task_id"], attempt_id, row["epoch"],
                                      row["attempt_number"],
                                      max(0, expires - uow.now_ms) if held else 0))
    return OpResult(msg_id, True, claimed=tuple(claimed), credited=0), used


def _resume(uow: UnitOfWork, binding: WorkerBinding, op: ResumeOp,
            effects: Effects) -> OpResult:
    """What the worker may keep of the attempts it lists (each one RUNNING confirms its
    grant), then the unconfirmed grants of the instance's earlier connections that it does
    not list: they never reached it, and go back unspent (docs/protocol.md, "Grants")."""
    entries = []
    for ref in op.attempts:
        attempt = uow.attempts.get(ref.attempt_id)
        task = uow.tasks.get(attempt.task_id) if attempt is not None else None
        status, lease, reason = domain.resume_status(task, attempt, ref.epoch,
                                                     binding.instance_id, uow.now_ms)
        if status is domain.ResumeStatus.RUNNING and attempt is not None:
            domain.confirm_grant(attempt)
        entries.append(ResumeEntry(ref.attempt_id, status.value, lease, reason))
    listed = {ref.attempt_id for ref in op.attempts}
    unreceived = [row for row in instances.unconfirmed_grants_of(uow.conn, binding.instance_id)
                  if row["id"] not in listed
                  and row["grant_connection"] != binding.connected_at_ms]
    if unreceived:
        uow.load_attempts_and_tasks([row["id"] for row in unreceived])
        for row in unreceived:
            attempt = uow.attempts[row["id"]]
            task = uow.tasks[attempt.task_id]
            back = domain.release_unreceived(task, attempt, uow.now_ms)
            _record_given_back(uow, binding.actor, task, attempt, "attempt_released", back,
                               effects)
    return OpResult(op.msg_id, True, attempts=tuple(entries))


def _record_given_back(uow: UnitOfWork, actor: str, task: domain.TaskRec,
                       attempt: domain.AttemptRec, kind: str, back: bool, effects: Effects,
                       reason: str | None = None) -> None:
    """Audit a grant given back unspent; its task is dispatchable again (or, past its
    deadline, ends there)."""
    detail: dict[str, Any] = {"rule": attempt.decision_rule}
    if reason is not None:
        detail["reason"] = reason
    uow.audit(task.id, attempt.id, actor, kind, TaskState.RUNNING.value, task.state.value,
              detail)
    effects.counted().grants_given_back.append((task.queue_id, str(attempt.decision_rule)))
    if back:
        if task.deadline_at_ms <= uow.now_ms:
            fail_at_deadline(uow, task, effects)
        else:
            effects.ready_queues.add(task.queue_id)


def _record_progress(uow: UnitOfWork, binding: WorkerBinding, task: domain.TaskRec,
                     attempt: domain.AttemptRec, checked: domain.CheckedProgress,
                     effects: Effects) -> None:
    """A progress report kept: counted, and details the value rules refused audited with
    their code (the fraction and the op itself still apply)."""
    refused = checked.refused
    effects.counted().progress.append(
        (task.queue_id, "stored" if refused is None else refused.value))
    if refused is not None:
        uow.audit(task.id, attempt.id, binding.actor, "progress_refused", task.state.value,
                  task.state.value, {"code": refused.value})


def _count_kill(counted: Counted, task: domain.TaskRec, attempt: domain.AttemptRec,
                known: str | None) -> None:
    """A kill for the metrics, once per attempt: the report that first told of it (a
    follow-up with the reap's facts repeats the reason)."""
    if known is None and attempt.kill_reason is not None:
        counted.kills.append((task.queue_id, attempt.kill_reason))


def finishes_confirmed(ops: Sequence[Op], results: Sequence[OpResult]) -> bool:
    """True when every ``finish`` among ``ops`` answered so far was ok: a claim after them
    offers the slots those finishes free, so it applies only then (docs/protocol.md)."""
    return all(result.ok for op, result in zip(ops, results, strict=False)  # results so far
               if isinstance(op, FinishOp))
