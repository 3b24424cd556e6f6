"""Real ``orbit-supervise`` processes and small HTTP helpers for the supervisor's tests.

Every process a test starts is stopped by its PID (``SupervisorProcess.stop`` in a fixture
teardown). Waits go through support.waiting (bounded, in its time unit).
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
from support.waiting import UNIT, wait_until

from orbit_host.credentials import Credentials, write_credentials
from orbit_wire.model import TaskState

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
    """Poll (long-poll) until the task is terminal / NEEDS_REVIEW or ``until`` holds
    (``timeout_s`` in units of support.waiting)."""
    last: dict[str, Any] = {}

    def there() -> dict[str, Any] | None:
        nonlocal last
        wait_ms = 0 if until is not None else 1000
        last = expect(producer.get(f"/v1/tasks/{task_id}", params={"wait_ms": wait_ms}), 200)
        done = until(last) if until is not None else TaskState(last["state"]).settled
        return last if done else None

    return wait_until(there, timeout=timeout_s, interval=0.05,
                      what=lambda: f"task {task_id} to get there (last view {last})")


def attempts(producer: httpx.Client, task_id: str) -> dict[str, Any]:
    return dict(expect(producer.get(f"/v1/tasks/{task_id}/attempts"), 200))


def wait_pids(path: Path, what: str, count: int = 3, timeout_s: float = 20.0) -> list[int]:
    """Wait until a handler wrote ``count`` pids to ``path``; returns them."""
    return wait_until(lambda: len(pids := read_pids(path)) == count and pids,
                      timeout=timeout_s, what=what)


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
        def logged() -> bool:
            if text in self.log():
                return True
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"the supervisor exited before logging {text!r}:\n"
                                     f"{self.log()[-4000:]}")
            return False

        wait_until(logged, timeout=timeout_s, interval=0.05,
                   what=lambda: f"{text!r} in the supervisor log:\n{self.log()[-4000:]}")

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
        return self.proc.wait(timeout=timeout_s * UNIT)

    def stop(self) -> None:
        """Teardown: SIGKILL by PID if it still runs, then reap."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10 * UNIT)


@dataclass
class SupEnv:
    orbit: OrbitEnv
    queue_id: str
    producer: httpx.Client
    credentials_file: Path
    workdir: Path
    start: Callable[..., SupervisorProcess]
