"""Handlers for scripts/bench_supervisor.py (capability triples ``(name, "1", "1")``).

``noop`` measures the runtime's own cost per task; ``cpu10`` burns 10 ms of the child's CPU
time (not wall time, so a busy machine does not shorten the work); ``c_spin`` holds the CPU
inside one C call (catastrophic regex backtracking) that no Python-level signal or
cancellation can interrupt, so only the supervisor's SIGKILL ends it.

With ``ORBIT_BENCH_PROGRESS_MS`` set (``bench_supervisor.py --progress-every-ms N``) the
handlers report progress: ``noop`` once per task, ``cpu10`` every N ms of its work.
"""

from __future__ import annotations

import os
import time
from typing import Any

from common_handlers import spin_in_c

from orbit_child import Execution, Handler

CPU_TASK_SECONDS = 0.010
_PROGRESS_MS = os.environ.get("ORBIT_BENCH_PROGRESS_MS")
PROGRESS_EVERY = None if not _PROGRESS_MS else int(_PROGRESS_MS) / 1000


def noop(execution: Execution) -> Any:
    if PROGRESS_EVERY is not None:
        execution.progress(1.0, {"done": 1})
    return 1


def cpu10(execution: Execution | None) -> Any:
    """``execution`` is None when the benchmark's bare ceiling calls it outside any runtime."""
    clock = time.process_time
    start = clock()
    end = start + CPU_TASK_SECONDS
    every = PROGRESS_EVERY if execution is not None else None
    report_at = start if every is not None else end + 1.0  # at the start, then every N ms
    spins = 0
    while (now := clock()) < end:
        spins += 1
        if now >= report_at and every is not None and execution is not None:
            execution.progress((now - start) / CPU_TASK_SECONDS, {"spins": spins})
            report_at = now + every
    return spins


def c_spin(execution: Execution) -> Any:
    """Unlike common_handlers.c_spin it starts no processes: only the spin."""
    spin_in_c()
    return 0


handlers = [
    Handler("noop", "1", "1", noop),
    Handler("cpu10", "1", "1", cpu10),
    Handler("c_spin", "1", "1", c_spin),
]
