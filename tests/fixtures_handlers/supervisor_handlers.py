"""Handlers for the supervisor's integration tests (capability triples ``(name, v1, v1)``).

Handlers that start processes append the pids they started to ``payload["pid_file"]`` so a
test can check with psutil that nothing survives; ``append`` appends one line per run to
``payload["path"]`` so a test can count executions.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from spawning import blocked_read, c_spin, ignores_sigterm, kills_its_template

from orbit_child import Execution, Handler, WorkerFailure


def upper(execution: Execution) -> Any:
    return {"text": str(execution.payload["text"]).upper()}


def sleep(execution: Execution) -> Any:
    time.sleep(float(execution.payload.get("seconds", 0.1)))
    return {"slept": execution.payload.get("seconds", 0.1)}


def append(execution: Execution) -> Any:
    """One line per execution (attempt id), then an optional sleep: counts real runs."""
    with open(execution.payload["path"], "a") as fh:
        fh.write(f"{execution.task_id} {execution.attempt_id}\n")
        fh.flush()
        os.fsync(fh.fileno())
    time.sleep(float(execution.payload.get("seconds", 0)))
    return {"ok": True}


def crash(execution: Execution) -> Any:
    kind = execution.payload.get("kind")
    if kind == "segfault":
        ctypes.string_at(0)
    if kind == "exit3":
        os._exit(3)
    return {"crashed": False}


def memory_hog(execution: Execution) -> Any:
    size = int(execution.payload.get("mib", 300)) * 1024 * 1024
    blob = bytearray(size)
    for i in range(0, size, 4096):  # touch every page so it counts in RSS
        blob[i] = 1
    time.sleep(float(execution.payload.get("hold", 30)))
    return {"held": len(blob)}


def whoami(execution: Execution) -> Any:
    return {"pid": os.getpid()}


def reject(execution: Execution) -> Any:
    raise WorkerFailure("OBJECT_REJECTED", details={"why": "test"})


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
]

BROKEN_DUPLICATES = [
    Handler("sup.upper", "v1", "v1", upper),
    Handler("sup.upper", "v1", "v1", upper),
]
