"""Handlers of the client's workflow tests (tests/e2e/test_workflows_client.py): capability
triples ``(wf.<name>, v1, v1)``. They read their parents' results from
``execution.parents``, so a test sees what the server handed each node."""

from __future__ import annotations

import os
import time
from typing import Any

from orbit_child import Execution, Handlers, TaskType, WorkerFailure

ADD: TaskType[dict[str, int], int] = TaskType("wf.add", "v1", "v1", idempotent=True)
ECHO: TaskType[Any, Any] = TaskType("wf.echo", "v1", "v1", idempotent=True)
COLLECT: TaskType[Any, list[Any]] = TaskType("wf.collect", "v1", "v1", idempotent=True)
FAIL: TaskType[Any, Any] = TaskType("wf.fail", "v1", "v1", idempotent=True, max_attempts=1)
HOLD: TaskType[dict[str, float], str] = TaskType("wf.hold", "v1", "v1", idempotent=True,
                                                 max_attempts=1, cancel_grace_ms=5_000)
# Not idempotent, one attempt: a crash leaves its outcome uncertain, so it needs review.
CRASH: TaskType[Any, Any] = TaskType("wf.crash", "v1", "v1", idempotent=False, max_attempts=1)
HOLD_BOUND_S = 60.0  # a held node that nobody cancels still ends

HANDLERS = Handlers()


@HANDLERS.task(ADD)
def add(execution: Execution) -> int:
    """Its own ``n`` plus every parent's result: a chain of adds sums along."""
    return int(execution.payload["n"]) + sum(int(p.result) for p in execution.parents)


@HANDLERS.task(ECHO)
def echo(execution: Execution) -> Any:
    return execution.payload


@HANDLERS.task(COLLECT)
def collect(execution: Execution) -> list[Any]:
    """The parents' results as received, in the order declared."""
    return [p.result for p in execution.parents]


@HANDLERS.task(FAIL)
def fail(execution: Execution) -> Any:
    raise WorkerFailure("WF_BOOM", {"why": "on purpose"})


@HANDLERS.task(HOLD)
def hold(execution: Execution) -> str:
    """Runs until cancelled (cooperatively), within a bound."""
    end = time.monotonic() + HOLD_BOUND_S
    while time.monotonic() < end:
        if execution.cancelled():
            return "stopped"
        time.sleep(0.02)
    return "not cancelled"


@HANDLERS.task(CRASH)
def crash(execution: Execution) -> Any:
    os._exit(3)  # the child dies mid-attempt: the outcome is unknown
