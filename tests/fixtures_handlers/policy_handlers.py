"""Handlers whose TaskTypes declare their policy (docs/handlers.md, "Declared policies"):

- ``policy.hang`` declares a short attempt timeout, idempotency, two attempts and a quick
  backoff; it sleeps ``payload["seconds"]`` (past its time limit when asked to);
- ``policy.multi`` is served in two versions, so its versions cannot be guessed;
- ``CONFLICTING`` serves ``policy.hang`` v1/v1 with another time limit (refused),
  ``NEXT_VERSION`` serves it as v2 with that other time limit (accepted).
"""

from __future__ import annotations

import time
from typing import Any

from orbit_child import Execution, Handlers
from orbit_wire import TaskType
from orbit_wire.policy import Backoff

HANG = TaskType("policy.hang", "v1", "v1", idempotent=True, max_attempts=2,
                attempt_timeout_ms=1_500, backoff=Backoff(initial_ms=50, jitter=0.0))
MULTI_V1 = TaskType("policy.multi", "v1", "v1")
MULTI_V2 = TaskType("policy.multi", "v2", "v1", priority=7)


def hang(execution: Execution) -> Any:
    time.sleep(float(execution.payload.get("seconds", 0)))
    return {"attempt": execution.attempt_number}


def echo(execution: Execution) -> Any:
    return {"version": execution.capability.handler_version}


handlers = Handlers()
handlers.add(HANG, hang)
handlers.add(MULTI_V1, echo)
handlers.add(MULTI_V2, echo)
HANDLERS = handlers.handlers

CONFLICTING = [Handlers().add(TaskType("policy.hang", "v1", "v1", idempotent=True,
                                       max_attempts=2, attempt_timeout_ms=9_000), hang)]
NEXT_VERSION = [Handlers().add(TaskType("policy.hang", "v2", "v1", idempotent=True,
                                        attempt_timeout_ms=9_000), hang)]
