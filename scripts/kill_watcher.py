#!/usr/bin/env python3
"""The kill benchmark's watcher (bench_kills.py): a process of its own that opens a pidfd for
every pid the spinners' shared page reports and records the instant each process is gone.

    python scripts/kill_watcher.py PAGE SLOTS ROLES SECONDS SCHED   # started by bench_kills.py

Also the shared page itself (/dev/shm), which the spinners (kill_spinner.py) stamp.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import select
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kill_spinner as spinner
import orjson
from server_harness import pct

WATCH_SCAN_S = 0.005  # how often the watcher looks for new pids (a kill takes >= 300 ms)
WATCH_WINDOW = 32  # the first pending (slot, role) pairs, which the watcher checks each time
WATCH_FULL_SCAN_S = 0.2  # and the whole page this often, in case dispatch is out of order

# ------------------------------------------------------------------ the shared page

def create_page(path: Path, slots: int) -> None:
    with path.open("wb") as fh:
        fh.write(b"\0" * max(mmap.PAGESIZE, slots * spinner.SLOT_BYTES))


def map_page(path: Path) -> mmap.mmap:
    fd = os.open(path, os.O_RDONLY)
    try:
        return mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


@contextlib.contextmanager
def shm_page(slots: int, tag: str) -> Iterator[Path]:
    path = Path(f"/dev/shm/orbit-kill-bench-{os.getpid()}-{tag}")
    create_page(path, slots)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------ the watcher process

@dataclass
class Watcher:
    """Runs in its own process: a pidfd per reported pid, one epoll for all of them.

    A pidfd turns readable once its process has exited (memory and descriptors released,
    only the zombie's entry left), and the watcher sleeps in epoll_wait until then, so the
    instants it records are the exits, late by its own wake-up lag (measured on its
    timeouts). ``pending`` lists the (slot, role) pairs whose pid has not appeared yet."""

    page: mmap.mmap
    pending: list[tuple[int, str]]
    epoll: select.epoll = field(default_factory=select.epoll)
    watched: dict[int, dict[str, Any]] = field(default_factory=dict)  # pidfd -> event
    events: list[dict[str, Any]] = field(default_factory=list)
    lag_us: list[float] = field(default_factory=list)

    def scan(self, full: bool) -> None:
        """Look for new pids: the first pending pairs (tasks are dispatched about in
        order), or all of them on a full scan, in case a slot is skipped or late."""
        candidates = self.pending if full else self.pending[:WATCH_WINDOW]
        found = {pair for pair in candidates if self._look(*pair)}
        if found:
            self.pending = [pair for pair in self.pending if pair not in found]

    def _look(self, slot: int, role: str) -> bool:
        stamp = spinner.read_stamp(self.page, slot, role)
        if stamp.pid == 0 or stamp.start_ticks == 0:  # not written yet, or half of it
            return False
        event: dict[str, Any] = {"slot": slot, "role": role, "pid": stamp.pid,
                                 "status": "watched", "mono_ns": None, "real_ns": None}
        self.events.append(event)
        try:
            fd = os.pidfd_open(stamp.pid)
        except ProcessLookupError:  # gone and reaped before we looked: instant unknown
            event["status"] = "missed"
            return True
        # The pid was read before the pidfd was opened, so the pidfd names our process
        # unless the pid was reused in between (pid_max may be small): the start time tells.
        with contextlib.suppress(OSError):  # unreadable: already reaped, the pidfd says so
            if spinner.start_ticks(stamp.pid) != stamp.start_ticks:
                os.close(fd)
                event["status"] = "reused"
                return True
        self.watched[fd] = event
        self.epoll.register(fd, select.EPOLLIN)
        return True

    def gone(self, fd: int, mono_ns: int, real_ns: int) -> None:
        event = self.watched.pop(fd)
        self.epoll.unregister(fd)
        os.close(fd)
        event.update(status="gone", mono_ns=mono_ns, real_ns=real_ns)

    def kill_survivors(self) -> None:
        """Whatever is still alive at the end was not killed by the supervisor: record it,
        then SIGKILL it through its pidfd (which can never hit a reused pid)."""
        for fd, event in self.watched.items():
            event["status"] = "alive"
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
        self.watched.clear()


def set_watcher_scheduling(policy: str) -> str:
    """SCHED_FIFO lets the watcher run the moment a pidfd turns readable even while busy
    loops hold both cores (it sleeps otherwise, so it takes almost no CPU)."""
    if policy != "fifo":
        return "SCHED_OTHER"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return "SCHED_FIFO 10"
    except OSError as exc:
        return f"SCHED_OTHER (SCHED_FIFO refused: {exc.strerror})"


def watch_main(argv: list[str]) -> None:
    """``kill_watcher.py PAGE SLOTS ROLES SECONDS SCHED``: print ``ready``, watch until
    stdin closes or SECONDS pass, then print one JSON object with what was seen."""
    page_path, slots, roles, seconds, policy = argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: stdin still ends us
    sched = set_watcher_scheduling(policy)
    w = Watcher(map_page(Path(page_path)),
                [(slot, role) for slot in range(int(slots)) for role in roles.split(",")])
    stdin = sys.stdin.fileno()
    w.epoll.register(stdin, select.EPOLLIN | select.EPOLLHUP)
    print("ready", flush=True)
    deadline = time.monotonic() + float(seconds)
    last_full = 0.0
    done = False
    while not done and time.monotonic() < deadline:
        if time.monotonic() - last_full >= WATCH_FULL_SCAN_S:
            w.scan(full=True)
            last_full = time.monotonic()
        else:
            w.scan(full=False)
        asleep = time.monotonic_ns()
        ready = w.epoll.poll(WATCH_SCAN_S)
        # Both clocks at once: realtime to compare with the server's lease ends, monotonic
        # to compare with the stamps whatever the wall clock does.
        mono_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        real_ns = time.clock_gettime_ns(time.CLOCK_REALTIME)
        if not ready:  # a timeout: how much later than asked did we wake?
            w.lag_us.append((mono_ns - asleep) / 1e3 - WATCH_SCAN_S * 1e6)
        for fd, _mask in ready:
            if fd == stdin:
                done = True
            else:
                w.gone(fd, mono_ns, real_ns)
    w.kill_survivors()
    lag = w.lag_us or [0.0]
    print(orjson.dumps({
        "sched": sched, "events": w.events, "unseen": len(w.pending),
        "lag_us": {"n": len(w.lag_us), "p50": pct(lag, 0.5), "p99": pct(lag, 0.99),
                   "max": max(lag)},
    }).decode(), flush=True)


if __name__ == "__main__":
    watch_main(sys.argv[1:])
