#!/usr/bin/env python3
"""Benchmark Orbit end to end: a real `orbit-server` and real `orbit-supervise` processes.

    .venv/bin/python scripts/bench_supervisor.py [--noop-tasks 5000] [--cpu-tasks 600]
                                                 [--rounds 3] [--kills 60] [--no-write]
    .venv/bin/python scripts/bench_supervisor.py --metrics-compare [--rounds 3] [--quick]
    .venv/bin/python scripts/bench_supervisor.py --progress-every-ms 100 [...]

Measures (all with --workers 2 unless stated)
  (1) no-op throughput: submit -> confirmed result (the server's task SUCCEEDED), counted
      from the first submit until every task is SUCCEEDED;
  (2) throughput of tasks that burn 10 ms of child CPU time, against the 2-core ceiling:
      2 x 100/s in theory, and measured as two bare processes running the same handler
      function back to back (no Orbit), right before; also with --workers 4 and 16 (more
      children than cores, as docs/supervisor.md advises for CPU-bound work);
  (3) the parent<->child round trip of a no-op task (ChildPool in this process);
  (4) kill latency: a handler spinning in C with attempt_timeout_ms=100 is hard-killed when
      its local lease runs out; measured from the local lease expiry to the reaped child's
      outcome reaching the session (a Supervisor in this process, instrumented);
  (5) replacement latency: the kill -> the slot's fresh child is ready;
  (6) the RSS of the orbit-supervise parent process (psutil, peak over runs 1 and 2).
The "Supervisor" section of docs/benchmarks.md (between its markers) is replaced; the other
sections are kept. Every process started here is stopped by PID, and every wait is bounded.

``--progress-every-ms N`` makes the bench handlers report progress (``execution.progress``):
the no-op once per task, the 10 ms task every N ms of its work (so at its start); compare
its (1) with a run without it. The docs are then not written.

``--metrics-compare`` measures only (1), alternately by a supervisor without and with
``--metrics-port`` (scraped every second), a fresh supervisor each run and the order swapped
every round, and prints the medians and the difference. ``--quick`` is a smoke run: 1000
no-op tasks, two rounds, nothing written.

Development aids (environment): BENCH_SUPERVISE_LOG=debug (the supervisor's log level),
BENCH_SUPERVISE_ARGS / BENCH_SERVER_ARGS (more options, e.g. "--log-format json"),
BENCH_KEEP=1 (keep the work directory with the logs), BENCH_SERVER_PROFILE=FILE (cProfile
the server), BENCH_PYSPY=DIR (sample server and supervisor with py-spy, if installed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
from bench_server import render_compare
from server_harness import (
    Scraper,
    Server,
    free_port,
    fsync_latency_us,
    pct,
    python_loop_ms,
    replace_section,
)
from supervisor_harness import (
    BEGIN,
    END,
    HANDLER_DIR,
    OVERSUBSCRIBED,
    ROOT,
    RUN_TIMEOUT_S,
    SPEC,
    WORKERS,
    Env,
    SuperviseProcess,
    cpu_seconds,
    submit_all,
    task_spec,
    wait_counts,
)
from supervisor_report import render

sys.path.insert(0, str(HANDLER_DIR))  # for the in-process pool's template only

from orbit_supervisor import pool as pool_module
from orbit_supervisor import session as session_module
from orbit_supervisor.app import Supervisor
from orbit_supervisor.attempts import Attempt
from orbit_supervisor.lease import Lease
from orbit_supervisor.pool import ChildPool
from orbit_wire.frames import Reservation
from orbit_wire.model import Capability, Idempotency


def bench_throughput(env: Env, noop_tasks: int, cpu_tasks: int) -> dict[str, Any]:
    queue, producer, creds_path, _ = env.new_queue("bench-throughput")
    sup = SuperviseProcess(creds_path, queue, env.workdir / f"supervise-{queue}.log")
    out: dict[str, Any] = {}
    try:
        # Warm up: the supervisor is connected and both children have served once.
        submit_all(producer, queue, [task_spec("noop", i) for i in range(20)])
        wait_counts(producer, queue, "SUCCEEDED", 20, sup.sample_rss)
        base = 20
        for name, count in (("noop", noop_tasks), ("cpu10", cpu_tasks)):
            spies = start_profilers(env, sup, name)
            out[name] = timed_run(env, sup, producer, queue, name, count, base, sup.sample_rss)
            out[name]["load_after"] = os.getloadavg()[0]
            base += count
            sup.sample_rss()
            stop_profilers(spies)
        out["rss_mib"] = sup.peak_rss / 2**20
    finally:
        out["supervise_exit"] = sup.stop()
        producer.close()
    out["cpu10_over"] = [bench_cpu_oversubscribed(env, cpu_tasks, workers)
                         for workers in OVERSUBSCRIBED]
    return out


def compare_metrics(env: Env, tasks: int, rounds: int) -> dict[str, Any]:
    """(1) by a supervisor without and with --metrics-port (scraped every second), side by
    side, ``rounds`` times each; a fresh queue and supervisor per run, the order swapped
    every round."""
    runs: dict[str, list[float]] = {"off": [], "on": []}
    scrapes = 0
    for r in range(rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            queue, producer, creds_path, _ = env.new_queue(f"bench-metrics-{mode}")
            port = free_port()
            extra = ("--metrics-port", str(port)) if mode == "on" else ()
            sup = SuperviseProcess(creds_path, queue, env.workdir / f"supervise-{queue}.log",
                                   extra=extra)
            scraper = None
            try:
                submit_all(producer, queue, [task_spec("noop", i) for i in range(20)])
                wait_counts(producer, queue, "SUCCEEDED", 20)
                if mode == "on":
                    scraper = Scraper(f"http://127.0.0.1:{port}/metrics")
                result = timed_run(env, sup, producer, queue, "noop", tasks, 20)
            finally:
                if scraper is not None:
                    scrapes += scraper.stop()
                sup.stop()
                producer.close()
            runs[mode].append(result["per_s"])
            print(f"round {r + 1} metrics {mode}: {result['per_s']:.0f} tasks/s", flush=True)
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    return {"off": runs["off"], "on": runs["on"], "median_off": off, "median_on": on,
            "cost_pct": (off - on) / off * 100, "scrapes": scrapes, "tasks": tasks}


def compare_cgroups(env: Env, tasks: int, rounds: int, limits: tuple[str, ...]
                    ) -> dict[str, Any]:
    """(1) by a supervisor without and with per-child control groups (``limits``: the
    --child-memory-max / --child-cpu-max flags), side by side, ``rounds`` times each; a
    fresh queue and supervisor per run, the order swapped every round."""
    runs: dict[str, list[float]] = {"off": [], "on": []}
    for r in range(rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            queue, producer, creds_path, _ = env.new_queue(f"bench-cgroups-{mode}")
            log = env.workdir / f"supervise-{queue}.log"
            # info on both sides: the start line that names the mode is an info record
            sup = SuperviseProcess(creds_path, queue, log, extra=(
                "--log-level", "info", *(limits if mode == "on" else ())))
            try:
                submit_all(producer, queue, [task_spec("noop", i) for i in range(20)])
                wait_counts(producer, queue, "SUCCEEDED", 20)
                result = timed_run(env, sup, producer, queue, "noop", tasks, 20)
            finally:
                sup.stop()
                producer.close()
            if mode == "on":  # the mode the supervisor put in force (its start line)
                line = next((ln for ln in log.read_text(errors="replace").splitlines()
                             if "child limits:" in ln), "child limits: (not said)")
                print(line[line.index("child limits:"):], flush=True)
            runs[mode].append(result["per_s"])
            print(f"round {r + 1} cgroups {mode}: {result['per_s']:.0f} tasks/s", flush=True)
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    return {"off": runs["off"], "on": runs["on"], "median_off": off, "median_on": on,
            "ratio": on / off, "cost_pct": (off - on) / off * 100, "tasks": tasks}


def bench_cpu_oversubscribed(env: Env, count: int, workers: int) -> dict[str, Any]:
    """The 10 ms CPU tasks again with more children than cores: while one child of a core
    waits for its finish to be confirmed and its next task, another computes."""
    queue, producer, creds_path, _ = env.new_queue("bench-cpu-oversubscribed")
    sup = SuperviseProcess(creds_path, queue,
                           env.workdir / f"supervise-w{workers}-{queue}.log", workers)
    try:
        submit_all(producer, queue, [task_spec("noop", i) for i in range(20)])
        wait_counts(producer, queue, "SUCCEEDED", 20)
        return {"workers": workers, **timed_run(env, sup, producer, queue, "cpu10", count, 20)}
    finally:
        sup.stop()
        producer.close()


def timed_run(env: Env, sup: SuperviseProcess, producer: httpx.Client, queue: str,
              handler: str, count: int, done_before: int,
              sample: Callable[[], None] | None = None) -> dict[str, Any]:
    """Submit ``count`` tasks of ``handler`` and wait until all are SUCCEEDED (``done_before``
    already were): the rate, and the CPU per task of the parent, its children and the
    server over the run."""
    specs = [task_spec(handler, i) for i in range(count)]
    server_ps = psutil.Process(env.server.proc.pid) if env.server.proc else None
    before = cpu_seconds(sup.ps, server_ps)
    t0 = time.perf_counter()
    ids = submit_all(producer, queue, specs)
    done = wait_counts(producer, queue, "SUCCEEDED", done_before + count, sample, last=ids[-1])
    after = cpu_seconds(sup.ps, server_ps)
    return {"tasks": count, "seconds": done - t0, "per_s": count / (done - t0),
            "cpu_ms_per_task": {k: (after[k] - before[k]) * 1000 / count for k in after}}


def start_profilers(env: Env, sup: SuperviseProcess, run: str) -> list[subprocess.Popen[bytes]]:
    """With BENCH_PYSPY=DIR, sample the server and the supervisor parent with py-spy (a
    development aid; py-spy is not a project dependency)."""
    out_dir = os.environ.get("BENCH_PYSPY")
    if not out_dir or env.server.proc is None:
        return []
    spies = []
    for who, pid in (("server", env.server.proc.pid), ("supervise", sup.proc.pid)):
        spies.append(subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "py-spy"), "record", "--pid", str(pid), "--format",
             "raw", "--rate", "250", "--nonblocking", "--output", f"{out_dir}/{run}-{who}.txt"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(0.5)  # attached before the run starts
    return spies


def stop_profilers(spies: list[subprocess.Popen[bytes]]) -> None:
    for spy in spies:
        os.kill(spy.pid, signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(spy.pid, signal.SIGKILL)
            spy.wait(10)


def _burn(count: int, results: Any) -> None:
    from supervisor_bench import cpu10  # the handler function itself, called directly

    t0 = time.perf_counter()
    for _ in range(count):
        cpu10(None)
    results.put(count / (time.perf_counter() - t0))


def ipc_round_trip_us(count: int = 2000) -> float:
    """p50 of a one-byte round trip between two processes over a socketpair: how fast the
    host wakes and switches processes right now. Every task crosses several such hops
    (producer, server, supervisor, child), and the 10 ms ceiling cannot show their speed."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # echo until the other end closes
        ours.close()
        while data := theirs.recv(64):
            theirs.send(data)
        os._exit(0)
    theirs.close()
    times = []
    try:
        for i in range(count + 100):
            t0 = time.perf_counter()
            ours.send(b"x")
            ours.recv(64)
            if i >= 100:  # the first ones warm up
                times.append(time.perf_counter() - t0)
    finally:
        ours.close()
        os.waitpid(pid, 0)
    return pct(times, 0.5) * 1e6


def bench_bare_ceiling(count: int) -> dict[str, Any]:
    """The same 10 ms CPU handler function in two plain processes at once, back to back:
    what the two cores give this work on this machine right now, with no Orbit at all. Each
    process times its own loop (its start-up is not counted); the rates add up."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    each = count // WORKERS
    procs = [ctx.Process(target=_burn, args=(each, results)) for _ in range(WORKERS)]
    for proc in procs:
        proc.start()
    rates = [results.get(timeout=RUN_TIMEOUT_S) for _ in procs]
    for proc in procs:
        proc.join(30)
        if proc.exitcode is None:
            proc.kill()
            proc.join(10)
    return {"tasks": WORKERS * each, "per_s": sum(rates)}


# ------------------------------------------------------------------ in-process measures

async def bench_round_trip(round_trips: int) -> dict[str, float]:
    pool = ChildPool(SPEC, 1)
    await pool.start()
    ids = iter(range(1, 1 << 40))

    def request() -> Attempt:
        res = Reservation(f"{next(ids):032x}", "0" * 32, 1, 1, Capability("noop", "1", "1"),
                          {"n": 1}, Idempotency.IDEMPOTENT, 30_000, 60_000, 0)
        return Attempt(res, Lease(res.lease_ttl_ms))

    try:
        for _ in range(50):
            await pool.execute(request())
        rtt: list[float] = []
        for _ in range(round_trips):
            t = time.perf_counter()
            await pool.execute(request())
            rtt.append((time.perf_counter() - t) * 1e6)
    finally:
        await pool.close()
    return {"p50_us": pct(rtt, 0.5), "p99_us": pct(rtt, 0.99), "mean_us": statistics.fmean(rtt),
            "n": len(rtt)}


class KillProbe:
    """Instruments the session and the pool of an in-process Supervisor (this script only):
    lease expiry -> outcome of the killed child, and kill -> replacement child ready."""

    def __init__(self) -> None:
        self.kill_ms: list[float] = []
        self.replace_ms: list[float] = []
        self.reasons: dict[str, int] = {}
        self._killed_at: dict[int, float] = {}
        self._undo: list[Callable[[], None]] = []

    def install(self) -> None:
        session_cls, pool_cls = session_module.Session, pool_module.ChildPool
        finished, kill_slot, maybe_ready = (session_cls.execution_finished,
                                            pool_cls._kill_slot, pool_cls._maybe_ready)
        probe = self

        def execution_finished(self: Any, attempt_id: str, result: Any, now: float) -> Any:
            att = self.attempts.get(attempt_id)
            if att is not None and att.kill_reason is not None and att.lease.expires_at:
                probe.reasons[att.kill_reason] = probe.reasons.get(att.kill_reason, 0) + 1
                probe.kill_ms.append((now - att.lease.expires_at) * 1000)
            return finished(self, attempt_id, result, now)

        def _kill_slot(self: Any, slot: Any, reason: Any, code: Any) -> Any:
            probe._killed_at[slot.index] = time.perf_counter()
            return kill_slot(self, slot, reason, code)

        def _maybe_ready(self: Any, slot: Any) -> Any:
            result = maybe_ready(self, slot)
            if slot.state is not pool_module.SlotState.SPAWNING and slot.index in probe._killed_at:
                probe.replace_ms.append(
                    (time.perf_counter() - probe._killed_at.pop(slot.index)) * 1000)
            return result

        session_cls.execution_finished = execution_finished  # type: ignore[method-assign]
        pool_cls._kill_slot = _kill_slot  # type: ignore[method-assign]
        pool_cls._maybe_ready = _maybe_ready  # type: ignore[method-assign]

        def undo() -> None:
            session_cls.execution_finished = finished  # type: ignore[method-assign]
            pool_cls._kill_slot = kill_slot  # type: ignore[method-assign]
            pool_cls._maybe_ready = maybe_ready  # type: ignore[method-assign]

        self._undo.append(undo)

    def remove(self) -> None:
        for undo in self._undo:
            undo()


async def bench_kills(env: Env, kills: int) -> dict[str, Any]:
    queue, producer, _path, creds = env.new_queue("bench-kills")
    probe = KillProbe()
    probe.install()
    quiet = logging.getLogger("bench.supervisor")  # every kill is logged as a warning
    quiet.setLevel(logging.ERROR)
    sup = Supervisor(SPEC, queue, creds, workers=WORKERS, shutdown_timeout=20, logger=quiet)
    runner = asyncio.create_task(sup.run())
    try:
        specs = [task_spec("c_spin", i, attempt_timeout_ms=100, max_attempts=1)
                 for i in range(kills)]
        await asyncio.to_thread(submit_all, producer, queue, specs)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(probe.kill_ms) < kills and time.monotonic() < deadline:
            if runner.done():
                raise SystemExit(f"the in-process supervisor ended: {runner.result()}")
            await asyncio.sleep(0.05)
        # The last replacement is forked right after the last kill.
        while len(probe.replace_ms) < kills and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        stats = sup.stats()
    finally:
        sup.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(runner, 30)
        probe.remove()
        producer.close()
    if len(probe.kill_ms) < kills:
        raise SystemExit(f"only {len(probe.kill_ms)} of {kills} kills were seen")
    return {
        "n": len(probe.kill_ms), "reasons": probe.reasons,
        "kill_p50": pct(probe.kill_ms, 0.5), "kill_p99": pct(probe.kill_ms, 0.99),
        "kill_max": max(probe.kill_ms),
        "replace_n": len(probe.replace_ms),
        "replace_p50": pct(probe.replace_ms, 0.5), "replace_p99": pct(probe.replace_ms, 0.99),
        "replace_max": max(probe.replace_ms),
        "killed": dict(stats.children.killed) if stats.children else {},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--noop-tasks", type=int, default=5000)
    parser.add_argument("--cpu-tasks", type=int, default=600)
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--round-trips", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="throughput rounds (ceiling, no-op, 10 ms w2, w4 and w16 each); the "
                             "report gives the median round of each figure and the range")
    parser.add_argument("--only-throughput", action="store_true",
                        help="skip the in-process measures; never writes the docs")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--metrics-compare", action="store_true",
                        help="measure (1) without and with --metrics-port, side by side")
    parser.add_argument("--cgroups-compare", action="store_true",
                        help="measure (1) without and with per-child control groups "
                             "(--child-memory-max, --child-cpu-max), side by side")
    parser.add_argument("--child-memory-max", default=None, metavar="SIZE",
                        help="per-child memory cgroup limit for every supervisor (or, with "
                             "--cgroups-compare, for the 'on' side; default there 1G)")
    parser.add_argument("--child-cpu-max", default=None, metavar="CPUS",
                        help="per-child CPU limit, as --child-memory-max")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1000 no-op tasks, 2 rounds, nothing written")
    parser.add_argument("--progress-every-ms", type=int, default=None, metavar="N",
                        help="handlers report progress: the no-op once per task, the 10 ms "
                             "task every N ms; nothing written")
    args = parser.parse_args()
    if args.progress_every_ms is not None:
        if args.progress_every_ms < 1:
            parser.error("--progress-every-ms must be at least 1")
        # The supervisors' templates (and the in-process pools) read it at import.
        os.environ["ORBIT_BENCH_PROGRESS_MS"] = str(args.progress_every_ms)
        args.no_write = True
    if args.quick:
        args.noop_tasks, args.cpu_tasks, args.kills, args.rounds = 1000, 100, 10, 2
        args.round_trips, args.no_write = 200, True
    limits: tuple[str, ...] = ()
    if args.child_memory_max:
        limits += ("--child-memory-max", args.child_memory_max)
    if args.child_cpu_max:
        limits += ("--child-cpu-max", args.child_cpu_max)
    if args.cgroups_compare:
        with tempfile.TemporaryDirectory(prefix="orbit-bench-sup-") as tmp:
            server = Server(Path(tmp))
            server.start()
            try:
                env = Env(server, server.admin_bearer(), Path(tmp))
                g = compare_cgroups(env, args.noop_tasks, args.rounds,
                                    limits or ("--child-memory-max", "1G"))
            finally:
                server.stop()
        print(f"cgroups off: median {g['median_off']:.0f}/s, on: median {g['median_on']:.0f}/s"
              f": {g['ratio']:.2f}x")
        print(render_compare(g, f"`bench_supervisor.py` (1) no-op, {g['tasks']} tasks, "
                                f"without and with per-child cgroups", "tasks/s"))
        return
    if limits:  # every supervisor of the run below
        os.environ["BENCH_SUPERVISE_ARGS"] = " ".join(
            [os.environ.get("BENCH_SUPERVISE_ARGS", ""), *limits]).strip()
    if args.metrics_compare:
        with tempfile.TemporaryDirectory(prefix="orbit-bench-sup-") as tmp:
            server = Server(Path(tmp))
            server.start()
            try:
                env = Env(server, server.admin_bearer(), Path(tmp))
                c = compare_metrics(env, args.noop_tasks, args.rounds)
            finally:
                server.stop()
        print(f"metrics off: median {c['median_off']:.0f}/s, on: median {c['median_on']:.0f}/s "
              f"({c['scrapes']} scrapes): cost {c['cost_pct']:+.1f} % of the throughput")
        print(render_compare(c, f"`bench_supervisor.py` (1) no-op, {c['tasks']} tasks",
                             "tasks/s"))
        return
    result: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="orbit-bench-sup-") as tmp:
        if os.environ.get("BENCH_KEEP"):
            tmp = tempfile.mkdtemp(prefix="orbit-bench-keep-")
        workdir = Path(tmp)
        profile = os.environ.get("BENCH_SERVER_PROFILE")  # cProfile output (development aid)
        server = Server(workdir, Path(profile) if profile else None)
        server.start()
        try:
            env = Env(server, server.admin_bearer(), workdir)
            rounds = []
            for _ in range(args.rounds):
                rounds.append({"bare": bench_bare_ceiling(args.cpu_tasks),
                               "fsync_us": fsync_latency_us(workdir),
                               "ipc_us": ipc_round_trip_us(),
                               "loop_ms": python_loop_ms(),
                               "throughput": bench_throughput(env, args.noop_tasks,
                                                              args.cpu_tasks)})
            result["rounds"] = rounds
            print(orjson.dumps(rounds, option=orjson.OPT_INDENT_2).decode())
            if args.only_throughput:
                return
            result["round_trip"] = asyncio.run(bench_round_trip(args.round_trips))
            result["kills"] = asyncio.run(bench_kills(env, args.kills))
        finally:
            server.stop()
    result["load_after"] = os.getloadavg()[0]
    section = render(result)
    print(section)
    if not args.no_write:
        replace_section(ROOT / "docs" / "benchmarks.md", section, BEGIN, END)


if __name__ == "__main__":
    main()
