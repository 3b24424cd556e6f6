"""``--wait``: long-poll a task until it settles, drawing a status line on a terminal.

Without a terminal on stderr this is ``OrbitClient.wait``. On one, the long poll is cut into
rounds of about a second so the line (state, attempt, time waited) stays current; a settled
task still answers at once, so the rounds cost no latency.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console

from ..client import OrbitClient, is_settled
from .render import progress_line

_ROUND_MS = 1000
_MAX_ROUNDS = 1_000_000  # a hard bound whatever the clock does


def wait_for_task(client: OrbitClient, task_id: str, timeout_s: float) -> dict[str, Any]:
    if not sys.stderr.isatty():
        return client.wait(task_id, timeout_s)
    wait_ms = int(timeout_s * 1000)
    started = time.monotonic()
    task = client.get_task(task_id)
    console = Console(stderr=True, highlight=False)
    with console.status(progress_line(task, 0, wait_ms)) as status:
        for _ in range(_MAX_ROUNDS):
            waited_ms = int((time.monotonic() - started) * 1000)
            left_ms = wait_ms - waited_ms
            if is_settled(task) or left_ms <= 0:
                break
            task = client.get_task(task_id, wait_ms=min(left_ms, _ROUND_MS))
            waited_ms = int((time.monotonic() - started) * 1000)
            status.update(progress_line(task, min(waited_ms, wait_ms), wait_ms))
    return task
