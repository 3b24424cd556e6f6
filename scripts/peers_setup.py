"""bench_peers.py's settings (systems, counts, bounds), its tasks, and the processes it
starts (each in a session of its own, stopped by PID): Redis for the peers."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = ROOT / "scripts" / "peers"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(PEERS_DIR))  # the peers' task modules, for this script's producers

from server_harness import free_port  # noqa: E402

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


def ceiling(task_ms: float, concurrency: int) -> float:
    """Tasks/s the cores allow for tasks of ``task_ms`` CPU, capped by the concurrency."""
    return min(cores(), concurrency) * 1000.0 / task_ms


def cores() -> int:
    return len(os.sched_getaffinity(0))


# The parts of a run whose CPU time is counted per task (the "where the time goes" table).
PARTS = ("producer", "broker", "worker_main", "worker_pool")


def median_or_never(values: Sequence[float | None]) -> float | None:
    """The median, a None ("never") counting as later than any figure; None if the
    median is one of them."""
    if not values:
        return None
    mid = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(mid) else mid
