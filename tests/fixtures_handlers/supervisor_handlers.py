"""Handlers for the supervisor's integration tests (capability triples ``(name, v1, v1)``).

Handlers that start processes append the pids they started to ``payload["pid_file"]`` so a
test can check with psutil that nothing survives; ``append`` appends one line per run to
``payload["path"]`` so a test can count executions.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
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
    write_pids,
)

from orbit_child import (
    Execution,
    Handler,
    Handlers,
    RawJSON,
    Retryable,
    TaskType,
    WorkerFailure,
)


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


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _journal_line(path: str, line: str) -> None:
    with open(path, "a") as fh:  # one small O_APPEND write: whole lines even across kills
        fh.write(line + "\n")


def journal(execution: Execution) -> Any:
    """The outside record the fault report checks the server against (tests/support/
    invariants.py): a ``start`` line (task, attempt, epoch, pid, wall ms) in
    ``payload["journal"]``, the wall-clock ms stamped into ``payload["stamps"]/<attempt>``
    every 5 ms while it runs (the last one is its last instruction, to within 5 ms), and an
    ``end`` line holding the exact result it returns. It runs ``seconds`` (``retry_seconds``
    from the second attempt on, when given). With ``grandchild`` it starts a ``sleep`` (pids
    in ``pid_file``), ends early when that ends, and returns its exit status (-15 when the
    handler itself stopped it at the end of its time)."""
    p = execution.payload
    _journal_line(p["journal"], f"start {execution.task_id} {execution.attempt_id} "
                                f"{execution.epoch} {os.getpid()} {_wall_ms()}")
    fd = os.open(os.path.join(p["stamps"], execution.attempt_id), os.O_WRONLY | os.O_CREAT)
    child = None
    if p.get("grandchild"):
        child = subprocess.Popen(["sleep", "60"])
        write_pids(execution, os.getpid(), child.pid)
    seconds = p.get("seconds", 0)
    if execution.attempt_number > 1:
        seconds = p.get("retry_seconds", seconds)
    deadline = time.monotonic() + float(seconds)
    while True:
        os.pwrite(fd, b"%20d" % _wall_ms(), 0)
        if time.monotonic() >= deadline or (child is not None and child.poll() is not None):
            break
        time.sleep(0.005)
    os.close(fd)
    result: dict[str, Any] = {"task": execution.task_id, "attempt": execution.attempt_id,
                              "n": p.get("n")}
    if child is not None:
        if child.poll() is None:
            child.terminate()
        result["grandchild_rc"] = child.wait()
    text = json.dumps(result, sort_keys=True, separators=(",", ":"))
    _journal_line(p["journal"], f"end {execution.task_id} {execution.attempt_id} "
                                f"{_wall_ms()} {text}")
    return result


def chatter(execution: Execution) -> Any:
    """Prints a line on stdout and one on stderr (the supervisor logs each with the attempt)."""
    n = execution.payload.get("n", 0)
    print(f"CHATTER-OUT {n}")
    print(f"CHATTER-ERR {n}", file=sys.stderr)
    return {"n": n}


def reject(execution: Execution) -> Any:
    raise WorkerFailure("OBJECT_REJECTED", details={"why": "test"})


def needs_file(execution: Execution) -> Any:
    """Fails explicitly (no retry) until ``payload["path"]`` exists: a task an operator
    retries once the cause is mended."""
    if not os.path.exists(execution.payload["path"]):
        raise WorkerFailure("NOT_READY", details={"missing": "the file"})
    return {"ok": True}


def key_error(execution: Execution) -> Any:
    """A bug in the handler: the missing key (a secret of the payload) is in the message."""
    return {}[execution.payload["secret"]]


def _count_run(execution: Execution) -> None:
    with open(execution.payload["path"], "a") as fh:
        fh.write(f"{execution.task_id} {execution.attempt_id}\n")


def returns_none(execution: Execution) -> None:
    """Sends nothing and returns nothing: one line per run in ``payload["path"]``."""
    _count_run(execution)


class Boom(Exception):
    """An error of the application that the task type declares a plain failure."""


# Declared once, with the exceptions that are known failures (TaskType.fails_on).
DECLARED = TaskType("sup.declared", "v1", "v1",
                    fails_on=(Boom, Retryable(TimeoutError)))
typed = Handlers()


@typed.task(DECLARED)
def declared(execution: Execution) -> Any:
    """Counts its run, then raises what ``payload["kind"]`` names; the message holds a
    secret of the payload on its second line."""
    _count_run(execution)
    secret = execution.payload.get("secret", "")
    errors: dict[str, Exception] = {
        "boom": Boom(f"the row is gone\n{secret}"),
        "timeout": TimeoutError(f"upstream did not answer\n{secret}"),
        "value_error": ValueError(f"bad value\n{secret}"),
    }
    raise errors[execution.payload["kind"]]


def unchecked_result(execution: Execution) -> Any:
    """Switches off its own child's value check, then answers text that breaks the rules
    (``payload["text"]``): what a corrupted child would send."""
    import orbit_child.loop

    orbit_child.loop.encode_json_value = lambda value, what="result": value.text
    return RawJSON(str(execution.payload["text"]))


def polls_cancelled(execution: Execution) -> Any:
    """Works in small steps, looking at ``cancelled()`` between them, and returns early
    when asked to stop (at most 30 s)."""
    write_pids(execution, os.getpid())
    deadline = time.monotonic() + 30.0
    steps = 0
    while not execution.cancelled() and time.monotonic() < deadline:
        time.sleep(0.01)
        steps += 1
    return {"stopped": "cancelled" if execution.cancelled() else "done", "steps": steps}


async def awaits_cancel(execution: Execution) -> Any:
    """Awaits for up to 30 s; a cancel cancels its task: it notes that in
    ``payload["marker"]`` and lets the CancelledError end it."""
    write_pids(execution, os.getpid())
    try:
        await asyncio.sleep(30.0)
    except asyncio.CancelledError:
        with open(execution.payload["marker"], "w") as fh:
            fh.write("cancelled")
        raise
    return {"stopped": "done"}


def ignores_cancel(execution: Execution) -> Any:
    """Never looks at ``cancelled()``: runs its 30 s unless it is killed."""
    write_pids(execution, os.getpid())
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return {"stopped": "done"}


def reports_progress(execution: Execution) -> Any:
    """``payload["steps"]`` steps of ``payload["step_s"]`` seconds, each reported as
    progress with ``{"i": done}``; resumes after ``checkpoint["i"]`` when it has one, and
    appends each step it does to ``payload["path"]`` (when given) so a test sees what was
    redone. With ``payload["silent_after"]`` it stops reporting after that step and sleeps
    ``payload["silent_s"]``."""
    steps = int(execution.payload["steps"])
    start = int((execution.checkpoint or {}).get("i", 0))
    path = execution.payload.get("path")
    for i in range(start + 1, steps + 1):
        time.sleep(float(execution.payload.get("step_s", 0.05)))
        if path:
            with open(path, "a") as fh:
                fh.write(f"{execution.attempt_number} {i}\n")
        execution.progress(i / steps, {"i": i})
        if i == execution.payload.get("silent_after"):
            time.sleep(float(execution.payload.get("silent_s", 30)))
    return {"steps": steps, "resumed_from": start}


async def reports_progress_async(execution: Execution) -> Any:
    """As ``reports_progress``, awaiting between the steps."""
    steps = int(execution.payload["steps"])
    for i in range(1, steps + 1):
        await asyncio.sleep(float(execution.payload.get("step_s", 0.05)))
        execution.progress(i / steps, {"i": i})
    return {"steps": steps}


def bad_progress(execution: Execution) -> Any:
    """Writes progress notes that break the rules, past the handler API's own checks (what
    a corrupted child would send), then a good one, and succeeds."""
    sink = execution._progress_sink
    sink(7.5, None)
    time.sleep(0.06)  # past the child's spacing: each note goes out
    sink(None, "{not json")
    time.sleep(0.06)
    sink(0.5, '{"ok":true}')
    return {"ok": True}


def collect(execution: Execution) -> Any:
    """A workflow node: one line per run in ``payload["path"]`` (if given), an optional sleep
    or failure, and a result naming the node and what it received from its parents."""
    p = execution.payload
    if p.get("path"):
        with open(p["path"], "a") as fh:
            fh.write(f"{p.get('name')} {execution.task_id} {execution.attempt_id}\n")
            fh.flush()
            os.fsync(fh.fileno())
    time.sleep(float(p.get("seconds", 0)))
    if p.get("fail"):
        raise WorkerFailure("BOOM", details={"name": p.get("name")})
    return {"name": p.get("name"),
            "parents": [{"key": x.key, "task_id": x.task_id, "state": x.state,
                         "result": x.result, "code": x.code, "details": x.details}
                        for x in execution.parents]}


HANDLERS = [
    Handler("sup.collect", "v1", "v1", collect),
    Handler("sup.upper", "v1", "v1", upper),
    Handler("sup.sleep", "v1", "v1", sleep),
    Handler("sup.append", "v1", "v1", append),
    Handler("sup.journal", "v1", "v1", journal),
    Handler("sup.c_spin", "v1", "v1", c_spin),
    Handler("sup.ignores_sigterm", "v1", "v1", ignores_sigterm),
    Handler("sup.blocked_read", "v1", "v1", blocked_read),
    Handler("sup.crash", "v1", "v1", crash),
    Handler("sup.memory_hog", "v1", "v1", memory_hog),
    Handler("sup.reject", "v1", "v1", reject),
    Handler("sup.needs_file", "v1", "v1", needs_file),
    Handler("sup.whoami", "v1", "v1", whoami),
    Handler("sup.kills_its_template", "v1", "v1", kills_its_template),
    Handler("sup.key_error", "v1", "v1", key_error),
    Handler("sup.unchecked_result", "v1", "v1", unchecked_result),
    Handler("sup.polls_cancelled", "v1", "v1", polls_cancelled),
    Handler("sup.awaits_cancel", "v1", "v1", awaits_cancel),
    Handler("sup.ignores_cancel", "v1", "v1", ignores_cancel),
    Handler("sup.chatter", "v1", "v1", chatter),
    Handler("sup.returns_none", "v1", "v1", returns_none),
    Handler("sup.reports_progress", "v1", "v1", reports_progress),
    Handler("sup.reports_progress_async", "v1", "v1", reports_progress_async),
    Handler("sup.bad_progress", "v1", "v1", bad_progress),
    *typed.handlers,
]

BROKEN_DUPLICATES = [
    Handler("sup.upper", "v1", "v1", upper),
    Handler("sup.upper", "v1", "v1", upper),
]
