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
--no-write; --quick shrinks every count for a smoke run and never writes the docs.
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
import math
import multiprocessing
import os
import platform
import queue
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = ROOT / "scripts" / "peers"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(PEERS_DIR))  # the peers' task modules, for this script's producers

from bench_server import (  # noqa: E402
    Server,
    free_port,
    fsync_latency_us,
    pct,
    python_loop_ms,
    replace_section,
)

from orbit_client import OrbitClient, is_settled  # noqa: E402

BEGIN = "<!-- peers-bench:begin -->"
END = "<!-- peers-bench:end -->"
SYSTEMS = ("orbit", "celery", "dramatiq")
LABELS = {"orbit": "Orbit", "celery": "Celery", "dramatiq": "Dramatiq"}
PEERS = ("celery", "dramatiq")
BIN = Path(sys.executable).parent  # the venv whose python runs this script
BASE_CONCURRENCY = 2
HIGH_CONCURRENCY = 4
BATCH = 1000  # Orbit's batch submit (the server's limit per request)
PRODUCERS = 8
# Orbit's opt-in prefetch in its own rows: one started attempt waiting per child, as
# Celery's prefork pool (prefetch multiplier 1) and Dramatiq reserve ahead by default.
PREFETCH = 2
TIME_LIMIT_S = 1.0
GONE_BOUND_S = 5.0  # after the limit: a process still running then counts as "never" gone
WAIT_S = 120.0  # bound on one awaited result
START_S = 60.0  # bound on a process coming up
STOP_S = 20.0  # grace after SIGTERM before SIGKILL
POLL_S = 0.002
# Processes of a worker tree besides its C pool processes: Orbit's supervisor and the
# template its children fork from; Celery's and Dramatiq's main process.
OVERHEAD_PROCESSES = {"orbit": 2, "celery": 1, "dramatiq": 1}
TIMES = "\u00d7"  # the typographic signs of the tables (escaped: ruff flags look-alikes)
MINUS = "\u2212"


@dataclass(frozen=True)
class Counts:
    noop: int = 2000
    sequential: int = 300
    cpu10: int = 600
    cpu100: int = 100
    producer_tasks: int = 2000  # split over the PRODUCERS
    kills: int = 3  # time-limit samples per system and round
    warmup: int = 20
    chord_members: int = 1000


QUICK = Counts(noop=100, sequential=20, cpu10=40, cpu100=6, producer_tasks=80, kills=1,
               warmup=8, chord_members=20)


@dataclass(frozen=True)
class Work:
    """One task: ``kind`` is noop, burn (``arg`` = CPU ms) or spin (``arg`` = pid file)."""

    kind: str
    arg: float | str | None = None


NOOP = Work("noop")


# ------------------------------------------------------------------ processes

class Proc:
    """A process this script started (in its own session, so a Ctrl-C in the terminal
    reaches only this script, which then stops it in order), with its log file."""

    def __init__(self, name: str, cmd: Sequence[str], log: Path,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT,
                                          env=env, cwd=cwd, start_new_session=True)
        self.ps = psutil.Process(self.popen.pid)

    def tree(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.Error):
            return [self.ps, *self.ps.children(recursive=True)]
        return []

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"{self.name} exited ({self.popen.returncode}):\n{tail}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL whatever of its tree is left after STOP_S, each by PID.
        The tree is listed before the signal: once the parent is gone its children are
        no longer found through it. psutil refuses to signal a reused PID."""
        tree = self.tree()
        if self.popen.poll() is None:
            with contextlib.suppress(psutil.Error):
                self.ps.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(STOP_S)
        _gone, alive = psutil.wait_procs(tree, timeout=0)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=10)
        if self.popen.poll() is None:
            self.popen.wait(10)


def start_redis(binary: str, workdir: Path, stack: contextlib.ExitStack) -> tuple[str, int]:
    """A throwaway redis-server on a free loopback port, without persistence (no RDB
    snapshots, no AOF), as a benchmark's broker usually runs; returns its URL and PID."""
    import redis

    port = free_port()
    proc = Proc("redis-server", [binary, "--port", str(port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--dir", str(workdir),
                                 "--daemonize", "no"], workdir / "redis.log")
    stack.callback(proc.stop)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        proc.check_alive()
        with contextlib.suppress(redis.RedisError):
            if client.ping():
                client.close()
                return url, proc.popen.pid
        time.sleep(0.05)
    raise SystemExit("redis-server did not answer")


def flush_redis(url: str) -> None:
    """Empty Redis between sessions (no worker runs then): no message or result of one
    session can reach the next."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushall()
    finally:
        client.close()


# ------------------------------------------------------------------ producers

class Producer(Protocol):
    def submit(self, work: Work) -> Any: ...
    def submit_batch(self, works: Sequence[Work]) -> list[Any]: ...
    def wait(self, handle: Any, timeout: float = WAIT_S) -> None: ...
    def chord(self, members: int, ms: float, timeout: float = WAIT_S) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class ProducerConf:
    """What a producer process needs to build its client (picklable, for spawn)."""

    system: str
    redis_url: str = ""
    credentials: str = ""  # Orbit producer credentials file
    queue: str = ""


def orbit_spec(work: Work) -> dict[str, Any]:
    spec: dict[str, Any] = {"handler": f"peers.{work.kind}", "handler_version": "1",
                            "payload_version": "1", "payload": {}, "idempotency": "IDEMPOTENT"}
    if work.kind == "burn":
        spec["payload"] = {"ms": work.arg}
    elif work.kind == "spin":
        spec.update(payload={"pidfile": work.arg}, max_attempts=1,
                    attempt_timeout_ms=int(TIME_LIMIT_S * 1000))
    return spec


class OrbitProducer:
    def __init__(self, conf: ProducerConf) -> None:
        self.client = OrbitClient(credentials=conf.credentials)
        self.queue = conf.queue

    def submit(self, work: Work) -> str:
        return str(self.client.submit(self.queue, orbit_spec(work))["id"])

    def submit_batch(self, works: Sequence[Work]) -> list[str]:
        ids: list[str] = []
        for start in range(0, len(works), BATCH):
            chunk = [orbit_spec(w) for w in works[start:start + BATCH]]
            ids += [str(t["id"]) for t in self.client.submit_batch(self.queue, chunk)]
        return ids

    def wait(self, handle: Any, timeout: float = WAIT_S) -> None:
        # One long poll per result (OrbitClient.wait reads the task first, then polls: two
        # requests for a task still running, which would bill Orbit an extra round trip).
        deadline = time.monotonic() + timeout
        for _ in range(1000):  # the deadline ends it first, whatever the server answers
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            task = self.client.get_task(handle, wait_ms=min(left_ms, 60_000))
            if is_settled(task):
                if task["state"] != "SUCCEEDED":
                    raise SystemExit(f"orbit task {handle} ended {task['state']}")
                return
        raise SystemExit(f"orbit task {handle} not settled in {timeout:.0f} s")

    def chord(self, members: int, ms: float, timeout: float = WAIT_S) -> None:
        """One workflow: ``members`` burns, then a join that receives their results."""
        from orbit_client import chord, group
        from orbit_wire import TaskType

        burn: TaskType[dict[str, float], int] = TaskType("peers.burn", "1", "1",
                                                         idempotent=True)
        join: TaskType[dict[str, Any], int] = TaskType("peers.join", "1", "1",
                                                       idempotent=True)
        flow = chord(group(burn.s({"ms": ms}) for _ in range(members)), join.s({}))
        got = self.client.submit(flow, queue=self.queue).result(timeout)
        if got != members:
            raise SystemExit(f"orbit chord: the callback saw {got} results, not {members}")

    def close(self) -> None:
        self.client.close()


class CeleryProducer:
    def __init__(self, conf: ProducerConf) -> None:
        self.tasks = importlib.import_module("peers_celery")
        # This process only (the workers keep Celery's defaults): if Redis is already gone
        # when a result handle is dropped (teardown after an error), give up at once
        # instead of retrying the unsubscribe 20 times, a second apart, per handle.
        self.tasks.app.conf.result_backend_transport_options = {
            "retry_policy": {"max_retries": 0}}
        self.unawaited: dict[str, Any] = {}

    def submit(self, work: Work) -> Any:
        task = getattr(self.tasks, work.kind)
        if work.kind == "spin":
            handle = task.apply_async(args=[work.arg], time_limit=TIME_LIMIT_S)
        else:
            handle = task.delay() if work.arg is None else task.delay(work.arg)
        self.unawaited[handle.id] = handle
        return handle

    def submit_batch(self, works: Sequence[Work]) -> list[Any]:
        raise NotImplementedError("Celery has no batch submit")

    def wait(self, handle: Any, timeout: float = WAIT_S) -> None:
        handle.get(timeout=timeout)
        del self.unawaited[handle.id]

    def chord(self, members: int, ms: float, timeout: float = WAIT_S) -> None:
        from celery import chord, group

        header = group(self.tasks.burn.s(ms) for _ in range(members))
        got = chord(header)(self.tasks.join.s()).get(timeout=timeout)
        if got != members:
            raise SystemExit(f"celery chord: the callback saw {got} results, not {members}")

    def close(self) -> None:
        """Release the handles never awaited (the spinners', or all after an error) while
        Redis still runs: Celery's backend holds them until their result comes."""
        for handle in self.unawaited.values():
            handle.backend.remove_pending_result(handle)
        self.unawaited.clear()


class DramatiqProducer:
    def __init__(self, conf: ProducerConf) -> None:
        self.actors = importlib.import_module("peers_dramatiq")

    def submit(self, work: Work) -> Any:
        actor = getattr(self.actors, work.kind)
        if work.kind == "spin":
            return actor.send_with_options(args=(work.arg,),
                                           time_limit=int(TIME_LIMIT_S * 1000))
        return actor.send() if work.arg is None else actor.send(work.arg)

    def submit_batch(self, works: Sequence[Work]) -> list[Any]:
        raise NotImplementedError("Dramatiq has no batch submit")

    def wait(self, handle: Any, timeout: float = WAIT_S) -> None:
        from dramatiq.results import ResultTimeout

        # The results backend's blocking read outlives its Redis socket's 5 s read timeout
        # (a redis TimeoutError, not a ResultTimeout), so a longer wait is taken in
        # 1-second reads; each returns as soon as the result is there.
        deadline = time.monotonic() + timeout
        while True:
            try:
                handle.get_result(block=True, timeout=1000)
                return
            except ResultTimeout:
                if time.monotonic() >= deadline:
                    raise

    def chord(self, members: int, ms: float, timeout: float = WAIT_S) -> None:
        import dramatiq

        callback = self.actors.join.message()
        members_group = dramatiq.group(self.actors.burn.message(ms) for _ in range(members))
        members_group.add_completion_callback(callback)
        members_group.run()
        self.wait(callback, timeout)

    def close(self) -> None:
        pass


PRODUCER_CLASSES: dict[str, Callable[[ProducerConf], Producer]] = {
    "orbit": OrbitProducer, "celery": CeleryProducer, "dramatiq": DramatiqProducer}


def make_producer(conf: ProducerConf) -> Producer:
    # The peers' modules read the Redis URL when imported, so it goes in first.
    if conf.redis_url:
        os.environ["PEERS_REDIS_URL"] = conf.redis_url
    return PRODUCER_CLASSES[conf.system](conf)


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


# ------------------------------------------------------------------ rows

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


def ceiling(task_ms: float, concurrency: int) -> float:
    """Tasks/s the cores allow for tasks of ``task_ms`` CPU, capped by the concurrency."""
    return min(cores(), concurrency) * 1000.0 / task_ms


def cores() -> int:
    return len(os.sched_getaffinity(0))


# The parts of a run whose CPU time is counted per task (the "where the time goes" table).
PARTS = ("producer", "broker", "worker_main", "worker_pool")


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


def run_system(ctx: Context, system: str, counts: Counts, tag: str) -> dict[str, Any]:
    """Every row for one system in one round; two sessions (C = 2, then C = 4)."""
    fig: dict[str, Any] = {}
    with session(ctx, system, BASE_CONCURRENCY, counts.warmup) as (proc, producer, conf):
        def count(key: str, tasks: int, measure: Callable[[], Any]) -> Any:
            return accounted(ctx, system, proc, fig, key, tasks, measure)

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
        members = counts.chord_members
        fig["chord"] = count("chord", members + 1, lambda: chord_rate(producer, members))
    with session(ctx, system, HIGH_CONCURRENCY, counts.warmup) as (proc, producer, _conf):
        fig["cpu10_c4"] = accounted(ctx, system, proc, fig, "cpu10_c4", counts.cpu10,
                                    lambda: submit_then_await(
                                        producer, [Work("burn", 10.0)] * counts.cpu10))
    if system == "orbit":  # the opt-in prefetch, beside the peers' own (see "What differs")
        with session(ctx, system, BASE_CONCURRENCY, counts.warmup,
                     prefetch=PREFETCH) as (proc, producer, _conf):
            for key, ms, tasks in (("cpu10_c2_prefetch", 10.0, counts.cpu10),
                                   ("cpu100_c2_prefetch", 100.0, counts.cpu100)):
                fig[key] = accounted(ctx, system, proc, fig, key, tasks, functools.partial(
                    submit_then_await, producer, [Work("burn", ms)] * tasks))
            fig["chord_prefetch"] = accounted(
                ctx, system, proc, fig, "chord_prefetch", counts.chord_members + 1,
                functools.partial(chord_rate, producer, counts.chord_members))
    return fig


def chord_rate(producer: Producer, members: int) -> float:
    """Members/s from submitting the chord to holding its callback's result."""
    t0 = time.perf_counter()
    producer.chord(members, 10.0)
    return members / (time.perf_counter() - t0)


def median_or_never(values: Sequence[float | None]) -> float | None:
    """The median, a None ("never") counting as later than any figure; None if the
    median is one of them."""
    if not values:
        return None
    mid = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(mid) else mid


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


# ------------------------------------------------------------------ report

@dataclass(frozen=True)
class Row:
    """One line of the table: its figure keys (two for "p50 / p99" and "RSS / PSS"), which
    way is better, and what the peers' side is when it differs (the batch row compares
    with the peers' one-per-call figure)."""

    title: str
    keys: tuple[str, ...]
    better: str  # "high", "low" or "kill" (a signed delay; "never" possible)
    unit: str = ""
    peer_keys: tuple[str, ...] = ()
    orbit_only: bool = False
    cpu: tuple[float, int] | None = None  # (task ms, concurrency): show % of the ceiling
    decimals: int = 0


def rows(counts: Counts) -> list[Row]:
    return [
        Row(f"{counts.noop:,} no-op tasks submitted one per call, then every result awaited "
            "(tasks/s)", ("noop_one",), "high"),
        Row(f"the same, Orbit submitting in batches of {BATCH:,} (tasks/s; ratio to the best "
            "peer's one per call)", ("noop_batch",), "high", peer_keys=("noop_one",),
            orbit_only=True),
        Row(f"sequential submit-and-wait of a no-op, p50 / p99 (ms, n={counts.sequential})",
            ("seq_p50", "seq_p99"), "low", decimals=2),
        Row(f"{counts.cpu10} tasks {TIMES} 10 ms CPU, concurrency 2 (tasks/s, % of the ceiling)",
            ("cpu10_c2",), "high", cpu=(10.0, 2)),
        Row("the same, concurrency 4", ("cpu10_c4",), "high", cpu=(10.0, 4)),
        Row(f"{counts.cpu100} tasks {TIMES} 100 ms CPU, concurrency 2 (tasks/s, % of the ceiling)",
            ("cpu100_c2",), "high", cpu=(100.0, 2), decimals=1),
        Row(f"{PRODUCERS} concurrent producers, {counts.producer_tasks // PRODUCERS} no-ops "
            "each submitted one per call, then their results awaited (tasks/s)",
            ("producers",), "high"),
        Row(f"the 10 ms CPU row, Orbit with `--prefetch {PREFETCH}` (ratio to the best peer's "
            "10 ms row)", ("cpu10_c2_prefetch",), "high", peer_keys=("cpu10_c2",),
            orbit_only=True, cpu=(10.0, 2)),
        Row(f"the 100 ms CPU row, Orbit with `--prefetch {PREFETCH}` (ratio to the best "
            "peer's 100 ms row)", ("cpu100_c2_prefetch",), "high", peer_keys=("cpu100_c2",),
            orbit_only=True, cpu=(100.0, 2), decimals=1),
        Row("1 s time limit, spinner ignoring SIGTERM: limit → process gone (ms; ratio "
            f"column: Orbit {MINUS} fastest peer)", ("kill_ms",), "kill"),
        Row(f"chord: {counts.chord_members:,} members {TIMES} 10 ms CPU and one callback, "
            "concurrency 2, submit to the callback's result (members/s, % of the ceiling)",
            ("chord",), "high", cpu=(10.0, 2)),
        Row(f"the chord row, Orbit with `--prefetch {PREFETCH}` (members/s; ratio to the best "
            "peer's chord row)", ("chord_prefetch",), "high", peer_keys=("chord",),
            orbit_only=True, cpu=(10.0, 2)),
        Row("worker process tree RSS / PSS, concurrency 2 (MiB)", ("rss", "pss"), "low",
            decimals=1),
    ]


def fmt(value: float | None, decimals: int, signed: bool = False) -> str:
    if value is None:
        return "never"
    text = f"{value:+.{decimals}f}" if signed else f"{value:,.{decimals}f}"
    return text.replace("-", MINUS)


def spread(values: Sequence[float | None], decimals: int, signed: bool = False) -> str:
    """The median and, when the rounds differ, their range."""
    mid = fmt(median_or_never(values), decimals, signed)
    ordered = sorted(values, key=lambda v: math.inf if v is None else v)
    low, high = fmt(ordered[0], decimals, signed), fmt(ordered[-1], decimals, signed)
    return mid if low == high else f"{mid} ({low} to {high})"


def system_cell(row: Row, runs: list[dict[str, Any]], system: str) -> str:
    if row.orbit_only and system != "orbit":
        return "—"
    parts = []
    for key in row.keys:
        values = [run[system][key] for run in runs]
        text = spread(values, row.decimals, signed=row.better == "kill")
        if row.cpu is not None:
            share = statistics.median(values) / ceiling(*row.cpu)
            text += f", {share:.0%}"
        if row.better == "kill" and median_or_never(values) is None:
            hit = median_or_never([run[system]["kill_interrupted_ms"] for run in runs])
            if hit is not None:
                text += (f" (an exception stopped the task in its thread at {fmt(hit, 0, True)}"
                         " ms; the process lives on)")
        parts.append(text)
    return " / ".join(parts)


def round_ratio(row: Row, run: dict[str, Any], key: str, peer_key: str,
                peers: Sequence[str]) -> float | str | None:
    """Orbit against the best peer in one round: a ratio, or for the kill row the
    difference in ms (or a word when a side never ended its process)."""
    orbit = run["orbit"][key]
    theirs = [run[p][peer_key] for p in peers]
    if row.better == "kill":
        ended = [t for t in theirs if t is not None]
        if orbit is None:
            return "Orbit never"
        return orbit - min(ended) if ended else "peers never"
    best = max(theirs) if row.better == "high" else min(theirs)
    return orbit / best if best else None


def kill_summary(numbers: list[float], words: list[str], total: int) -> str:
    """The kill row's comparison: the median difference when every round had one, else
    who never ended the process (or "mixed" when the rounds disagree)."""
    if len(numbers) == total:
        return fmt(statistics.median(numbers), 0, True) + " ms"
    if not numbers:
        return ", ".join(sorted(set(words)))
    return "mixed"


def ratio_cell(row: Row, runs: list[dict[str, Any]], peers: Sequence[str]) -> str:
    if not peers:
        return "—"
    parts = []
    peer_keys = row.peer_keys or row.keys
    for key, peer_key in zip(row.keys, peer_keys, strict=True):
        per_round = [round_ratio(row, run, key, peer_key, peers) for run in runs]
        numbers = [r for r in per_round if isinstance(r, float)]
        words = [r for r in per_round if isinstance(r, str)]
        if row.better == "kill":
            text = kill_summary(numbers, words, len(per_round))
            listing = ", ".join(fmt(r, 0, True) if isinstance(r, float) else str(r)
                                for r in per_round)
        else:
            text = f"{statistics.median(numbers):.2f}{TIMES}" if numbers else "—"
            listing = ", ".join(f"{r:.2f}" for r in numbers)
        parts.append(f"**{text}**" + (f" ({listing})" if len(per_round) > 1 else ""))
    return " / ".join(parts)


def table(result: dict[str, Any]) -> str:
    systems = result["systems"]
    peers = [s for s in systems if s in PEERS]
    runs = [r["figures"] for r in result["rounds"]]
    head = ["workload", *(LABELS[s] for s in systems)]
    if "orbit" in systems and peers:
        head.append("Orbit / best peer: median (per round)")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows(Counts(**result["counts"])):
        if row.orbit_only and "orbit" not in systems:
            continue
        cells = [row.title, *(system_cell(row, runs, s) for s in systems)]
        if len(head) > len(systems) + 1:
            cells.append(ratio_cell(row, runs, peers))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The rows whose CPU per task is shown, with a short name each.
CPU_ROWS = (("noop_one", "no-ops, one per call"), ("noop_batch", "no-ops, Orbit batch submit"),
            ("seq", "sequential submit-and-wait"), ("cpu10_c2", "10 ms CPU, concurrency 2"),
            ("cpu10_c4", "10 ms CPU, concurrency 4"), ("cpu100_c2", "100 ms CPU, concurrency 2"),
            ("cpu10_c2_prefetch", f"10 ms CPU, c2, Orbit `--prefetch {PREFETCH}`"),
            ("cpu100_c2_prefetch", f"100 ms CPU, c2, Orbit `--prefetch {PREFETCH}`"),
            ("producers", f"{PRODUCERS} producers, one per call"),
            ("chord", "chord: 10 ms CPU members and a callback"),
            ("chord_prefetch", f"chord, Orbit `--prefetch {PREFETCH}`"))
BROKER = {"orbit": "orbit-server", "celery": "redis-server", "dramatiq": "redis-server"}


def cpu_table(result: dict[str, Any]) -> str:
    """CPU per task by process, medians over the rounds: where each system's time goes."""
    systems = result["systems"]
    runs = [r["figures"] for r in result["rounds"]]
    lines = ["| workload | system | producer | broker | worker main process | worker pool "
             "processes | all |", "|" + " --- |" * 7]
    for key, name in CPU_ROWS:
        for system in systems:
            per_round = [run[system].get("cpu_ms", {}).get(key) for run in runs]
            known = [r for r in per_round if r is not None]
            if not known:
                continue
            cells = [statistics.median(r[part] for r in known) for part in PARTS]
            lines.append(f"| {name} | {LABELS[system]} ({BROKER[system]}) | "
                         + " | ".join(f"{c:.2f}" for c in cells)
                         + f" | **{sum(cells):.2f}** |")
    return "\n".join(lines)


COST_COLUMNS = (("transactions", "store transactions"), ("commits", "commits"),
                ("syncs", "WAL fsyncs"), ("http_requests", "HTTP requests"),
                ("producer_frames", "producer channel messages"),
                ("worker_frames", "worker frames"), ("child_messages", "child messages"))


def cost_table(result: dict[str, Any]) -> str:
    """What one Orbit task costs, per row (medians over the rounds)."""
    runs = [r["figures"]["orbit"] for r in result["rounds"] if "orbit" in r["figures"]]
    lines = ["| workload | " + " | ".join(name for _k, name in COST_COLUMNS) + " |",
             "|" + " --- |" * (len(COST_COLUMNS) + 1)]
    for key, name in CPU_ROWS:
        known = [run["per_task"][key] for run in runs if key in run.get("per_task", {})]
        if known:
            cells = [statistics.median(k[c] for k in known) for c, _n in COST_COLUMNS]
            lines.append(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    return "\n".join(lines)


def has_costs(result: dict[str, Any]) -> bool:
    return any("per_task" in r["figures"].get("orbit", {}) for r in result["rounds"])


def host_text(result: dict[str, Any]) -> str:
    h, rounds = result["host"], result["rounds"]
    per_round = "; ".join(
        f"round {i + 1} ({' → '.join(LABELS[s] for s in r['order'])}): load "
        f"{r['host']['load']:.2f}, loop {r['host']['loop_ms']:.0f} ms, fsync "
        f"{r['host']['fsync_us']:.0f} µs" for i, r in enumerate(rounds))
    v = result["versions"]
    peer_versions = ", ".join(f"{name} {v[name]}" for name in
                              ("celery", "kombu", "billiard", "dramatiq", "redis") if name in v)
    return "\n".join([
        f"Host: {h['cpu_model']}, {h['cores']} cores usable (nproc {h['nproc']}), "
        f"{platform.system()} {platform.release()}; {h['started']} to {h['ended']}; load "
        f"average {h['load_before']} before and {h['load_after']} after (1, 5, 15 min; "
        "other work shares the CPUs). Before each round a plain Python loop of a million "
        "additions (best of 5) and a 4 KiB write + fsync (p50) were timed, as in the "
        f"server and supervisor sections: {per_round}.",
        "",
        f"Versions: Orbit {v.get('orbit', '?')} (commit {v.get('orbit_commit', '?')}), "
        f"Python {v['python']}, redis-server {v.get('redis_server', 'not used')}; "
        f"{peer_versions or 'no peers'}.",
    ])


METHOD = """\
How each row is measured. The producer is this script, one Python process using each
system's own client: `OrbitClient.submit` / `submit_batch` and `get_task(wait_ms=...)`
per result (with its defaults: over the producer channel, a WebSocket whose `ended`
pushes answer the waits; a long poll per result over HTTP); Celery `task.delay()` and
`AsyncResult.get()`; Dramatiq `actor.send()` and `message.get_result(block=True)`.
Throughput rows count from the first submit to the last result received, every result
awaited in submission order;
the CPU rows submit one per call too (the work is the same function in every system,
`scripts/peers/peers_work.py`, burning the stated CPU time of its thread). The ceiling is
min(cores, concurrency) / task time. The many-producers row spawns its processes, lets each
open its connections with one task, then releases them together. The time-limit row:
the spinner writes its PID and start instant (CLOCK_MONOTONIC, one clock for all
processes) to a file; the script opens a pidfd on that PID and polls it until the kernel
reports the process exited, measured from the handler's start + 1 s (Orbit counts its
`attempt_timeout_ms` from the start its grant records, which precedes the handler's
first line, so it can end before that instant); "never" means still running 5 s after.
Memory: psutil's RSS and PSS summed over the worker command's process and all its
descendants (Orbit: supervisor, template and children; Celery: main and pool processes;
Dramatiq: main and worker processes), after the warm-up and the first no-op row.

What differs besides speed, and may bias the figures:
- **Durability.** redis-server runs without persistence (`--save "" --appendonly no`):
  queued tasks and results live only in its memory, and a crash loses them. `orbit-server`
  runs on SQLite with its defaults (WAL, `--durability full`): every submit (with the
  grant it makes) and finish is on disk, its fsync done by the WAL sync thread, before it
  is answered, and tasks, attempts and audit rows are kept. That is Orbit's guarantee and
  it is paid in every row here.
- **Start confirmation.** Orbit runs a handler only under a lease the server granted and
  committed: with grants (`orbit-supervise`'s default) the reservation arrives started,
  its grant made in the submit's or the dispatch's transaction, with no round trip of its
  own; Celery (`acks_late`, prefetch multiplier 1) acknowledges after the run; Dramatiq
  prefetches two messages per worker thread (its default). Both hold the next message
  while a handler runs; Orbit does so only when asked, as in its `--prefetch 2` rows (one
  started attempt waiting per child).
- **Time limits.** Celery's hard limit sends SIGTERM, waits 0.1 s, then SIGKILLs the pool
  process; Dramatiq's raises an exception in the worker thread (checked once a second) and
  never ends the process; Orbit SIGKILLs the child's process group.
- **Clients.** Each system is driven through its own Python client, whose CPU counts (on
  the same cores): Orbit's speaks its producer channel (a WebSocket; HTTP/1.1 for
  batches), the peers' speak Redis's protocol; the CPU table shows each producer's
  share.
- **Chords.** Orbit's chord is one workflow submitted in one transaction: the callback is a
  durable WAITING task the server releases in the transaction that ends the last member,
  and it receives the members' results in order. Celery's chord counts its members in
  Redis and passes the callback their results; Dramatiq's group completion callback counts
  them through its rate limiter in Redis and receives none (the benchmark's callback reads
  nothing back). Neither peer's count survives a Redis without persistence.
- **State.** One `orbit-server` and its database serve the whole run (a fresh queue per
  session, the earlier rounds' tasks kept), while Redis is emptied between sessions.
- **One machine.** The producer, `orbit-server`, redis-server and the workers share the
  same cores; Redis's CPU serves the peers as the server's serves Orbit, and each stays
  up, idle, during the other systems' sessions."""


def render(result: dict[str, Any]) -> str:
    c = result["counts"]
    rounds = len(result["rounds"])
    has_cpu = any("cpu_ms" in figures for r in result["rounds"]
                  for figures in r["figures"].values())  # runs before it was counted lack it
    return "\n".join([
        BEGIN,
        "## Orbit beside Celery and Dramatiq (`scripts/bench_peers.py`)",
        "",
        *(["**Smoke run (`--quick`): counts shrunk, these are not measurements.**", ""]
          if result["quick"] else []),
        f"Orbit (`orbit-supervise`, `orbit-server` on a temporary SQLite file), Celery (Redis "
        f"broker and result backend, prefork, `acks_late`, `worker_prefetch_multiplier=1`) "
        f"and Dramatiq (Redis broker, Results middleware, one thread per process), at the "
        f"same concurrency (2 unless a row says otherwise), same tasks, interleaved in one "
        f"run: {rounds} round{'s' if rounds != 1 else ''}, the systems' order rotating each "
        f"round. Each system's figure is the median of its rounds (the range in brackets); "
        f"the last column is Orbit over the best peer, taken within each round, and its "
        f"median: above 1 Orbit is faster on throughput rows, below 1 it is better on "
        f"latency and memory. {c['kills']} time-limit sample(s) per system and round.",
        "",
        host_text(result),
        "",
        table(result),
        "",
        *(["Where the time goes: CPU per task (ms, user + system) by process, medians of "
           "the rounds, in the same run. The producer is this script (with the producer "
           "processes of the many-producers row); the broker is `orbit-server` for Orbit and "
           "`redis-server` for the peers; the worker's main process is `orbit-supervise`, "
           "Celery's main process or Dramatiq's; its pool processes are Orbit's template "
           "and children, Celery's prefork pool and Dramatiq's worker processes. With 2 "
           "cores, a throughput row's tasks/s is at most 2,000 / the all column.",
           "", cpu_table(result), ""] if has_cpu else []),
        *(["What one Orbit task costs, per row (medians of the rounds), from the "
           "counters of `orbit-server` and `orbit-supervise` before and after the row "
           "(docs/observability.md): store transactions (reads included), commits that "
           "wrote something, fsyncs of the WAL, HTTP requests (scrapes left out), producer "
           "channel messages and worker protocol frames (both directions), and messages "
           "over the children's sockets. Heartbeats and the metrics' own scrapes fall "
           "into the rows they happen in.", "", cost_table(result), ""]
          if has_costs(result) else []),
        METHOD,
        "",
        "Rerun: `.venv/bin/pip install -e '.[test,bench]'` (Celery and Dramatiq), a "
        "`redis-server` binary (`apt install redis-server` / `brew install redis`), then "
        "`.venv/bin/python scripts/bench_peers.py` (several minutes; `--quick` for a smoke "
        "run, `--only orbit,celery` to pick systems, `--no-write` to leave this file).",
        END,
    ])


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
            figures[system] = run_system(ctx, system, counts, f"r{n}")
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
                              "counts": asdict(counts)}
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
    """Print the section; put it in docs/benchmarks.md unless --no-write or a smoke run."""
    section = render(result)
    print(section)
    if result["quick"] and not args.no_write:
        print("(a --quick run: docs/benchmarks.md left as it was)", file=sys.stderr)
    elif not args.no_write:
        replace_section(ROOT / "docs" / "benchmarks.md", section, BEGIN, END)


if __name__ == "__main__":
    main()
