"""Handlers with every behaviour the child pool must survive (tests/integration/pool).

Handlers that start processes write the pids they started, one per line, to
``payload["pid_file"]`` so the test can check with psutil that they are gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from typing import Any

from common_handlers import (
    blocked_read,
    c_spin,
    crash,
    ignores_sigterm,
    memory_hog,
    sleep,
    spawn_grandchildren,
    whoami,
    write_pids,
)

from orbit_child import Execution, Handler, RawJSON, Retryable, WorkerFailure

SECRET_TEXT = "s3cr3t-should-never-leave-the-child"


def echo(execution: Execution) -> Any:
    return {"payload": execution.payload, "attempt_id": execution.attempt_id,
            "task_id": execution.task_id, "epoch": execution.epoch,
            "attempt_number": execution.attempt_number,
            "capability": str(execution.capability), "idempotency": execution.idempotency,
            "deadline_at_ms": execution.deadline_at_ms}


async def async_echo(execution: Execution) -> Any:
    await asyncio.sleep(0.01)
    return {"async": True, "payload": execution.payload}


def fail(execution: Execution) -> Any:
    kind = execution.payload.get("kind")
    if kind == "rejected":
        raise WorkerFailure("OBJECT_REJECTED", details={"field": "name", "n": 1})
    if kind == "temporary":
        raise WorkerFailure("TEMPORARY_REJECTION", retryable=True)
    if kind == "bad_code":
        raise WorkerFailure("not a code")
    if kind == "bad_details":
        raise WorkerFailure("OBJECT_REJECTED", details={"x": float("nan")})
    if kind == "list_details":
        raise WorkerFailure("OBJECT_REJECTED", details=[1, 2])  # type: ignore[arg-type]
    if kind == "value_error":
        raise ValueError(f"database password is {SECRET_TEXT}")
    if kind == "system_exit":
        raise SystemExit(4)
    if kind == "key_error":
        raise KeyError(f"no row for {SECRET_TEXT}")
    if kind == "timeout":
        raise TimeoutError(f"upstream slow\n{SECRET_TEXT}")
    raise RuntimeError("unknown kind")


def bad_result(execution: Execution) -> Any:
    kind = execution.payload.get("kind")
    values: dict[str, Any] = {
        "nan": {"x": float("nan")},
        "inf": [float("inf")],
        "int64_overflow": {"n": 2**63},
        "huge_int": 2**64,
        "none": None,
        "too_big": {"blob": "x" * (256 * 1024)},
        "too_deep": _nest(40),
        "not_json": {"s": {1, 2}},
        "raw_exact": RawJSON('{"f":1.000000000000000000001,"i":9223372036854775807}'),
        "raw_big_int": RawJSON('{"i":12345678901234567890}'),
        "raw_invalid": RawJSON('{"a":'),
        "decimal": {"d": Decimal("1.000000000000000000001")},
        "ok_max_int": {"i": 2**63 - 1, "neg": -(2**63)},
    }
    return values[kind]


def _nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def spawn_and_return(execution: Execution) -> Any:
    """Leaves processes behind on a normal return: the attempt's end must kill them."""
    spawn_grandchildren(execution)
    return {"spawned": True}


def grow_then_return(execution: Execution) -> Any:
    """Leaves the child's RSS high after the task (a leak), to test recycling between tasks."""
    size = int(execution.payload.get("mib", 120)) * 1024 * 1024
    blob = bytearray(size)
    for i in range(0, size, 4096):
        blob[i] = 1
    _LEAK.append(blob)
    return {"pid": os.getpid()}


_LEAK: list[bytearray] = []


def cooperative(execution: Execution) -> Any:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if execution.cancelled():
            raise WorkerFailure("STOPPED_EARLY", retryable=True)
        time.sleep(0.01)
    return {"cancelled": False}


def fork_and_return(execution: Execution) -> Any:
    """The forked copy returns too; only the real child may answer."""
    os.fork()
    return {"pid": os.getpid()}


def forge(execution: Execution) -> Any:
    """Writes well-formed frames with a wrong generation onto its own channel first."""
    import orjson

    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
        except OSError:
            continue
        for generation in (-1, 0, 10**9):
            body = orjson.dumps({"t": "done", "g": generation, "a": execution.attempt_id,
                                 "outcome": "SUCCEEDED", "result_json": '"forged"'})
            os.write(int(name), len(body).to_bytes(4, "big") + body)
    time.sleep(0.05)
    return {"real": True}


def kill_template(execution: Execution) -> Any:
    """Kills the template (this child's parent); the pool must restart it."""
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(30)
    return {"survived": True}


def environment(execution: Execution) -> Any:
    return sorted(k for k in os.environ if k.startswith("ORBIT_"))


def memory_hog_grandchild(execution: Execution) -> Any:
    """The memory is held by a process the handler started, not by the child itself."""
    mib = int(execution.payload.get("mib", 200))
    code = (f"b = bytearray({mib} * 1024 * 1024)\n"
            "for i in range(0, len(b), 4096): b[i] = 1\n"
            "import time; time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    write_pids(execution, os.getpid(), proc.pid)
    proc.wait()
    return {"held": mib}


def progress_then_fail(execution: Execution) -> Any:
    """Reports ``payload["notes"]`` notes in a tight loop (the child spaces them), starting
    after its checkpoint's ``i``, then fails: its last details must still reach the pool
    before the answer. ``payload["ok"]``: succeeds instead, returning the checkpoint."""
    start = int((execution.checkpoint or {}).get("i", 0))
    for i in range(start + 1, start + int(execution.payload["notes"]) + 1):
        execution.progress(min(1.0, i / 1000), {"i": i})
    if execution.payload.get("ok"):
        return {"checkpoint": execution.checkpoint}
    raise WorkerFailure("STOPPED", {"at": i})


handlers = [
    Handler("echo", "1", "1", echo),
    Handler("async_echo", "1", "1", async_echo),
    Handler("whoami", "1", "1", whoami),
    Handler("sleep", "1", "1", sleep),
    Handler("fail", "1", "1", fail),
    # The same handler with declared failures (TaskType.fails_on).
    Handler("declared", "1", "1", fail, fails_on=(LookupError, Retryable(TimeoutError))),
    Handler("bad_result", "1", "1", bad_result),
    Handler("crash", "1", "1", crash),
    Handler("c_spin", "1", "1", c_spin),
    Handler("ignores_sigterm", "1", "1", ignores_sigterm),
    Handler("blocked_read", "1", "1", blocked_read),
    Handler("spawn_and_return", "1", "1", spawn_and_return),
    Handler("memory_hog", "1", "1", memory_hog),
    Handler("grow_then_return", "1", "1", grow_then_return),
    Handler("cooperative", "1", "1", cooperative),
    Handler("fork_and_return", "1", "1", fork_and_return),
    Handler("forge", "1", "1", forge),
    Handler("kill_template", "1", "1", kill_template),
    Handler("environment", "1", "1", environment),
    Handler("memory_hog_grandchild", "1", "1", memory_hog_grandchild),
    Handler("progress_then_fail", "1", "1", progress_then_fail),
]
