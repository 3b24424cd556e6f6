#!/usr/bin/env python3
"""Orbit beside Celery and Dramatiq on the same workloads, interleaved in one run (issue 18).

    .venv/bin/pip install -e '.[test,bench]'    # the peers come from the `bench` extra
    .venv/bin/python scripts/bench_peers.py [--rounds 3] [--quick] [--only orbit,celery]
                                            [--no-write] [--json FILE]

Needs a `redis-server` binary (/usr/bin/redis-server on this machine kind; elsewhere
`apt install redis-server` or `brew install redis`, or pass --redis-server PATH). The script
starts its own redis-server (no persistence) on a free 127.0.0.1 port, an `orbit-server` on
a temporary SQLite file (its durable defaults), and each system's workers in turn, all on
127.0.0.1, and stops every process it started by PID, also on an error, Ctrl-C or SIGTERM.

Systems, at the same concurrency C (2 unless a row says 4):
  Orbit     `orbit-supervise --workers C` (handlers scripts/peers/peers_orbit.py)
  Celery    Redis broker and result backend, prefork `-c C`, acks_late, prefetch multiplier 1
  Dramatiq  Redis broker, Results middleware, `--processes C --threads 1`
The producer is this script, using each system's own Python client (OrbitClient,
`task.delay()` / `AsyncResult.get()`, `actor.send()` / `message.get_result()`).

Rows (each system runs the same functions, scripts/peers/peers_work.py):
  no-op tasks submitted one per call, then every result awaited in order: tasks/s from the
    first submit to the last result; the same with Orbit submitting in batches of 1,000;
  sequential submit-and-wait of a no-op: p50 / p99 ms;
  tasks burning 10 ms of CPU (C = 2 and C = 4) and 100 ms (C = 2), submitted one per call:
    tasks/s and % of the ceiling min(cores, C) / task time; the C = 2 ones again with Orbit
    run as `orbit-supervise --workers 2 --prefetch 2` (opt-in; Orbit-only rows);
  8 producer processes at once, each submitting one per call then awaiting its results;
  1 s time limit on a spinner that ignores SIGTERM: from the handler's start + 1 s to the
    kernel reporting its process exited (a pidfd polled by this script), "never" if it still
    runs 5 s later (Orbit attempt_timeout_ms=1000, Celery time_limit=1, Dramatiq
    time_limit=1000);
  RSS and PSS of the worker process tree (psutil) at C = 2, after the warm-up and the first
    no-op row;
  a chord at C = 2: N members burning 10 ms of CPU each (1,000; --chord-members N) and one
    callback that receives their results, submitted at once, then the callback's result
    awaited: members/s from the submit to that result (Orbit: one workflow,
    ``chord(group(burn.s(...)), join.s(...))``; Celery: ``chord(group(...))(join.s())``;
    Dramatiq: ``group(...).add_completion_callback(join.message())``, whose callback gets
    no results: it only runs once the group completed); again with Orbit's `--prefetch 2`
    (an Orbit-only row, as the 10 ms and 100 ms ones).
Rounds alternate the systems (A B C, then B C A, ...); the ratio Orbit / best peer is taken
within each round and its median reported. The result is printed and written to
docs/benchmarks.md between the peers-bench markers (the rest of the file is kept), unless
--no-write; --quick shrinks every count for a smoke run and never writes the docs;
--chord-only measures the chord rows alone and prints their table (a few minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import functools
import gc
import importlib
import importlib.metadata
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

# The repository, scripts/ and the peers' task modules on sys.path: peers_setup puts them.
from peers_producers import (
    Producer,
    ProducerConf,
    make_producer,
)
from peers_report import (
    chord_table,
    render,
)
from peers_setup import (
    BASE_CONCURRENCY,
    BEGIN,
    BIN,
    END,
    HIGH_CONCURRENCY,
    NOOP,
    OVERHEAD_PROCESSES,
    PARTS,
    PEERS,
    PEERS_DIR,
    PREFETCH,
    QUICK,
    ROOT,
    START_S,
    SYSTEMS,
    Counts,
    Proc,
    Work,
    cores,
    flush_redis,
    median_or_never,
    start_redis,
)
from peers_workloads import (
    many_producers,
    sequential,
    submit_then_await,
    time_limit_kill,
    tree_memory,
)
from server_harness import (
    Server,
    free_port,
    fsync_latency_us,
    python_loop_ms,
    replace_section,
)

from orbit_client import OrbitClient

# ------------------------------------------------------------------ worker sessions

@dataclass
class Context:
    """What outlives a session: the work directory, the Orbit server and Redis."""

    workdir: Path
    stack: contextlib.ExitStack
    orbit_admin: Path | None = None  # admin credentials file
    orbit_url: str = ""  # the orbit-server (its /metrics: what a task costs)
    supervisor_metrics: str = ""  # the current orbit-supervise's /metrics
    redis_url: str = ""
    sessions: int = 0
    broker_pids: dict[str, int] = field(default_factory=dict)  # orbit-server, redis-server


def orbit_queue(ctx: Context) -> tuple[Path, ProducerConf]:
    """A fresh queue with worker and producer credentials files, through the admin API."""
    assert ctx.orbit_admin is not None
    with OrbitClient(credentials=ctx.orbit_admin) as admin:
        queue = str(admin.create_queue(f"peers-{ctx.sessions}")["id"])
        worker = ctx.workdir / f"worker-{ctx.sessions}.json"
        producer = ctx.workdir / f"producer-{ctx.sessions}.json"
        admin.create_credential("worker", [queue], path=worker)
        admin.create_credential("producer", [queue], path=producer)
    return worker, ProducerConf("orbit", credentials=str(producer), queue=queue)


def worker_command(system: str, concurrency: int, worker_creds: Path | None,
                   queue: str, prefetch: int = 0, metrics_port: int = 0) -> list[str]:
    if system == "orbit":
        return [str(BIN / "orbit-supervise"), "--credentials-file", str(worker_creds),
                "--queue", queue, "--workers", str(concurrency), "--log-level", "warning",
                "--metrics-port", str(metrics_port),
                *(["--prefetch", str(prefetch)] if prefetch else []), "peers_orbit:handlers"]
    if system == "celery":
        return [str(BIN / "celery"), "-A", "peers_celery", "worker", "-P", "prefork",
                "-c", str(concurrency), "-l", "WARNING", "-n", "peers@%h"]
    return [str(BIN / "dramatiq"), "peers_dramatiq", "--processes", str(concurrency),
            "--threads", "1", "--path", str(PEERS_DIR)]


@contextlib.contextmanager
def session(ctx: Context, system: str, concurrency: int, warmup: int,
            prefetch: int = 0) -> Iterator[tuple[Proc, Producer, ProducerConf]]:
    """Start ``system``'s workers at ``concurrency`` (Orbit's with ``--prefetch``), warm
    them up, yield them with a producer; stop them (by PID, with their tree) whatever
    happens."""
    ctx.sessions += 1
    worker_creds: Path | None = None
    if system == "orbit":
        worker_creds, conf = orbit_queue(ctx)
    else:
        flush_redis(ctx.redis_url)
        conf = ProducerConf(system, redis_url=ctx.redis_url)
    env = dict(os.environ, PEERS_REDIS_URL=ctx.redis_url, PYTHONPATH=os.pathsep.join(
        [str(PEERS_DIR), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    log = ctx.workdir / f"{system}-{ctx.sessions}-c{concurrency}.log"
    metrics_port = free_port()
    ctx.supervisor_metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    proc = Proc(system, worker_command(system, concurrency, worker_creds, conf.queue,
                                       prefetch, metrics_port), log, env=env, cwd=PEERS_DIR)
    producer: Producer | None = None
    try:
        producer = make_producer(conf)
        warm_up(proc, producer, concurrency, warmup)
        yield proc, producer, conf
    finally:
        if producer is not None:
            producer.close()
        proc.stop()


def warm_up(proc: Proc, producer: Producer, concurrency: int, count: int) -> None:
    """Until every process of the worker tree exists and the workers answered a few
    no-ops: start-up (imports, connections, forks) is not what the rows measure."""
    deadline = time.monotonic() + START_S
    expected = concurrency + OVERHEAD_PROCESSES[proc.name]
    while len(proc.tree()) < expected and time.monotonic() < deadline:
        proc.check_alive()
        time.sleep(0.05)
    handles = [producer.submit(NOOP) for _ in range(count)]
    for handle in handles:
        proc.check_alive()
        producer.wait(handle, START_S)


def cpu_by_part(ctx: Context, system: str, proc: Proc) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each part of ``system``'s run: the
    producer (this process, and the producer processes it has waited for), the broker
    (orbit-server or redis-server), the worker command's main process and the rest of its
    tree (pool processes; Orbit's template and children). A pool process that has ended is
    counted through its parent's reaped-children times, so a run that replaces pool
    processes does not lose their CPU (and a part's difference never goes below zero)."""
    def used(p: psutil.Process, reaped: bool = False) -> float:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            return float(t.user + t.system + (t.children_user + t.children_system
                                              if reaped else 0.0))
        return 0.0

    def reaped_only(p: psutil.Process) -> float:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            return float(t.children_user + t.children_system)
        return 0.0

    me = psutil.Process().cpu_times()
    tree = proc.tree()
    return {"producer": me.user + me.system + me.children_user + me.children_system,
            "broker": used(psutil.Process(ctx.broker_pids[system])),
            "worker_main": used(tree[0]) if tree else 0.0,
            "worker_pool": (reaped_only(tree[0]) if tree else 0.0)
            + sum(used(p, reaped=True) for p in tree[1:])}


def accounted(ctx: Context, system: str, proc: Proc, fig: dict[str, Any], key: str,
              tasks: int, measure: Callable[[], Any]) -> Any:
    """``measure()``, and the CPU each part spent on it per task (ms) in ``fig["cpu_ms"]``;
    for Orbit also what each task cost in commits, syncs and messages (``fig["per_task"]``,
    from the server's and the supervisor's metrics)."""
    before = cpu_by_part(ctx, system, proc)
    costs_before = orbit_costs(ctx) if system == "orbit" else None
    value = measure()
    after = cpu_by_part(ctx, system, proc)
    fig.setdefault("cpu_ms", {})[key] = {
        part: (after[part] - before[part]) * 1000 / tasks for part in PARTS}
    if costs_before is not None:
        costs_after = orbit_costs(ctx)
        fig.setdefault("per_task", {})[key] = {
            name: (costs_after[name] - costs_before[name]) / tasks for name in COSTS}
    return value


# What one Orbit task costs, read from the metrics (name: how to sum it).
COSTS = ("transactions", "commits", "syncs", "http_requests", "producer_frames",
         "worker_frames", "child_messages")


def orbit_costs(ctx: Context) -> dict[str, float]:
    """The server's and the current supervisor's counters (docs/observability.md)."""
    server = parse_metrics(httpx.get(f"{ctx.orbit_url}/metrics", timeout=10).text)
    sup = parse_metrics(httpx.get(ctx.supervisor_metrics, timeout=10).text)

    def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str,
              skip: Callable[[dict[str, str]], bool] = lambda _labels: False) -> float:
        return sum(v for labels, v in samples.get(name, []) if not skip(labels))

    return {
        "transactions": total(server, "orbit_store_transaction_seconds_count"),
        "commits": total(server, "orbit_store_commits_total"),
        "syncs": total(server, "orbit_store_wal_syncs_total"),
        "http_requests": total(server, "orbit_http_requests_total",
                               lambda labels: labels.get("route") == "/metrics"),
        "producer_frames": total(server, "orbit_frames_total",
                                 lambda labels: labels.get("channel") != "producer"),
        "worker_frames": total(server, "orbit_frames_total",
                               lambda labels: labels.get("channel") != "worker"),
        "child_messages": total(sup, "orbit_supervisor_child_messages_total"),
    }


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition: samples by name, each with its labels."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def run_system(ctx: Context, system: str, counts: Counts, tag: str,
               chord_only: bool = False) -> dict[str, Any]:
    """Every row for one system in one round (the chord rows alone with ``chord_only``);
    two sessions (C = 2, then C = 4), and Orbit's with its prefetch."""
    fig: dict[str, Any] = {}
    with session(ctx, system, BASE_CONCURRENCY, counts.warmup) as (proc, producer, conf):
        def count(key: str, tasks: int, measure: Callable[[], Any]) -> Any:
            return accounted(ctx, system, proc, fig, key, tasks, measure)

        if not chord_only:
            base_rows(ctx, system, proc, producer, conf, counts, tag, fig, count)
        members = counts.chord_members
        fig["chord"] = count("chord", members + 1, lambda: chord_rate(producer, members))
    if not chord_only:
        with session(ctx, system, HIGH_CONCURRENCY, counts.warmup) as (proc, producer, _c):
            fig["cpu10_c4"] = accounted(ctx, system, proc, fig, "cpu10_c4", counts.cpu10,
                                        lambda: submit_then_await(
                                            producer, [Work("burn", 10.0)] * counts.cpu10))
    if system == "orbit":  # the opt-in prefetch, beside the peers' own (see "What differs")
        with session(ctx, system, BASE_CONCURRENCY, counts.warmup,
                     prefetch=PREFETCH) as (proc, producer, _conf):
            for key, ms, tasks in (() if chord_only else (
                    ("cpu10_c2_prefetch", 10.0, counts.cpu10),
                    ("cpu100_c2_prefetch", 100.0, counts.cpu100))):
                fig[key] = accounted(ctx, system, proc, fig, key, tasks, functools.partial(
                    submit_then_await, producer, [Work("burn", ms)] * tasks))
            fig["chord_prefetch"] = accounted(
                ctx, system, proc, fig, "chord_prefetch", counts.chord_members + 1,
                functools.partial(chord_rate, producer, counts.chord_members))
    return fig


def base_rows(ctx: Context, system: str, proc: Proc, producer: Producer, conf: ProducerConf,
              counts: Counts, tag: str, fig: dict[str, Any],
              count: Callable[[str, int, Callable[[], Any]], Any]) -> None:
    """The rows of the C = 2 session before its chord, into ``fig``."""
    fig["noop_one"] = count("noop_one", counts.noop,
                            lambda: submit_then_await(producer, [NOOP] * counts.noop))
    fig.update(tree_memory(proc))
    if system == "orbit":
        fig["noop_batch"] = count("noop_batch", counts.noop, lambda: submit_then_await(
            producer, [NOOP] * counts.noop, batch=True))
    seq = count("seq", counts.sequential, lambda: sequential(producer, counts.sequential))
    fig["seq_p50"], fig["seq_p99"] = seq["p50"], seq["p99"]
    fig["cpu10_c2"] = count("cpu10_c2", counts.cpu10, lambda: submit_then_await(
        producer, [Work("burn", 10.0)] * counts.cpu10))
    fig["cpu100_c2"] = count("cpu100_c2", counts.cpu100, lambda: submit_then_await(
        producer, [Work("burn", 100.0)] * counts.cpu100))
    fig["producers"] = count("producers", counts.producer_tasks,
                             lambda: many_producers(conf, counts.producer_tasks))
    kills = [time_limit_kill(producer, ctx.workdir, f"{tag}-{system}-{i}")
             for i in range(counts.kills)]
    fig["kill_ms"] = median_or_never([k["gone_ms"] for k in kills])
    fig["kill_interrupted_ms"] = median_or_never([k["interrupted_ms"] for k in kills])
    fig["kill_samples"] = kills


def chord_rate(producer: Producer, members: int) -> float:
    """Members/s from submitting the chord to holding its callback's result."""
    t0 = time.perf_counter()
    producer.chord(members, 10.0)
    return members / (time.perf_counter() - t0)


# ------------------------------------------------------------------ host and versions

def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def host_probe(workdir: Path) -> dict[str, float]:
    """How fast the host is right now, in what Orbit's figures follow (bench_server's
    probes): a commit's fsync and a plain Python loop; and the load."""
    return {"load": os.getloadavg()[0], "fsync_us": fsync_latency_us(workdir),
            "loop_ms": python_loop_ms()}


def versions(redis_binary: str | None) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for key, dist in (("orbit", "orbit-tasks"), ("celery", "celery"), ("kombu", "kombu"),
                      ("billiard", "billiard"), ("dramatiq", "dramatiq"), ("redis", "redis")):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[key] = importlib.metadata.version(dist)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        out["orbit_commit"] = head + (" with uncommitted changes" if dirty else "")
    if redis_binary:
        text = subprocess.run([redis_binary, "--version"], capture_output=True, text=True,
                              timeout=10).stdout
        out["redis_server"] = next((w.split("=")[1] for w in text.split()
                                    if w.startswith("v=")), text.strip())
    return out


# ------------------------------------------------------------------ main

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, help="rounds (default 3; 2 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="shrink every count for a smoke run (never writes the docs)")
    parser.add_argument("--only", default=",".join(SYSTEMS),
                        help="comma-separated systems to run (default: all)")
    parser.add_argument("--no-write", action="store_true", help="do not touch the docs")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--from-json", type=Path,
                        help="measure nothing: render the figures a --json run wrote")
    parser.add_argument("--chord-members", type=int, default=None,
                        help="members of the chord row (default 1000; 20 with --quick)")
    parser.add_argument("--chord-only", action="store_true",
                        help="measure the chord rows alone and print their table (issue 30's "
                        "row; never writes the docs)")
    parser.add_argument("--redis-server", default=shutil.which("redis-server")
                        or "/usr/bin/redis-server")
    args = parser.parse_args()
    args.systems = [s for s in SYSTEMS if s in args.only.split(",")]
    unknown = set(args.only.split(",")) - set(SYSTEMS)
    if unknown or not args.systems:
        parser.error(f"--only takes some of {','.join(SYSTEMS)}")
    if args.rounds is None:
        args.rounds = 2 if args.quick else 3
    if not 1 <= args.rounds <= 20:
        parser.error("--rounds must be 1 to 20")
    return args


def check_peers(args: argparse.Namespace) -> None:
    """Fail before starting anything when a selected peer cannot run here."""
    for system in (s for s in args.systems if s in PEERS):
        try:
            importlib.import_module(system)
        except ImportError:
            raise SystemExit(f"{system} is not installed: pip install -e '.[bench]'") from None
        if not (BIN / system).exists():
            raise SystemExit(f"no {BIN / system}: run this script with the venv's python")
    needs_redis = any(s in PEERS for s in args.systems)
    if needs_redis and not Path(args.redis_server).exists():
        raise SystemExit(f"no redis-server at {args.redis_server}: apt install redis-server "
                         "(or brew install redis), or pass --redis-server PATH")


def rotate(systems: Sequence[str], n: int) -> list[str]:
    k = n % len(systems)
    return [*systems[k:], *systems[:k]]


def load_text() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def measure(args: argparse.Namespace, counts: Counts, workdir: Path,
            stack: contextlib.ExitStack) -> dict[str, Any]:
    ctx = Context(workdir, stack)
    if "orbit" in args.systems:
        server = Server(workdir)
        stack.callback(server.stop)
        server.start()
        assert server.proc is not None
        ctx.broker_pids["orbit"] = server.proc.pid
        ctx.orbit_url = server.url
        server.admin_bearer()  # writes the admin credentials file read below
        ctx.orbit_admin = workdir / "admin.json"
    if any(s in PEERS for s in args.systems):
        ctx.redis_url, redis_pid = start_redis(args.redis_server, workdir, stack)
        ctx.broker_pids.update(celery=redis_pid, dramatiq=redis_pid)
        os.environ["PEERS_REDIS_URL"] = ctx.redis_url  # for this process's peer clients
    rounds = []
    for n in range(args.rounds):
        order = rotate(args.systems, n)
        probe = host_probe(workdir)
        figures = {}
        for system in order:
            print(f"round {n + 1}/{args.rounds}: {system}", file=sys.stderr, flush=True)
            figures[system] = run_system(ctx, system, counts, f"r{n}", args.chord_only)
        rounds.append({"order": order, "host": probe, "figures": figures})
    return {"rounds": rounds}


def main() -> None:
    args = parse_args()
    if args.from_json:
        publish(args, orjson.loads(args.from_json.read_bytes()))
        return
    check_peers(args)
    counts = QUICK if args.quick else Counts()
    if args.chord_members is not None:
        if not 1 <= args.chord_members <= 10_000:
            raise SystemExit("--chord-members must be 1 to 10000")
        counts = dataclasses.replace(counts, chord_members=args.chord_members)
    # SIGTERM unwinds like Ctrl-C, so every process started here is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result: dict[str, Any] = {"systems": args.systems, "quick": args.quick,
                              "counts": asdict(counts), "chord_only": args.chord_only}
    host = {"cpu_model": cpu_model(), "cores": cores(), "nproc": os.cpu_count(),
            "load_before": load_text(), "started": utc_now()}
    with tempfile.TemporaryDirectory(prefix="orbit-bench-peers-") as tmp, \
            contextlib.ExitStack() as stack:
        try:
            result.update(measure(args, counts, Path(tmp), stack))
        except BaseException as exc:
            # Free the failed frames' locals while Redis still runs: a Celery AsyncResult
            # collected after Redis stopped retries its unsubscribe for many seconds.
            traceback.clear_frames(exc.__traceback__)
            gc.collect()
            raise
    host.update(load_after=load_text(), ended=utc_now())
    needs_redis = any(s in PEERS for s in args.systems)
    result.update(host=host, versions=versions(args.redis_server if needs_redis else None))
    if args.json:
        args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    publish(args, result)


def publish(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """Print the section; put it in docs/benchmarks.md unless --no-write or a smoke run (the
    chord rows alone: their table, printed)."""
    if result.get("chord_only"):
        print(chord_table(result))
        return
    section = render(result)
    print(section)
    if result["quick"] and not args.no_write:
        print("(a --quick run: docs/benchmarks.md left as it was)", file=sys.stderr)
    elif not args.no_write:
        replace_section(ROOT / "docs" / "benchmarks.md", section, BEGIN, END)


if __name__ == "__main__":
    main()
