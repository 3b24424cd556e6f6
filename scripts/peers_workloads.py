"""bench_peers.py's workloads, each measured through a producer: submit-then-await,
sequential submit-and-wait, many producers, the time-limit kill, the worker tree's memory."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import select
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
from peers_producers import (
    Producer,
    ProducerConf,
    make_producer,
)
from peers_setup import (
    GONE_BOUND_S,
    NOOP,
    POLL_S,
    PRODUCERS,
    START_S,
    STOP_S,
    TIME_LIMIT_S,
    WAIT_S,
    Proc,
    Work,
)
from server_harness import (
    pct,
)


def submit_then_await(producer: Producer, works: Sequence[Work], batch: bool = False) -> float:
    """Submit every task (one per call, or in batches), then await each result in order;
    tasks/s from the first submit to the last result."""
    t0 = time.perf_counter()
    handles = (producer.submit_batch(works) if batch
               else [producer.submit(w) for w in works])
    for handle in handles:
        producer.wait(handle)
    return len(works) / (time.perf_counter() - t0)


def sequential(producer: Producer, count: int) -> dict[str, float]:
    """Submit one no-op and wait for its result, ``count`` times: p50 / p99 in ms."""
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        producer.wait(producer.submit(NOOP))
        times.append((time.perf_counter() - t0) * 1000)
    return {"p50": pct(times, 0.5), "p99": pct(times, 0.99)}


def _producer_process(conf: ProducerConf, count: int, barrier: Any, out: Any) -> None:
    """One of the many producers: connect and warm up, wait for the others, then submit
    ``count`` no-ops one per call and await their results; report (start, end)."""
    producer = make_producer(conf)
    try:
        producer.wait(producer.submit(NOOP))  # connections open before the clock starts
        barrier.wait(START_S)
        t0 = time.monotonic()
        handles = [producer.submit(NOOP) for _ in range(count)]
        for handle in handles:
            producer.wait(handle)
        out.put((t0, time.monotonic()))
    finally:
        producer.close()


def many_producers(conf: ProducerConf, total: int) -> float:
    """PRODUCERS processes (spawned, so none inherits this one's connections) submit at
    once; tasks/s from the first one starting to the last one holding all its results."""
    mp = multiprocessing.get_context("spawn")
    barrier = mp.Barrier(PRODUCERS + 1)  # this process too: it sees a producer fail early
    out = mp.Queue()
    each = total // PRODUCERS
    procs = [mp.Process(target=_producer_process, args=(conf, each, barrier, out))
             for _ in range(PRODUCERS)]
    try:
        for proc in procs:
            proc.start()
        barrier.wait(START_S)
        spans = collect_spans(procs, out)
    except BaseException:
        barrier.abort()  # a producer still at the barrier gives up at once
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        raise
    finally:
        deadline = time.monotonic() + STOP_S  # one deadline for all of them
        for proc in (p for p in procs if p.pid is not None):  # those that started
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(10)
    start = min(s for s, _ in spans)
    end = max(e for _, e in spans)
    return each * PRODUCERS / (end - start)


def collect_spans(procs: Sequence[Any], out: Any) -> list[tuple[float, float]]:
    """Every producer's (start, end), failing as soon as one of them died instead."""
    spans: list[tuple[float, float]] = []
    deadline = time.monotonic() + WAIT_S
    while len(spans) < len(procs) and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            spans.append(out.get(timeout=0.1))
            continue
        if any(p.exitcode not in (None, 0) for p in procs):
            raise SystemExit("a producer process failed (its traceback is above)")
    if len(spans) < len(procs):
        raise SystemExit(f"only {len(spans)} of {len(procs)} producers finished")
    return spans


def wait_gone(pid: int, until: float) -> float | None:
    """The monotonic instant the kernel reports ``pid`` exited (its pidfd turns readable;
    this works for a process that is not our child), or None if it still runs at
    ``until``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return time.monotonic()  # already gone: the instant is at most now
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        left_ms = max(0, int((until - time.monotonic()) * 1000))
        return time.monotonic() if poller.poll(left_ms) else None
    finally:
        os.close(fd)


def read_pidfile(path: Path, deadline: float) -> tuple[int, float]:
    """Wait for the spinner to announce itself: (pid, monotonic start)."""
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            pid, start = path.read_text().split()
            return int(pid), float(start)
        time.sleep(POLL_S)
    raise SystemExit(f"the spinner never started ({path.name})")


def time_limit_kill(producer: Producer, workdir: Path, tag: str) -> dict[str, float | None]:
    """One spinner under a 1 s limit: ms from its start + 1 s to its process exiting, or
    None (never, within GONE_BOUND_S); and when an exception interrupted it inside the
    process instead, if one did."""
    pidfile = workdir / f"spin-{tag}.pid"
    producer.submit(Work("spin", str(pidfile)))
    pid, start = read_pidfile(pidfile, time.monotonic() + START_S)
    limit_at = start + TIME_LIMIT_S
    gone = wait_gone(pid, limit_at + GONE_BOUND_S)
    interrupted = Path(f"{pidfile}.interrupted")
    hit = float(interrupted.read_text()) if interrupted.exists() else None
    return {"gone_ms": None if gone is None else (gone - limit_at) * 1000,
            "interrupted_ms": None if hit is None else (hit - limit_at) * 1000}


def tree_memory(proc: Proc) -> dict[str, float]:
    """RSS and PSS (MiB) summed over the worker process and all its descendants. RSS
    counts shared pages once per process; PSS splits them among their sharers."""
    rss = pss = 0
    tree = proc.tree()
    for p in tree:
        with contextlib.suppress(psutil.Error):
            info = p.memory_full_info()
            rss += info.rss
            pss += info.pss
    return {"rss": rss / 2**20, "pss": pss / 2**20, "processes": float(len(tree))}
