"""Handlers for the supervisor's integration tests (capability triples ``(name, v1, v1)``).

Handlers that start processes append the pids they started to ``payload["pid_file"]`` so a
test can check with psutil that nothing survives; ``append`` appends one line per run to
``payload["path"]`` so a test can count executions.
"""

from __future__ import annotations

import os
import time
from typing import Any

from common_handlers import (
    blocked_read,
    c_spin,
    crash,
    ignores_sigterm,
    kills_its_template,
    memory_hog,
    sleep,
    whoami,
)

from orbit_child import Execution, Handler, WorkerFailure


def upper(execution: Execution) -> Any:
    return {"text": str(execution.payload["text"]).upper()}


def append(execution: Execution) -> Any:
    """One line per execution (attempt id), then an optional sleep: counts real runs."""
    with open(execution.payload["path"], "a") as fh:
        fh.write(f"{execution.task_id} {execution.attempt_id}\n")
        fh.flush()
        os.fsync(fh.fileno())
    time.sleep(float(execution.payload.get("seconds", 0)))
    return {"ok": True}


def reject(execution: Execution) -> Any:
    raise WorkerFailure("OBJECT_REJECTED", details={"why": "test"})


def key_error(execution: Execution) -> Any:
    """A bug in the handler: the missing key (a secret of the payload) is in the message."""
    return {}[execution.payload["secret"]]


HANDLERS = [
    Handler("sup.upper", "v1", "v1", upper),
    Handler("sup.sleep", "v1", "v1", sleep),
    Handler("sup.append", "v1", "v1", append),
    Handler("sup.c_spin", "v1", "v1", c_spin),
    Handler("sup.ignores_sigterm", "v1", "v1", ignores_sigterm),
    Handler("sup.blocked_read", "v1", "v1", blocked_read),
    Handler("sup.crash", "v1", "v1", crash),
    Handler("sup.memory_hog", "v1", "v1", memory_hog),
    Handler("sup.reject", "v1", "v1", reject),
    Handler("sup.whoami", "v1", "v1", whoami),
    Handler("sup.kills_its_template", "v1", "v1", kills_its_template),
    Handler("sup.key_error", "v1", "v1", key_error),
]

BROKEN_DUPLICATES = [
    Handler("sup.upper", "v1", "v1", upper),
    Handler("sup.upper", "v1", "v1", upper),
]
