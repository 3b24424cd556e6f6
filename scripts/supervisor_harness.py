"""What bench_supervisor.py and bench_kills.py share: the benchmark's settings and targets, a
queue with its credentials on a real ``orbit-server``, submits and state counts over HTTP,
and a real ``orbit-supervise`` process with its CPU time."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
HANDLER_DIR = ROOT / "tests" / "fixtures_handlers"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from server_harness import Server, stop_process  # noqa: E402

from orbit_host.credentials import Credentials  # noqa: E402

BEGIN = "<!-- supervisor-bench:begin -->"
END = "<!-- supervisor-bench:end -->"
SPEC = "supervisor_bench:handlers"
WORKERS = 2
OVERSUBSCRIBED = (4, 16)  # --workers of the further 10 ms runs
CPU_TASK_MS = 10.0
NOOP_TARGET = 1000.0
CPU_TARGET_SHARE = 0.90
KILL_TARGET_MS = 50.0
REPLACE_TARGET_MS = 20.0
RSS_TARGET_MIB = 60.0
RUN_TIMEOUT_S = 300.0
POLL_S = 0.02


def task_spec(handler: str, i: int, **policy: Any) -> dict[str, Any]:
    return {"handler": handler, "handler_version": "1", "payload_version": "1",
            "payload": {"i": i}, "idempotency": "IDEMPOTENT", **policy}


class Env:
    """The server, an admin client and one queue with worker + producer credentials."""

    def __init__(self, server: Server, admin: str, workdir: Path) -> None:
        self.server = server
        self.admin = admin
        self.workdir = workdir
        self._made = 0

    def new_queue(self, kind: str) -> tuple[str, httpx.Client, Path, Credentials]:
        self._made += 1
        name = f"{kind}-{self._made}"  # every round gets its own queue
        with httpx.Client(base_url=self.server.url, timeout=60,
                          headers={"Authorization": f"Bearer {self.admin}"}) as a:
            queue = a.post("/v1/queues", json={"name": name}).json()["id"]
            prod = a.post("/v1/credentials", json={"role": "producer", "queues": [queue]}).json()
            work = a.post("/v1/credentials", json={"role": "worker", "queues": [queue]}).json()
        creds = Credentials(self.server.url, work["credential_id"], work["secret"], "worker",
                            (queue,))
        path = self.workdir / f"worker-{name}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(creds.to_json())
        producer = httpx.Client(
            base_url=self.server.url, timeout=60,
            headers={"Authorization": f"Bearer {prod['credential_id']}.{prod['secret']}"})
        return queue, producer, path, creds


def submit_all(producer: httpx.Client, queue: str, specs: list[dict[str, Any]]) -> list[str]:
    ids: list[str] = []
    for start in range(0, len(specs), 1000):
        body = orjson.dumps({"tasks": specs[start:start + 1000]})
        r = producer.post(f"/v1/queues/{queue}/tasks/batch", content=body,
                          headers={"content-type": "application/json"})
        if r.status_code != 201:
            raise SystemExit(f"batch submit failed: {r.status_code} {r.text[:300]}")
        ids += [t["id"] for t in r.json()["tasks"]]
    return ids


def wait_counts(producer: httpx.Client, queue: str, state: str, total: int,
                sample: Callable[[], None] | None = None, last: str | None = None) -> float:
    """Poll the queue's stats until ``total`` tasks are in ``state``; return that instant.

    With ``last`` (the task submitted last, dispatched last), first wait on its long poll,
    so the benchmark's own polling takes no server CPU while most of the work runs."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    if last is not None:
        while time.monotonic() < deadline:
            if sample is not None:
                sample()
            task = producer.get(f"/v1/tasks/{last}", params={"wait_ms": 1000}).json()
            if task["state"] not in ("PENDING", "RUNNING"):
                break
    while time.monotonic() < deadline:
        counts = producer.get(f"/v1/queues/{queue}/stats").json()["counts"]
        if counts.get(state, 0) >= total:
            return time.perf_counter()
        if sample is not None:
            sample()
        time.sleep(POLL_S)
    raise SystemExit(f"timed out waiting for {total} tasks in {state}: {counts}")


class SuperviseProcess:
    """One `orbit-supervise --workers N` process (2 unless stated); stopped by PID."""

    def __init__(self, creds_path: Path, queue: str, log: Path, workers: int = WORKERS,
                 extra: tuple[str, ...] = ()) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(HANDLER_DIR), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(ROOT / ".venv" / "bin" / "orbit-supervise"), "--credentials-file",
                 str(creds_path), "--queue", queue, "--workers", str(workers),
                 "--log-level", os.environ.get("BENCH_SUPERVISE_LOG", "warning"), *extra,
                 *shlex.split(os.environ.get("BENCH_SUPERVISE_ARGS", "")), SPEC],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        self.ps = psutil.Process(self.proc.pid)
        self.peak_rss = 0

    def sample_rss(self) -> None:
        with contextlib.suppress(psutil.Error):
            self.peak_rss = max(self.peak_rss, self.ps.memory_info().rss)

    def stop(self) -> int | None:
        return stop_process(self.proc)


def cpu_seconds(supervise: psutil.Process, server: psutil.Process | None) -> dict[str, float]:
    """CPU time (user + system) so far of the supervisor parent, its children, the server."""
    def total(proc: psutil.Process) -> float:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            return float(t.user + t.system)
        return 0.0

    kids = supervise.children(recursive=True)
    return {"parent": total(supervise), "children": sum(total(k) for k in kids),
            "server": total(server) if server is not None else 0.0}


