"""A long loop that reports its progress and resumes from its checkpoint.

The handler sums the squares of ``items`` numbers, one step at a time. After each step it
calls ``execution.progress`` with the fraction done and ``{"done": i, "sum": s}``; an
attempt that does not succeed (killed, crashed, timed out) hands those last details to
the next attempt as ``execution.checkpoint``, which starts after item ``done`` with
``sum`` instead of from zero. ``crash_at`` makes the first attempt die by SIGKILL after
that item (what an OOM kill or a lost machine does), and ``journal`` is a file where each
step appends its item, so the example can show that no finished item ran twice.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from orbit_child import Execution, Handlers, TaskType

HANDLER_ENV = "ORBIT_EXAMPLE_HANDLER"
HANDLER_NAME = os.environ.get(HANDLER_ENV) or "example.long_job"
STEP_SECONDS = 0.1  # one item's work; progress notes more than 50 ms apart all go out


def long_job_type(name: str) -> TaskType[dict[str, Any], dict[str, int]]:
    """The declaration shared with the producer (__main__): a retried attempt redoes only
    what its checkpoint does not cover, so retrying is safe."""
    return TaskType(name, "v1", "v1", idempotent=True, max_attempts=3,
                    backoff={"initial_ms": 100, "max_ms": 100, "multiplier": 1.0,
                             "jitter": 0.0})


HANDLERS = Handlers()


@HANDLERS.task(long_job_type(HANDLER_NAME))
def sum_of_squares(execution: Execution) -> Any:
    items = int(execution.payload["items"])
    checkpoint = execution.checkpoint or {}
    start, total = int(checkpoint.get("done", 0)), int(checkpoint.get("sum", 0))
    for i in range(start + 1, items + 1):
        time.sleep(STEP_SECONDS)  # the real work of one item
        total += i * i
        with open(execution.payload["journal"], "a") as fh:
            fh.write(f"{execution.attempt_number} {i}\n")
        execution.progress(i / items, {"done": i, "sum": total})
        if execution.attempt_number == 1 and i == execution.payload.get("crash_at"):
            os.kill(os.getpid(), signal.SIGKILL)  # the machine "fails" mid-loop
    return {"sum": total, "resumed_after": start}
