"""Real ``orbit-supervise`` processes and small HTTP helpers for the supervisor's tests.

Every process a test starts is stopped by its PID (``SupervisorProcess.stop`` in a fixture
teardown). Waits are bounded loops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from support.orbit_http import OrbitEnv, expect

from orbit_host.credentials import Credentials, write_credentials

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures_handlers"
ORBIT_SUPERVISE = ROOT / ".venv" / "bin" / "orbit-supervise"
HANDLERS = "supervisor_handlers:HANDLERS"


def worker_credentials_file(env: OrbitEnv, queue_id: str, path: Path,
                            url: str | None = None) -> Path:
    made = env.credential("worker", [queue_id])
    write_credentials(path, Credentials(url or env.server.url, made["credential_id"],
                                        made["secret"], "worker", (queue_id,)))
    return path


def spec(handler: str, payload: Any, **policy: Any) -> dict[str, Any]:
    return {"handler": f"sup.{handler}", "handler_version": "v1", "payload_version": "v1",
            "payload": payload, **policy}


def submit(producer: httpx.Client, queue_id: str, handler: str, payload: Any,
           **policy: Any) -> str:
    body = expect(producer.post(f"/v1/queues/{queue_id}/tasks",
                                json=spec(handler, payload, **policy)), 201)
    return str(body["id"])


def wait_task(producer: httpx.Client, task_id: str, timeout_s: float = 20.0,
              until: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """Poll (long-poll) until the task is terminal / NEEDS_REVIEW or ``until`` holds."""
    deadline = time.monotonic() + timeout_s
    task: dict[str, Any] = {}
    while time.monotonic() < deadline:
        wait_ms = 0 if until is not None else 1000
        task = expect(producer.get(f"/v1/tasks/{task_id}", params={"wait_ms": wait_ms}), 200)
        if until is not None:
            if until(task):
                return task
            time.sleep(0.05)
        elif task["state"] in ("SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED"):
            return task
    raise AssertionError(f"task {task_id} did not get there in {timeout_s} s: {task}")


def attempts(producer: httpx.Client, task_id: str) -> dict[str, Any]:
    return dict(expect(producer.get(f"/v1/tasks/{task_id}/attempts"), 200))


def wait_for(check: Callable[[], Any], timeout_s: float, what: str,
             interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def read_pids(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split()]


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


class SupervisorProcess:
    """One ``orbit-supervise`` process with its log in ``workdir``."""

    def __init__(self, workdir: Path, credentials_file: Path, queue_id: str, *,
                 workers: int = 2, handlers: str = HANDLERS, extra: tuple[str, ...] = (),
                 url: str | None = None) -> None:
        self.workdir = workdir
        self.log_path = workdir / f"supervise-{time.monotonic_ns()}.log"
        self.cmd = [str(ORBIT_SUPERVISE), "--credentials-file", str(credentials_file),
                    "--queue", queue_id, "--workers", str(workers), "--log-level", "debug",
                    "--reconnect-min-delay", "0.05", "--reconnect-max-delay", "0.5",
                    *(["--url", url] if url else []), *extra, handlers]
        self.proc: subprocess.Popen[bytes] | None = None
        self.descendants_seen: set[int] = set()

    def start(self) -> SupervisorProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=FIXTURES)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_log(self, text: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in the supervisor log:\n{self.log()[-4000:]}")

    def descendants(self) -> list[int]:
        try:
            pids = [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        self.descendants_seen.update(pids)
        return pids

    def send(self, sig: signal.Signals) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout_s: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        """Teardown: SIGKILL by PID if it still runs, then reap."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@dataclass
class SupEnv:
    orbit: OrbitEnv
    queue_id: str
    producer: httpx.Client
    credentials_file: Path
    workdir: Path
    start: Callable[..., SupervisorProcess]
