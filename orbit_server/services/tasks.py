"""The producer's and the operator's use cases: submit (alone, or claiming for a waiting
worker in the same transaction), read a task, its attempts and its audit trail, cancel,
review, and a queue's stats. Every public method is one transaction.

``submit`` is a hot path: one SELECT for the queue, one per 500 operation keys if the specs
carry any, then one executemany each for tasks and audit rows, never a statement per task.
The policy registered for each capability comes from memory (``PolicyCache``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id, new_id
from orbit_wire.jsonvalue import encode_value
from orbit_wire.labels import requires_key
from orbit_wire.limits import MAX_RESERVATIONS_PER_FRAME, MAX_SUBMIT_BATCH
from orbit_wire.model import Role, TaskState

from .. import domain
from ..auth import (
    Principal,
    queue_not_found,
    require_role,
    require_visible_queue,
    task_not_found,
)
from ..domain.fairness import fair_value
from ..store import fairness, task_rows, workflow_rows
from ..store.fairness import fairness_of_queue
from ..store.listing import (
    oldest_pending_created,
    pending_by_rank,
    running_attempts_of_queue,
    state_counts_of_queue,
)
from ..store.queues import queue_exists
from ..store.retry import transactional
from ..store.rows import UnitOfWork
from ..store.tables import priority_of, rank_of
from ..store.views import attempt_view, audit_view, evidence_view, task_view
from . import flow
from .binding import WorkerBinding
from .context import TxContext
from .effects import Effects
from .listing import capability_stats, with_waiting
from .offers import OfferCache
from .pauses import paused_views
from .policies import PolicyCache
from .pushes import PushKind, record_push
from .reservations import Reservations, reserve_for
from .wakeups import Wakeups

_PRODUCERS = (Role.ADMIN, Role.PRODUCER)
_WAITING = TaskState.WAITING.value
_PENDING = TaskState.PENDING.value  # read once: an enum's .value is a property call
_KNOWN_QUEUES_MAX = 100_000

# (Task view, created) per submitted spec, in order.
Submitted = list[tuple[dict[str, Any], bool]]


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class TaskService:
    """Tasks as producers and operators see them. Reviews that retry later are scheduled
    on the shared ``Wakeups``."""

    def __init__(self, tx: TxContext, wakeups: Wakeups,
                 offers: OfferCache | None = None, policies: PolicyCache | None = None
                 ) -> None:
        self._tx = tx
        self._wakeups = wakeups
        self._offers = offers if offers is not None else OfferCache(tx, max_age_ms=0)
        self._policies = policies if policies is not None else PolicyCache(tx)
        # Queues seen to exist: a queue is never deleted, so one look-up each is enough (a
        # group commit that rolled back may have seen one it created: forgotten then).
        self._known_queues: set[str] = set()
        tx.on_group_rollback(self._known_queues.clear)

    def submit(self, principal: Principal, queue_id: str,
               specs: list[object]) -> tuple[Submitted, Effects]:
        """Create tasks, all or nothing. Returns (Task view, created) per spec, in order; a
        spec whose operation key already exists in the queue answers the existing task."""
        made, effects, _ = self._submit(principal, queue_id, specs, None, 0)
        return made, effects

    def submit_and_reserve(self, principal: Principal, queue_id: str, specs: list[object],
                           binding: WorkerBinding | None, count: int
                           ) -> tuple[Submitted, Effects, Reservations]:
        """``submit``, then in the SAME transaction reserve up to ``count`` tasks for a worker of
        this queue that is waiting with credit (``binding``; None: ``submit`` alone): the new
        task reaches it without a separate dispatch transaction. The caller sends the
        reservations. ``effects.ready_queues`` is left empty when that worker took every task
        this call created (no other session needs a hint for them)."""
        return self._submit(principal, queue_id, specs, binding,
                            max(0, min(count, MAX_RESERVATIONS_PER_FRAME)))

    def _submit(self, principal: Principal, queue_id: str, specs: list[object],
                binding: WorkerBinding | None, count: int
                ) -> tuple[Submitted, Effects, Reservations]:
        require_role(principal, _PRODUCERS)
        require_visible_queue(principal, queue_id)
        if not isinstance(specs, list) or not specs:
            raise OrbitError(ErrorCode.BAD_REQUEST, "at least one task is required")
        if len(specs) > MAX_SUBMIT_BATCH:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"at most {MAX_SUBMIT_BATCH} tasks at once")
        parsed = [domain.parse_task_spec(s, "task" if len(specs) == 1 else f"tasks[{i}]")
                  for i, s in enumerate(specs)]
        now = self._tx.clock()
        try:
            # Operation keys are looked up only for a resend: the tasks are first inserted
            # as new, and the unique key on (queue, operation key) refuses one that exists;
            # that block rolls back and runs again with the keys looked up.
            try:
                return self._insert(principal, queue_id, parsed, binding, count, now,
                                    resent=False)
            except IntegrityError:
                return self._insert(principal, queue_id, parsed, binding, count, now,
                                    resent=True)
        except IntegrityError:
            # Another replica inserted the same operation key first; a retry finds it.
            raise OrbitError(ErrorCode.UNAVAILABLE, "operation key raced; retry",
                             retryable=True) from None

    def _insert(self, principal: Principal, queue_id: str, parsed: list[domain.TaskSpec],
                binding: WorkerBinding | None, count: int, now: int, *, resent: bool
                ) -> tuple[Submitted, Effects, Reservations]:
        reservations = Reservations()
        effects = Effects()
        with self._tx.write() as conn:
            self._require_queue(conn, queue_id)
            out, new_rows = insert_tasks(
                conn, queue_id, parsed, principal.actor, now, policies=self._policies,
                fair_key=self._tx.fair.key_name(conn, queue_id, now),
                look_up_keys=resent)
            if (new_rows and binding is not None and count > 0
                    and binding.queue_id == queue_id):
                uow = UnitOfWork(conn, now)
                reservations = reserve_for(uow, self._tx.pauses.narrow(binding), count,
                                           effects, self._tx.credentials, self._tx.limits,
                                           self._tx.fair)
                if reservations.wake_at_ms is not None:  # a task a rate held
                    self._wakeups.schedule(queue_id, reservations.wake_at_ms, now,
                                           effects)
                uow.flush()
            pauses = self._tx.pauses.current
            # A live worker serves them (binding): nothing to say, unless paused or they
            # require labels it may lack.
            if (binding is None or pauses
                    or any(v["policy"]["requires"] for v, _ in out)):
                offers = self._offers.offers(conn, queue_id, now)
                seen: dict[tuple[Any, ...], Any] = {}
                for view, _created in out:
                    if view["state"] == _PENDING:
                        with_waiting(view, offers, seen, pauses)
        if new_rows:
            effects.counted().submitted.append((queue_id, len(new_rows)))
        claimed = {r.task_id for r in reservations}
        later = [row["available_at_ms"] for row in new_rows if row["available_at_ms"] > now]
        if any(row["id"] not in claimed and row["available_at_ms"] <= now for row in new_rows):
            effects.ready_queues.add(queue_id)
        if later:
            self._wakeups.schedule(queue_id, min(later), now, effects)
        if new_rows:  # the reaper fails a task still PENDING at these instants
            effects.due(min(row["deadline_at_ms"] for row in new_rows))
            effects.due(min((row["start_by_at_ms"] for row in new_rows
                             if row["start_by_at_ms"] is not None), default=None))
        return out, effects, reservations

    def _require_queue(self, conn: Connection, queue_id: str) -> None:
        if queue_id in self._known_queues:
            return
        if not queue_exists(conn, queue_id):
            raise queue_not_found(queue_id)
        if len(self._known_queues) >= _KNOWN_QUEUES_MAX:
            self._known_queues.clear()
        self._known_queues.add(queue_id)

    def get_task(self, principal: Principal, task_id: str) -> dict[str, Any]:
        """The Task view; NOT_FOUND also for a task of a queue the principal may not use."""
        with self._tx.read() as conn:
            row = _task_row(conn, principal, task_id)
            view = task_view(row)
            if view["state"] == _WAITING:  # a workflow node: blocked by a review?
                view["waiting"] = workflow_rows.blocking_review(conn, task_id)
            elif view["state"] == TaskState.PENDING.value:
                now = self._tx.clock()
                with_waiting(view, self._offers.offers(conn, view["queue_id"], now),
                             pauses=self._tx.pauses.current)
                if view["waiting"] is None and row["limit_keys"]:
                    held = flow.held_now(conn, row["queue_id"], flow.row_keys(row),
                                         self._tx.limits.limits(conn, row["queue_id"], now),
                                         now)
                    view["waiting"] = None if held is None else held.waiting()
            return view

    def get_tasks(self, principal: Principal, task_ids: Sequence[str]
                  ) -> dict[str, dict[str, Any]]:
        """The views of those of ``task_ids`` the principal may read, by ID (one read for all;
        a task of another queue is left out exactly as one that does not exist)."""
        require_role(principal, _PRODUCERS)
        wanted = [t for t in dict.fromkeys(task_ids) if is_id(t)]
        with self._tx.read() as conn:
            return {row["id"]: task_view(row) for row in task_rows.task_rows(conn, wanted)
                    if principal.may_use_queue(row["queue_id"])}

    def list_attempts(self, principal: Principal, task_id: str) -> dict[str, Any]:
        """A task's attempts (by epoch) and the evidence stored for it."""
        with self._tx.read() as conn:
            _task_row(conn, principal, task_id)
            attempt_views = [attempt_view(r) for r in task_rows.attempts_of_task(conn, task_id)]
            evidence_rows = task_rows.evidence_of_task(conn, task_id)
            return {"attempts": attempt_views,
                    "evidence": [evidence_view(r) for r in evidence_rows]}

    def audit_trail(self, principal: Principal, task_id: str) -> dict[str, Any]:
        """A task's audit events, oldest first."""
        with self._tx.read() as conn:
            _task_row(conn, principal, task_id)
            rows = task_rows.audit_of_task(conn, task_id)
            return {"events": [audit_view(r) for r in rows]}

    def cancel_task(self, principal: Principal, task_id: str, reason: str | None
                    ) -> tuple[dict[str, Any], Effects]:
        """PENDING/NEEDS_REVIEW end CANCELLED at once; RUNNING ends CANCELLED and its worker
        is told (Effects.cancels). Idempotent on CANCELLED; CONFLICT on SUCCEEDED/FAILED."""
        _check_reason(reason)
        now = self._tx.clock()
        effects = Effects()
        with self._tx.write() as conn:
            uow, task = _adopt_task(conn, principal, task_id, now)
            if cancel_adopted(conn, uow, task, principal.actor, reason, effects):
                uow.flush()
            out = _written_task_row(conn, task_id)
        return task_view(out), effects

    def review(self, principal: Principal, task_id: str, action: str, result: object,
               reason: str | None) -> tuple[dict[str, Any], Effects]:
        """Resolve NEEDS_REVIEW (retry / succeed / fail); CONFLICT in any other state."""
        try:
            review_action = domain.ReviewAction(action)
        except ValueError:
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             "action must be one of retry, succeed, fail") from None
        _check_reason(reason)
        result_json = None
        if review_action is domain.ReviewAction.SUCCEED:
            if result is None:
                raise OrbitError(ErrorCode.BAD_REQUEST, "succeed needs a non-null result")
            result_json = encode_value(result, what="result").decode()
        now = self._tx.clock()
        effects = Effects()
        with self._tx.write() as conn:
            row = _task_row(conn, principal, task_id)
            uow = UnitOfWork(conn, now)
            task = review_row(conn, uow, row, principal.operator, review_action, result_json,
                              reason, self._tx.config.kill_grace_ms)
            uow.flush()
            out = _written_task_row(conn, task_id)
        reviewed([task], review_action, self._wakeups, now, effects)
        return task_view(out), effects

    def queue_stats(self, principal: Principal, queue_id: str) -> dict[str, Any]:
        """Task counts by state, running attempts and the oldest pending task's age."""
        require_role(principal, _PRODUCERS)
        require_visible_queue(principal, queue_id)
        now = self._tx.clock()
        with self._tx.read() as conn:
            if not queue_exists(conn, queue_id):
                raise queue_not_found(queue_id)
            counts = {s.value: 0 for s in TaskState}
            counts.update(state_counts_of_queue(conn, queue_id))
            running = running_attempts_of_queue(conn, queue_id)
            oldest = oldest_pending_created(conn, queue_id)
            by_capability = capability_stats(conn, queue_id, now, self._tx.config.session_ttl_ms,
                                             self._tx.pauses.current)
            paused = paused_views(conn, [queue_id])[queue_id]
            fair = fairness_of_queue(conn, queue_id)
            by_priority: dict[str, int] = {}
            delayed = 0
            for rank, later, count in pending_by_rank(conn, queue_id, now):
                key = str(priority_of(rank))
                by_priority[key] = by_priority.get(key, 0) + count
                delayed += count if later else 0
        return {
            "queue_id": queue_id,
            "counts": counts,
            "running_attempts": running,
            "oldest_pending_age_ms": None if oldest is None else max(0, now - oldest),
            "capabilities": by_capability,
            # PENDING tasks by priority (highest first), and how many of them wait for a
            # delay or a retry backoff (available_at_ms still ahead).
            "pending_by_priority": dict(sorted(by_priority.items(), key=lambda kv: -int(kv[0]))),
            "pending_delayed": delayed,
            # The pauses in force (docs/flow-control.md "Pause and resume").
            "paused": paused,
            # The fair dispatch key name (docs/flow-control.md "Fair dispatch"), or None.
            "fair": None if fair is None else fair["key_name"],
        }


def cancel_adopted(conn: Connection, uow: UnitOfWork, task: domain.TaskRec, actor: str,
                   reason: str | None, effects: Effects, bulk: bool = False) -> bool:
    """Cancel a task ``uow`` holds (its running attempt's worker told, here or through its
    replica's push) and audit it; False when it was CANCELLED already. CONFLICT on
    SUCCEEDED or FAILED (the state tables say)."""
    now = uow.now_ms
    attempt = None
    if task.current_attempt_id is not None:
        uow.load_attempts([task.current_attempt_id])
        attempt = uow.attempts.get(task.current_attempt_id)
    before = task.state
    before_attempt = attempt.state if attempt is not None else None
    if not domain.cancel(task, attempt, now):
        return False
    detail: dict[str, Any] = {"reason": reason} if reason else {}
    if bulk:
        detail["bulk"] = True
    if attempt is not None and before is TaskState.RUNNING:
        detail["attempt_state"] = [before_attempt, attempt.state]
        effects.cancels.append((attempt.instance_id, attempt.id, attempt.epoch))
        # For the replica the worker is connected to, if it is another one.
        record_push(conn, now, PushKind.CANCEL, instance_id=attempt.instance_id,
                    attempt_id=attempt.id, epoch=attempt.epoch)
    uow.audit(task.id, attempt.id if attempt else None, actor, "task_cancelled", before,
              task.state, detail)
    effects.terminal_tasks.append(task.id)
    return True


def review_row(conn: Connection, uow: UnitOfWork, row: Mapping[Any, Any], actor: str,
               action: domain.ReviewAction, result_json: str | None, reason: str | None,
               kill_grace_ms: int, bulk: bool = False) -> domain.TaskRec:
    """Resolve the NEEDS_REVIEW task of ``row`` in ``uow`` and audit it (CONFLICT in any
    other state); the caller flushes and calls ``reviewed``."""
    reason_json = orjson.dumps({"reason": reason} if reason else {}).decode()
    task = uow.adopt_task_row(row)
    before = task.state
    budget, not_before = run_start(conn, uow, row, kill_grace_ms)
    domain.review(task, action, result_json, reason_json, uow.now_ms, not_before)
    if action is domain.ReviewAction.RETRY:  # its limits may have risen
        keep_budget(conn, row, budget)
    detail: dict[str, Any] = {"action": action.value, **({"reason": reason} if reason else {})}
    if bulk:
        detail["bulk"] = True
    uow.audit(task.id, None, actor, "task_reviewed", before, task.state, detail)
    return task


def reviewed(tasks: Sequence[domain.TaskRec], action: domain.ReviewAction, wakeups: Wakeups,
             now: int, effects: Effects) -> None:
    """After reviews committed: wake the waiters of ended tasks, make retried ones
    dispatchable, count them."""
    for task in tasks:
        if task.state is not TaskState.PENDING:
            effects.terminal_tasks.append(task.id)
        else:
            wakeups.schedule(task.queue_id, task.available_at_ms, now, effects)
        effects.counted().reviews.append((task.queue_id, action.value))


def insert_tasks(conn: Connection, queue_id: str, parsed: list[domain.TaskSpec], actor: str,
                 now: int, detail: str | None = None, *, policies: PolicyCache,
                 fair_key: str | None = None, look_up_keys: bool = True
                 ) -> tuple[Submitted, list[dict[str, Any]]]:
    """Insert the tasks of ``parsed`` into an existing queue in the caller's transaction,
    each with its ``task_submitted`` audit row (``detail``: JSON text or None) and the
    policy fields it left out taken from the capability's registered policy; a spec whose
    operation key exists answers that task. Returns (view, created) per spec and the new
    rows. An operation key inserted meanwhile by another writer raises IntegrityError, and
    so does an existing one when ``look_up_keys`` is False (the keys are not read first).
    ``fair_key``: the queue's fair key name (each task ready to run takes its turn by it)."""
    out: Submitted = []
    new_rows: list[dict[str, Any]] = []
    fresh_specs: list[domain.TaskSpec] = []
    keyed: dict[str, Mapping[Any, Any]] = {}
    if look_up_keys:
        keyed = task_rows.tasks_by_operation_key(
            conn, queue_id, [s.operation_key for s in parsed if s.operation_key])
    for spec in parsed:
        if spec.operation_key is not None and spec.operation_key in keyed:
            existing = keyed[spec.operation_key]
            _same_spec(existing, spec)
            out.append((task_view(existing), False))
            continue
        spec = domain.resolve_policy(
            spec, policies.registered(conn, queue_id, spec.capability, now))
        row = _new_task_row(queue_id, spec, now)
        new_rows.append(row)
        fresh_specs.append(spec)
        if spec.operation_key is not None:
            keyed[spec.operation_key] = row
        out.append((task_view(row), True))
    if fair_key is not None:  # ready fair tasks take their turns now, the rest when ready
        fairness.number(conn, queue_id, [(row, fair_value(spec.limit_keys, fair_key))
                                         for row, spec in zip(new_rows, fresh_specs, strict=True)
                                         if row["available_at_ms"] <= now])
    if new_rows:
        task_rows.insert_new_tasks(conn, new_rows, [
            {"task_id": r["id"], "attempt_id": None, "at_ms": now, "actor": actor,
             "kind": "task_submitted", "from_state": None,
             "to_state": _PENDING, "detail": detail}
            for r in new_rows
        ])
    return out, new_rows


def _task_row(conn: Connection, principal: Principal, task_id: str) -> Mapping[Any, Any]:
    """The task's row, if the principal is a producer (or admin) of its queue."""
    require_role(principal, _PRODUCERS)
    row = task_rows.task_row(conn, task_id) if is_id(task_id) else None
    if row is None or not principal.may_use_queue(row["queue_id"]):
        raise task_not_found(task_id)  # the same answer for "not yours": nothing is revealed
    return row


def run_start(conn: Connection, uow: UnitOfWork, row: Mapping[Any, Any],
              kill_grace_ms: int) -> tuple[domain.RunBudget, int]:
    """What a new run of the task in ``row`` may spend (a review's retry, an operator's
    retry), and the earliest instant its first attempt may start (after the last one's
    lost lease and kill grace)."""
    budget = domain.run_budget(row["max_attempts"], row["deadline_at_ms"], row["created_at_ms"],
                               row["run_max_attempts"], row["run_deadline_ms"])
    last = task_rows.last_attempt_of_task(conn, row["id"])
    not_before = domain.retry_not_before(
        uow.adopt_attempt_row(last) if last is not None else None, kill_grace_ms)
    return budget, not_before


def keep_budget(conn: Connection, row: Mapping[Any, Any], budget: domain.RunBudget) -> None:
    """Keep one run's budget on the task once its limits were first raised (later runs get
    the submitted budget, not the raised one)."""
    if row["run_max_attempts"] is None:
        task_rows.keep_run_budget(conn, row["id"], budget.max_attempts, budget.deadline_ms)


def _written_task_row(conn: Connection, task_id: str) -> Mapping[Any, Any]:
    """The row of a task this transaction holds (adopted above, so it exists)."""
    row = task_rows.task_row(conn, task_id)
    assert row is not None
    return row


def _adopt_task(conn: Connection, principal: Principal, task_id: str,
                now: int) -> tuple[UnitOfWork, domain.TaskRec]:
    """A unit of work holding the principal's task, for a state change in this transaction."""
    uow = UnitOfWork(conn, now)
    return uow, uow.adopt_task_row(_task_row(conn, principal, task_id))


def _check_reason(reason: str | None) -> None:
    if reason is not None and (not isinstance(reason, str) or len(reason) > 1024):
        raise OrbitError(ErrorCode.BAD_REQUEST, "reason must be a string of at most 1024 chars")


def _new_task_row(queue_id: str, spec: domain.TaskSpec, now: int) -> dict[str, Any]:
    policy = spec.policy
    cap = spec.capability
    start = spec.start_at(now)
    return {
        "id": new_id(now), "queue_id": queue_id, "state": _PENDING,
        "handler": cap.handler, "handler_version": cap.handler_version,
        "payload_version": cap.payload_version, "payload": spec.payload_json,
        "idempotency": policy.idempotency.value, "max_attempts": policy.max_attempts,
        "backoff_initial_ms": policy.backoff.initial_ms,
        "backoff_max_ms": policy.backoff.max_ms,
        "backoff_multiplier": policy.backoff.multiplier,
        "backoff_jitter": policy.backoff.jitter,
        "attempt_timeout_ms": policy.attempt_timeout_ms, "lease_ttl_ms": policy.lease_ttl_ms,
        "deadline_at_ms": start + policy.deadline_ms, "operation_key": spec.operation_key,
        "created_at_ms": now, "updated_at_ms": now, "available_at_ms": start, "epoch": 0,
        "attempts_started": 0, "uncertain": False, "result": None, "failure_code": None,
        "failure_details": None, "cancel_requested": False, "current_attempt_id": None,
        "finished_at_ms": None, "schedule_to_start_ms": policy.schedule_to_start_ms,
        "start_by_at_ms": (None if policy.schedule_to_start_ms is None
                           else now + policy.schedule_to_start_ms),
        "spec_digest": spec.digest or None,
        "dispatch_rank": rank_of(spec.priority),
        "cancel_grace_ms": policy.cancel_grace_ms,
        "policy_source": spec.policy_source.value,
        "progress_timeout_ms": policy.progress_timeout_ms, "checkpoint": None,
        "requires": policy.requires, "requires_key": requires_key(policy.requires),
        "limit_keys": orjson.dumps(list(spec.limit_keys)).decode() if spec.limit_keys else None,
    }


def _same_spec(existing: Mapping[Any, Any], spec: domain.TaskSpec) -> None:
    """CONFLICT when an operation key already names a task submitted with another spec
    (tasks from before digests were kept are not compared)."""
    digest = existing["spec_digest"]
    if digest is not None and spec.digest and digest != spec.digest:
        raise OrbitError(ErrorCode.CONFLICT,
                         f"operation key {spec.operation_key!r} already names task "
                         f"{existing['id']}, submitted with a different spec")
new_task_row = _new_task_row  # a workflow's nodes are made the same way
