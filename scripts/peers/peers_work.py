"""The work every system runs in scripts/bench_peers.py: plain functions, no framework.

Each system's module (peers_orbit, peers_celery, peers_dramatiq) wraps these, so the three
run the very same code and differ only in the runtime around it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

SPIN_BOUND_S = 30.0  # a spinner no runtime stops still ends, so a worker frees itself


def noop() -> int:
    return 1


def burn(ms: float) -> int:
    """Burn ``ms`` of this thread's CPU time. CPU time, not wall time, so a busy host does
    not shorten the work; the thread's, not the process's, because Dramatiq's worker
    process also runs its consumer threads."""
    end = time.thread_time() + ms / 1000
    spins = 0
    while time.thread_time() < end:
        spins += 1
    return spins


def spin(pidfile: str) -> int:
    """Spin until killed, ignoring SIGTERM, after announcing this process in ``pidfile``.

    The file holds ``PID MONOTONIC_START``: CLOCK_MONOTONIC is one clock for every process
    on Linux, so the benchmark compares it with its own instants. It is written to a
    temporary name and renamed, so a reader never sees half a line. If the runtime only
    raises an exception in this thread (Dramatiq's time limit), ``finally`` records when,
    in ``pidfile + ".interrupted"``; after a SIGKILL nothing runs."""
    if threading.current_thread() is threading.main_thread():
        # Celery's hard limit sends SIGTERM first; a handler stuck in a C call or one that
        # traps signals ignores it. Only the main thread may set handlers (Dramatiq runs
        # actors in worker threads, and nothing there sends one).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    start = time.monotonic()
    _write_atomically(pidfile, f"{os.getpid()} {start!r}\n")
    spins = 0
    try:
        while time.monotonic() < start + SPIN_BOUND_S:
            spins += 1
    finally:
        _write_atomically(pidfile + ".interrupted", f"{time.monotonic()!r}\n")
    return spins


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
