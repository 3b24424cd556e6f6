"""Running ended tasks again: a FAILED or CANCELLED task back to PENDING with a new run's
budget (docs/http-api.md "Retrying ended tasks"), one task by ID or a queue's tasks that
match a filter, one page per transaction; and every other bulk action by filter (cancel, a
review's retry / succeed / fail: docs/flow-control.md "Bulk actions") walks the same way.
Every public method is one transaction.

A bulk action walks the task list's own index order (``domain.listing``: the same filter,
keyset position and page cut as ``GET /v1/queues/{id}/tasks``), oldest first; its driver
(orbit_server/retrying.py) calls ``act_page`` until the list ends, so the store thread
serves workers between pages. Each changed task gets its own audit row (``bulk``: true).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection

from orbit_wire.errors import OrbitError
from orbit_wire.model import Role, TaskState

from .. import domain
from ..auth import Principal, queue_not_found, require_role, require_visible_queue
from ..domain.listing import Position, TaskFilter, cut_page
from ..store import listing as listed
from ..store import task_rows
from ..store.queues import queue_exists
from ..store.retry import transactional
from ..store.rows import UnitOfWork
from ..store.views import task_view
from .context import TxContext
from .effects import Effects
from .tasks import (
    _check_reason,
    _task_row,
    cancel_adopted,
    keep_budget,
    review_row,
    reviewed,
    run_start,
)
from .wakeups import Wakeups

_PRODUCERS = (Role.ADMIN, Role.PRODUCER)
# The states a retry takes a task from.
RETRYABLE_STATES = (TaskState.FAILED, TaskState.CANCELLED)


class BulkAction(StrEnum):
    """What a bulk action does to each matching task."""

    RETRY = "retry"  # FAILED or CANCELLED run again
    CANCEL = "cancel"
    REVIEW_RETRY = "review_retry"  # NEEDS_REVIEW resolved as a review would
    REVIEW_SUCCEED = "review_succeed"
    REVIEW_FAIL = "review_fail"

    @property
    def review(self) -> domain.ReviewAction | None:
        return _REVIEWS.get(self)


_REVIEWS = {BulkAction.REVIEW_RETRY: domain.ReviewAction.RETRY,
            BulkAction.REVIEW_SUCCEED: domain.ReviewAction.SUCCEED,
            BulkAction.REVIEW_FAIL: domain.ReviewAction.FAIL}


@dataclass(frozen=True, slots=True)
class BulkChange:
    """One bulk action with what it records: the reason, and the result a review's succeed
    stores (JSON text, checked by the caller)."""

    action: BulkAction
    reason: str | None = None
    result_json: str | None = None


@dataclass(frozen=True, slots=True)
class RetryPage:
    """One page of a bulk retry: the tasks it matched, those it retried (none on a dry run)
    and those it left (moved on meanwhile, or a cancelled attempt still without outcome),
    and where the next page starts (None: the list ended)."""

    matched: int
    retried: int
    skipped: int
    after: Position | None


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class RetryService:
    """Operator retries of ended tasks; the queue becomes dispatchable at once."""

    def __init__(self, tx: TxContext, wakeups: Wakeups) -> None:
        self._tx = tx
        self._wakeups = wakeups

    def retry_task(self, principal: Principal, task_id: str, reason: str | None
                   ) -> tuple[dict[str, Any], Effects]:
        """FAILED or CANCELLED → PENDING with a new run's budget; CONFLICT in any other
        state (the state tables say which)."""
        _check_reason(reason)
        now = self._tx.clock()
        effects = Effects()
        with self._tx.write() as conn:
            row = _task_row(conn, principal, task_id)
            uow = UnitOfWork(conn, now)
            task = self._rerun(conn, uow, row, principal, reason, False)
            uow.flush()
            out = task_rows.task_row(conn, task_id)
            assert out is not None
        self._retried([task], now, effects)
        return task_view(out), effects

    def retry_page(self, principal: Principal, queue_id: str, filt: TaskFilter,
                   reason: str | None, dry_run: bool) -> tuple[RetryPage, Effects]:
        """The next page of a bulk retry (``act_page`` with RETRY)."""
        return self.act_page(principal, queue_id, filt, BulkChange(BulkAction.RETRY, reason),
                             dry_run)

    def act_page(self, principal: Principal, queue_id: str, filt: TaskFilter,
                 change: BulkChange, dry_run: bool) -> tuple[RetryPage, Effects]:
        """The next page of the queue's tasks matching ``filt`` (its states those the
        action takes tasks from; its ``after`` is where this page starts), counted, and
        changed unless ``dry_run``. A task that moved on since the page was read is left
        (skipped)."""
        require_role(principal, _PRODUCERS)
        require_visible_queue(principal, queue_id)
        _check_reason(change.reason)
        now = self._tx.clock()
        effects = Effects()
        context = self._tx.read() if dry_run else self._tx.write()
        changed: list[domain.TaskRec] = []
        with context as conn:
            if not queue_exists(conn, queue_id):
                raise queue_not_found(queue_id)
            page, after = cut_page(filt, [listed.state_range_rows(conn, filt, queue_id)])
            if not dry_run and page:
                uow = UnitOfWork(conn, now)
                for row in task_rows.task_rows(conn, [str(r["id"]) for r in page]):
                    try:
                        task = self._step(conn, uow, row, principal, change, effects)
                    except OrbitError:
                        continue  # moved on since the page was read: left as it is
                    if task is not None:
                        changed.append(task)
                uow.flush()
        self._after(changed, change, now, effects)
        skipped = 0 if dry_run else len(page) - len(changed)
        return RetryPage(len(page), len(changed), skipped, after), effects

    def _step(self, conn: Connection, uow: UnitOfWork, row: Mapping[Any, Any],
              principal: Principal, change: BulkChange, effects: Effects
              ) -> domain.TaskRec | None:
        """One task's change, audited; None when there was nothing to change."""
        review = change.action.review
        if review is not None:
            return review_row(conn, uow, row, principal.operator, review, change.result_json,
                              change.reason, self._tx.config.kill_grace_ms, bulk=True)
        if change.action is BulkAction.CANCEL:
            task = uow.adopt_task_row(row)
            return task if cancel_adopted(conn, uow, task, principal.actor, change.reason,
                                          effects, bulk=True) else None
        return self._rerun(conn, uow, row, principal, change.reason, True)

    def _rerun(self, conn: Connection, uow: UnitOfWork, row: Mapping[Any, Any],
               principal: Principal, reason: str | None, bulk: bool) -> domain.TaskRec:
        task = uow.adopt_task_row(row)
        before, limit = task.state, task.max_attempts
        budget, not_before = run_start(conn, uow, row, self._tx.config.kill_grace_ms)
        # A workflow node some of whose parents never let it run has no results to run with.
        unreleased = bool(row.get("parents_left"))
        domain.rerun(task, budget, uow.now_ms, not_before, unreleased)  # checks, then changes
        keep_budget(conn, row, budget)
        detail: dict[str, Any] = {"max_attempts": [limit, task.max_attempts]}
        if reason:
            detail["reason"] = reason
        if bulk:
            detail["bulk"] = True
        uow.audit(task.id, None, principal.operator, "task_retried", before, task.state,
                  detail)
        return task

    def _after(self, changed: list[domain.TaskRec], change: BulkChange, now: int,
               effects: Effects) -> None:
        """After a page: a review's effects, or those of the retries below."""
        review = change.action.review
        if review is not None:
            reviewed(changed, review, self._wakeups, now, effects)
        elif change.action is BulkAction.RETRY:
            self._retried(changed, now, effects)

    def _retried(self, retried: list[domain.TaskRec], now: int, effects: Effects) -> None:
        """Make the retried tasks' queues dispatchable and the reaper watch their
        deadlines."""
        for queue_id in {t.queue_id for t in retried}:
            first = min(t.available_at_ms for t in retried if t.queue_id == queue_id)
            self._wakeups.schedule(queue_id, first, now, effects)
        if retried:
            effects.due(min(t.deadline_at_ms for t in retried))
            counted = effects.counted()
            for task in retried:
                counted.retries.append(task.queue_id)
