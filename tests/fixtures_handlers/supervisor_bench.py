"""Handlers for scripts/bench_supervisor.py (capability triples ``(name, "1", "1")``).

``noop`` measures the runtime's own cost per task; ``cpu10`` burns 10 ms of the child's CPU
time (not wall time, so a busy machine does not shorten the work); ``c_spin`` holds the CPU
inside one C call (catastrophic regex backtracking) that no Python-level signal or
cancellation can interrupt, so only the supervisor's SIGKILL ends it.
"""

from __future__ import annotations

import time
from typing import Any

from common_handlers import noop, spin_in_c

from orbit_child import Execution, Handler

CPU_TASK_SECONDS = 0.010


def cpu10(execution: Execution) -> Any:
    clock = time.process_time
    end = clock() + CPU_TASK_SECONDS
    spins = 0
    while clock() < end:
        spins += 1
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
