"""The machinery every fault scenario runs on (tests/support/fault_scenarios.py lists
them): a run's ``Stage`` (a fresh queue, its producer, worker credentials, the handler
journal, the supervisors it started), the ``Row`` a scenario fills (tasks, faults, the
violations of each promise, its own checks, latencies), and what a scenario is given (its
``Server``: process, admin env, proxy and frame tap).
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .invariants import CHECKS, Journal, TaskFacts, check
from .lanes import Lane
from .orbit_http import OrbitEnv, expect
from .proxy import TcpProxy
from .server import ServerProcess
from .supervisor_helpers import SupervisorProcess, alive, spec, wait_task
from .waiting import UNIT, wait_until
from .ws_tap import OpTap

SETTLE_S = 60.0  # every task of a run ends within this (units)
FAST_BACKOFF = {"initial_ms": 20, "max_ms": 100, "multiplier": 2.0, "jitter": 0.0}


@dataclass
class Ctx:
    workdir: Path
    db_url: str | None  # None: a SQLite file in workdir
    store: str  # "sqlite" or "mariadb", for the row
    runs: int = 1


@dataclass
class Row:
    scenario: str
    title: str
    store: str
    runs: int = 0
    tasks: int = 0
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    checks: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CHECKS})
    scenario_checks: list[str] = field(default_factory=list)  # what was checked, by name
    scenario_bad: list[str] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=dict)  # label -> ms
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    unavailable: str | None = None  # why the scenario could not run (never a pass)

    @property
    def ok(self) -> bool:
        return (self.unavailable is None and self.runs > 0 and sum(self.faults.values()) > 0
                and not self.scenario_bad and not any(self.checks.values()))

    def explain(self) -> str:
        lines = [f"{self.scenario} [{self.store}]: runs {self.runs}, tasks {self.tasks}, "
                 f"faults {dict(self.faults)}"]
        if self.unavailable:
            lines.append(f"unavailable: {self.unavailable}")
        if not sum(self.faults.values()):
            lines.append("no fault was injected")
        lines += [f"{name}: {v}" for name, found in self.checks.items() for v in found[:20]]
        lines += [f"scenario: {v}" for v in self.scenario_bad[:20]]
        return "\n".join(lines + self.notes)

    def merge_facts(self, facts: list[TaskFacts], journal: Journal) -> None:
        """Count a run's tasks and add the violations of each promise."""
        self.tasks += len(facts)
        for name, found in check(facts, journal).items():
            self.checks[name] += found

    def measure(self, label: str, values: list[float] | list[int]) -> None:
        self.latencies.setdefault(label, []).extend(float(v) for v in values)

    def expect(self, name: str, violations: list[str]) -> None:
        """A scenario check: ``name`` says what holds; ``violations`` are its failures."""
        if name not in self.scenario_checks:
            self.scenario_checks.append(name)
        self.scenario_bad += violations


# ------------------------------------------------------------------------- one run


# Options every scenario's supervisors get besides their own (scripts/fault_report.py
# --supervisor-args), e.g. "--prefetch 1"; unset in the test suite.
SUPERVISOR_ARGS_ENV = "ORBIT_FAULT_SUPERVISOR_ARGS"


class Stage:
    """One run: a fresh queue, a producer, worker credentials, a handler journal, and every
    supervisor started for it (SIGKILLed by PID when the run ends)."""

    def __init__(self, env: OrbitEnv, workdir: Path, row: Row) -> None:
        self.env, self.row = env, row
        self.dir = workdir
        self.dir.mkdir(parents=True)
        (self.dir / "stamps").mkdir()
        self.journal_path = self.dir / "journal.txt"
        lane = Lane.open(env)
        self.queue_id, self.producer = lane.queue, lane.producer
        self.creds = lane.credentials_file(self.dir / "worker.json", "worker")
        self.supervisors: list[SupervisorProcess] = []
        self.task_ids: list[str] = []
        self.idempotency: dict[str, str] = {}
        self.expected: dict[str, tuple[str, ...]] = {}

    def supervisor(self, workers: int, url: str | None = None,
                   extra: tuple[str, ...] = ()) -> SupervisorProcess:
        common = shlex.split(os.environ.get(SUPERVISOR_ARGS_ENV, ""))
        sup = SupervisorProcess(self.dir, self.creds, self.queue_id, workers=workers, url=url,
                                extra=("--log-format", "json", *common, *extra))
        self.supervisors.append(sup.start())
        return sup

    def submit(self, count: int, seconds: float, idempotency: str = "IDEMPOTENT",
               **policy: Any) -> list[str]:
        """``count`` tasks of the journal handler, one request each."""
        ids = []
        for _ in range(count):
            body = expect(self.producer.post(f"/v1/queues/{self.queue_id}/tasks",
                                             json=self._spec(seconds, idempotency, policy)),
                          201)
            ids.append(self._made(body, idempotency))
        return ids

    def submit_batch(self, idempotencies: list[str], seconds: float, **policy: Any
                     ) -> list[str]:
        """One task per entry of ``idempotencies`` in one request (one transaction: a
        worker's dispatch then finds them together)."""
        specs = [self._spec(seconds, idempotency, policy, i)
                 for i, idempotency in enumerate(idempotencies)]
        body = expect(self.producer.post(f"/v1/queues/{self.queue_id}/tasks/batch",
                                         json={"tasks": specs}), 201)
        return [self._made(made, idempotency)
                for made, idempotency in zip(body["tasks"], idempotencies, strict=True)]

    def _spec(self, seconds: float, idempotency: str, policy: dict[str, Any], later: int = 0
              ) -> dict[str, Any]:
        policy = {"max_attempts": 5, "backoff": FAST_BACKOFF, **policy}
        extra = policy.pop("payload_extra", {})
        payload = {"journal": str(self.journal_path), "stamps": str(self.dir / "stamps"),
                   "seconds": seconds, "n": len(self.task_ids) + later, **extra}
        return dict(spec("journal", payload, idempotency=idempotency, **policy))

    def _made(self, view: dict[str, Any], idempotency: str) -> str:
        self.task_ids.append(view["id"])
        self.idempotency[view["id"]] = idempotency
        return str(view["id"])

    def journal(self) -> Journal:
        return Journal.load(self.journal_path, self.dir / "stamps")

    def wait_runs(self, count: int, timeout_s: float = 20.0) -> Journal:
        """Wait until ``count`` executions have begun; the journal then."""
        def begun() -> Journal | None:
            journal = self.journal()
            return journal if len(journal.runs) >= count else None

        found = wait_until(begun, timeout=timeout_s, what=f"{count} handler executions begun")
        assert found is not None
        return found

    def history(self, task_id: str) -> dict[str, Any]:
        return dict(expect(self.producer.get(f"/v1/tasks/{task_id}/attempts"), 200))

    def audit(self, task_id: str) -> list[dict[str, Any]]:
        return list(expect(self.producer.get(f"/v1/tasks/{task_id}/audit"), 200)["events"])

    def facts(self) -> list[TaskFacts]:
        """Wait until every task ended (bounded); each task's facts."""
        out = []
        deadline = time.monotonic() + SETTLE_S * UNIT
        for task_id in self.task_ids:
            view: dict[str, Any] | None = None
            # One look even when the bound is spent: a task stuck before this one must not
            # make this one read as unended.
            left = max(deadline - time.monotonic(), 0.1 * UNIT)
            try:
                view = wait_task(self.producer, task_id, timeout_s=left / UNIT)
            except AssertionError:
                view = None
            history = self.history(task_id)
            if view is None:  # said in the row, with what the server knows of it
                last = expect(self.producer.get(f"/v1/tasks/{task_id}"), 200)
                self.row.notes.append(
                    f"task {task_id} still {last['state']}; attempts "
                    f"{[(a['state'], a['code'], a['kill_reason']) for a in history['attempts']]}"
                    f"; evidence {[e['code'] for e in history['evidence']]}")
            out.append(TaskFacts(task_id, self.idempotency[task_id],
                                 None if view is None else view["state"], history["attempts"],
                                 None if view is None else view["result"],
                                 None if view is None else view["epoch"], history["evidence"],
                                 self.expected.get(task_id),
                                 None if view is None else view["attempts"]))
        return out

    def close(self) -> list[int]:
        """SIGKILL every supervisor of the run; the pids of their trees (to check later)."""
        seen: list[int] = []
        for sup in self.supervisors:
            sup.descendants()
            sup.stop()
            seen += sorted(sup.descendants_seen)
        return seen


@dataclass
class Stream:
    """What ``streaming`` submitted: when each submit was answered (wall-clock seconds);
    hold ``lock`` to submit beside it (the stage's lists take one writer at a time)."""

    answered: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def streaming(stage: Stage, every_s: float, lease_ttl_ms: int) -> Iterator[Stream]:
    """Submit a short task (50 ms; IDEMPOTENT and NON_IDEMPOTENT in turn) every
    ``every_s`` on a thread of its own while the block runs."""
    stream, stop = Stream(), threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            with stream.lock:
                stage.submit(1, 0.05, "NON_IDEMPOTENT" if n % 2 else "IDEMPOTENT",
                             lease_ttl_ms=lease_ttl_ms)
            stream.answered.append(time.time())
            n += 1
            stop.wait(every_s)

    producer = threading.Thread(target=produce, name="fault-stream")
    producer.start()
    try:
        yield stream
    finally:
        stop.set()
        producer.join()


def log_records(sup: SupervisorProcess) -> list[dict[str, Any]]:
    """The supervisor's JSON log (``--log-format json``), one record per line."""
    out = []
    for line in sup.log().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "ts" in record:
            out.append(record)
    return out


def kill_log(sup: SupervisorProcess) -> dict[str, float]:
    """attempt id -> the wall-clock ms at which the supervisor logged killing its child."""
    out: dict[str, float] = {}
    for record in log_records(sup):
        if record.get("event") == "child_killed":
            out.setdefault(str(record["attempt_id"]), float(record["ts"]) * 1000)
    return out


def kill_decisions(facts: list[TaskFacts], sups: list[SupervisorProcess]) -> list[float]:
    """Each logged kill's instant minus the server's lease end of its attempt (ms)."""
    logged: dict[str, float] = {}
    for sup in sups:
        logged |= kill_log(sup)
    return [logged[a["id"]] - a["lease_expires_at_ms"] for t in facts for a in t.attempts
            if a["id"] in logged and a.get("lease_expires_at_ms") is not None]


def wait_gone(pids: list[int], timeout_s: float = 5.0) -> bool:
    """Whether every one of ``pids`` is gone within ``timeout_s`` (units)."""
    deadline = time.monotonic() + timeout_s * UNIT
    while alive(pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


# ------------------------------------------------------------------------- scenarios


Body = Callable[[Stage, "Server"], None]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    body: Body
    sigkill: bool = False  # runs on MariaDB in CI too
    tap: Callable[[], OpTap] | None = None  # each run's frame tap (in a proxy)
    proxy: bool = False  # each run gets a proxy (without a tap)
    stores: tuple[str, ...] = ("sqlite", "mariadb")  # the stores it can run on
    session_ttl_ms: int | None = None  # a server of its own with this session TTL


@dataclass
class Server:
    """The scenario's server, its admin env, and (for the tapped scenarios) the proxy."""

    process: ServerProcess
    env: OrbitEnv
    proxy: TcpProxy | None = None
    tap: OpTap | None = None

