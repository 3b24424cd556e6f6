"""Benchmark the supervisor's child pool with real processes.

Measures the parent<->child round trip of a no-op task (and the parent's CPU time per round
trip: the pipe loop per task, without the server's side), the kill latency (kill() called ->
the template's reap report ends execute()) and the replacement latency (kill() called -> a
fresh child is ready), then prints the figures and writes the "Child pool" section of
docs/benchmarks.md (other sections are kept).

    .venv/bin/python scripts/bench_pool.py [--iterations 200] [--round-trips 2000]
        [--capture-output]   # children's output read and logged per line (orbit-supervise)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures_handlers"))  # for the template only

from orbit_supervisor.attempts import Attempt  # noqa: E402
from orbit_supervisor.lease import Lease  # noqa: E402
from orbit_supervisor.pool import ChildPool  # noqa: E402
from orbit_wire.frames import Reservation  # noqa: E402
from orbit_wire.model import Capability, Idempotency  # noqa: E402

SPEC = "pool_bench:handlers"
SECTION = "## Child pool"
KILL_TARGET_MS = 50.0
REPLACE_TARGET_MS = 20.0

_ids = iter(range(1, 1 << 40))
T = TypeVar("T")


def _request(handler: str) -> Attempt:
    res = Reservation(f"{next(_ids):032x}", "0" * 32, 1, 1, Capability(handler, "1", "1"),
                      {"n": 1}, Idempotency.IDEMPOTENT, 30_000, 60_000, 0)
    return Attempt(res, Lease(res.lease_ttl_ms))


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def _stamped(awaitable: Awaitable[T]) -> tuple[T, float]:
    value = await awaitable
    return value, time.perf_counter()


async def bench(iterations: int, round_trips: int, capture: bool = False) -> dict[str, float]:
    pool = ChildPool(SPEC, 1, capture_output=capture)
    t0 = time.perf_counter()
    await pool.start()
    start_ms = (time.perf_counter() - t0) * 1000
    try:
        for _ in range(50):  # warm up
            await pool.execute(_request("noop"))
        rtt: list[float] = []
        cpu = time.process_time()  # this process only: the parent's share of the pipe loop
        for _ in range(round_trips):
            t = time.perf_counter()
            await pool.execute(_request("noop"))
            rtt.append((time.perf_counter() - t) * 1e6)
        parent_cpu_us = (time.process_time() - cpu) / round_trips * 1e6
        kill_ms: list[float] = []
        replace_ms: list[float] = []
        for _ in range(iterations):
            req = _request("sleep")
            task = asyncio.create_task(pool.execute(req))
            await asyncio.sleep(0.005)  # the child is inside the handler by now
            t = time.perf_counter()
            if not pool.kill(req, "LEASE_LOST"):
                raise RuntimeError("the attempt was not running")
            # The replacement is forked while the old child dies: time both from the kill.
            (outcome, reaped), ready = await asyncio.wait_for(asyncio.gather(
                _stamped(task), _stamped(pool.wait_idle(1))), 5.0)
            kill_ms.append((reaped - t) * 1000)
            replace_ms.append((ready[1] - t) * 1000)
            if outcome.report.kill_reason != "LEASE_LOST":
                raise RuntimeError(f"unexpected outcome {outcome}")
        stats = pool.stats()
    finally:
        await pool.close()
    return {
        "start_ms": start_ms,
        "rtt_mean_us": statistics.fmean(rtt), "rtt_p50_us": _pct(rtt, 50),
        "rtt_p99_us": _pct(rtt, 99), "parent_cpu_us": parent_cpu_us,
        "kill_p50_ms": _pct(kill_ms, 50), "kill_p99_ms": _pct(kill_ms, 99),
        "kill_max_ms": max(kill_ms),
        "replace_p50_ms": _pct(replace_ms, 50), "replace_p99_ms": _pct(replace_ms, 99),
        "replace_max_ms": max(replace_ms),
        "iterations": iterations, "round_trips": round_trips, "spawned": stats.spawned,
    }


async def bench_wide(size: int, tasks: int, capture: bool = False) -> dict[str, float]:
    """Start a wide pool, push no-op tasks through all children at once, close it."""
    pool = ChildPool(SPEC, size, capture_output=capture)
    t = time.perf_counter()
    await pool.start()
    start_ms = (time.perf_counter() - t) * 1000
    try:
        t = time.perf_counter()
        await asyncio.gather(*(pool.execute(_request("noop")) for _ in range(tasks)))
        per_s = tasks / (time.perf_counter() - t)
    finally:
        t = time.perf_counter()
        await pool.close()
        close_ms = (time.perf_counter() - t) * 1000
    return {"wide_size": size, "wide_tasks": tasks, "wide_start_ms": start_ms,
            "wide_per_s": per_s, "wide_close_ms": close_ms}


def render(r: dict[str, float]) -> str:
    def verdict(value: float, target: float) -> str:
        return f"target p99 ≤ {target:.0f} ms: {'meets' if value <= target else 'MISSES'}"

    rows = [
        (f"no-op task round trip (execute → outcome), {int(r['round_trips'])} tasks",
         f"{r['rtt_p50_us']:.0f} µs", f"{r['rtt_p99_us']:.0f} µs",
         f"mean {r['rtt_mean_us']:.0f} µs; parent CPU {r['parent_cpu_us']:.0f} µs per task"),
        (f"kill latency (kill() → reap reported, execute returns), {int(r['iterations'])} kills",
         f"{r['kill_p50_ms']:.2f} ms", f"{r['kill_p99_ms']:.2f} ms",
         f"max {r['kill_max_ms']:.2f} ms; {verdict(r['kill_p99_ms'], KILL_TARGET_MS)}"),
        ("replacement latency (kill() → fresh child ready)",
         f"{r['replace_p50_ms']:.2f} ms", f"{r['replace_p99_ms']:.2f} ms",
         f"max {r['replace_max_ms']:.2f} ms; {verdict(r['replace_p99_ms'], REPLACE_TARGET_MS)}"),
        ("pool start (template import + first child ready)", f"{r['start_ms']:.0f} ms", "", ""),
        (f"pool of {int(r['wide_size'])}: start / close", f"{r['wide_start_ms']:.0f} ms",
         "", f"close (kill and reap all) {r['wide_close_ms']:.0f} ms"),
        (f"pool of {int(r['wide_size'])}: {int(r['wide_tasks'])} concurrent no-op tasks",
         f"{r['wide_per_s']:.0f} tasks/s", "", "parent is one asyncio thread"),
    ]
    table = "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows)
    return f"""{SECTION}

Measured by `scripts/bench_pool.py` on {platform.machine()} Linux {platform.release()},
Python {platform.python_version()}, {os.cpu_count()} CPUs (shared with other work); a pool
of one child unless stated; handler module `tests/fixtures_handlers/pool_bench.py`
preloaded in the template.

| figure | p50 | p99 | other |
| --- | --- | --- | --- |
{table}

Kill latency is measured from the `kill()` call, which sends SIGKILL to the child's process
group synchronously, to the template's `wait4` report arriving in the parent. The replacement
is a `fork()` of the template (the module is already imported) plus the child's setup
(process group, death signal, subreaper, closing inherited descriptors) and its ready frame;
it is requested right after the SIGKILL, so it overlaps the old child's death.
"""


def write_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.strip() == SECTION), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section
    else:
        # The section ends at the next heading or at another script's section marker.
        end = next((i for i in range(start + 1, len(lines))
                    if lines[i].startswith(("## ", "<!-- "))), len(lines))
        tail = "".join(lines[end:])
        new = "".join(lines[:start]) + section + ("\n" + tail if tail else "")
    path.write_text(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--wide", type=int, default=64, help="children in the wide pool")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--capture-output", action="store_true",
                        help="read each child's output through its pipe, as orbit-supervise "
                             "does (print only)")
    args = parser.parse_args()
    capture = args.capture_output
    result = asyncio.run(bench(args.iterations, args.round_trips, capture))
    result.update(asyncio.run(bench_wide(args.wide, 20 * args.wide, capture)))
    section = render(result)
    print(section)
    if not args.no_write and not capture:
        write_section(ROOT / "docs" / "benchmarks.md", section)
        print("wrote the Child pool section of docs/benchmarks.md")


if __name__ == "__main__":
    main()
