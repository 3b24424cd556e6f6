"""What the use cases record after the rules released or closed an attempt, or failed a task
at its deadline: the audit rows, the wake-ups and the ``Effects``. Shared by the worker
protocol and the reaper, which reach the same ends by different roads (a worker's report or
a lapsed lease, a closed connection or a stale reservation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orbit_wire.model import TaskState

from .. import domain
from ..store.rows import UnitOfWork
from .effects import Effects
from .wakeups import Wakeups

SERVER = "server"  # the actor of what the server decides by itself (reaper, deadlines)


def release_all(uow: UnitOfWork, attempts: Sequence[domain.AttemptRec], rule: domain.Rule,
                actor: str, effects: Effects) -> None:
    """Release these RESERVED attempts (their tasks back to PENDING, available now)."""
    uow.load_tasks(a.task_id for a in attempts)
    for attempt in attempts:
        task = uow.tasks[attempt.task_id]
        before = task.state
        if domain.release(task, attempt, uow.now_ms, rule):
            effects.ready_queues.add(task.queue_id)
        uow.audit(task.id, attempt.id, actor, "attempt_released", before, task.state,
                  {"rule": rule.value})


def record_close(uow: UnitOfWork, wakeups: Wakeups, actor: str, task: domain.TaskRec,
                 attempt: domain.AttemptRec, before_task: TaskState,
                 checked: domain.CheckedReport, result: domain.FinishResult,
                 effects: Effects) -> None:
    """Audit an attempt that ``domain.finish`` or ``domain.expire`` just closed, schedule
    its task's retry, and wake the task's long polls if it settled."""
    detail: dict[str, Any] = {
        "outcome": checked.outcome.value, "code": checked.code,
        "decision": attempt.decision, "rule": attempt.decision_rule,
    }
    verdict = result.verdict
    if verdict is not None and verdict.available_at_ms is not None:
        detail["next_attempt_at_ms"] = verdict.available_at_ms
        wakeups.schedule(task.queue_id, verdict.available_at_ms, uow.now_ms, effects)
    uow.audit(task.id, attempt.id, actor, "attempt_finished", before_task.value,
              task.state.value, detail)
    effects.counted().ended.append((task.queue_id, checked.outcome.value, checked.code or "",
                                    attempt.decision or ""))
    if task.state.settled and before_task is not task.state:
        effects.terminal_tasks.append(task.id)


def fail_at_deadline(uow: UnitOfWork, task: domain.TaskRec, effects: Effects) -> None:
    """End a PENDING task past its deadline FAILED/DEADLINE_EXCEEDED, on the record."""
    domain.expire_deadline(task, uow.now_ms)
    uow.audit(task.id, None, SERVER, "task_deadline_exceeded", TaskState.PENDING.value,
              task.state.value, None)
    effects.terminal_tasks.append(task.id)
    effects.counted().timed_out.append((task.queue_id, "DEADLINE_EXCEEDED"))
