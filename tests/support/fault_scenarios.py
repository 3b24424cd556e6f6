"""The fault regression scenarios: one implementation for the tests and the published report.

Each scenario starts a real ``orbit-server`` (a SQLite file, or the MariaDB database it is
given), real ``orbit-supervise`` processes and their children, injects its fault ``runs``
times (each run on a fresh queue), and returns a ``Row``: the tasks, the faults injected,
the violations of each promise of tests/support/invariants.py, the scenario's own checks
(the lost op resent with its msg_id and applied once, the exit code, nothing left alive...)
and the latencies it measured from outside.

    row = run_scenario("kill_supervisor", Ctx(workdir, db_url=None, store="sqlite", runs=1))
    assert row.ok, row.explain()

tests/e2e/test_fault_scenarios.py runs every scenario once (the SIGKILL ones on MariaDB too);
scripts/fault_report.py runs them ``--runs`` times on each store and writes
docs/reports/fault-regression.md. Every process is stopped by its PID; every wait is bounded.
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .invariants import CHECKS, Journal, TaskFacts, check, killed_after_lease_end
from .lanes import Lane
from .orbit_http import OrbitEnv, expect, http_client
from .proxy import TcpProxy
from .server import ServerProcess
from .supervisor_helpers import (
    SupervisorProcess,
    alive,
    read_pids,
    spec,
    wait_task,
    worker_credentials_file,
)
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
        policy.setdefault("max_attempts", 5)
        policy.setdefault("backoff", FAST_BACKOFF)
        extra = policy.pop("payload_extra", {})
        ids = []
        for _ in range(count):
            n = len(self.task_ids)
            payload = {"journal": str(self.journal_path), "stamps": str(self.dir / "stamps"),
                       "seconds": seconds, "n": n, **extra}
            body = expect(self.producer.post(f"/v1/queues/{self.queue_id}/tasks",
                                             json=spec("journal", payload,
                                                       idempotency=idempotency, **policy)), 201)
            self.task_ids.append(body["id"])
            self.idempotency[body["id"]] = idempotency
            ids.append(body["id"])
        return ids

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
                                 self.expected.get(task_id)))
        return out

    def close(self) -> list[int]:
        """SIGKILL every supervisor of the run; the pids of their trees (to check later)."""
        seen: list[int] = []
        for sup in self.supervisors:
            sup.descendants()
            sup.stop()
            seen += sorted(sup.descendants_seen)
        return seen


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


# ------------------------------------------------------------------------- scenarios


Body = Callable[[Stage, "Server"], None]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    body: Body
    sigkill: bool = False  # runs on MariaDB in CI too
    tapped: tuple[str, str] | None = None  # (op kind, "request" | "answer") for OpTap
    server_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Server:
    """The scenario's server, its admin env, and (for the tapped scenarios) the proxy."""

    process: ServerProcess
    env: OrbitEnv
    proxy: TcpProxy | None = None
    tap: OpTap | None = None


def _lost_op(kind: str, lose: str) -> Body:
    """Cut the connection during one op of ``kind`` (the request lost) or after it (its
    answer lost); the work goes on after the reconnect, and the op applied at most once."""

    def body(stage: Stage, server: Server) -> None:
        assert server.proxy is not None and server.tap is not None
        tap = server.tap
        drain = kind == "drain"
        # A start exists only without grants (with them a reservation arrives started).
        sup = stage.supervisor(2, url=server.proxy.url,
                               extra=("--no-grants",) if kind == "start" else ())
        seconds = {"renew": 1.2, "drain": 1.0}.get(kind, 0.3)
        stage.submit(1, seconds, "IDEMPOTENT", lease_ttl_ms=900)
        stage.submit(1, seconds, "NON_IDEMPOTENT", lease_ttl_ms=900)
        if drain:
            stage.wait_runs(2)
            sup.send(signal.SIGTERM)
            code = sup.wait(30)
            stage.row.expect("the drained supervisor exits 0", [] if code == 0 else [
                f"orbit-supervise exited {code} after SIGTERM:\n{sup.log()[-2000:]}"])
            ran_before_exit = {r.attempt_id for r in stage.journal().runs}
            stage.supervisor(2)  # runs what the drain may have left to retry
        wait_until(lambda: tap.lost, timeout=20, what=f"a {kind} to lose")
        stage.row.faults[f"{kind} {'cut' if lose == 'request' else 'answer lost'}"] += 1
        facts = stage.facts()
        if drain:
            stage.row.expect("exit 0 after the drain: every attempt it ran was reported",
                             _unreported(facts, ran_before_exit))
        back = _reconnected_after(sup, tap.lost_at[0])
        stage.row.expect("the supervisor saw the connection end and reconnected",
                         [] if back is not None else ["no reconnection logged after the cut"])
        if back is not None:
            stage.row.measure("cut -> reconnected", [back])
        if not drain:
            stage.row.expect("the lost op was resent with its original msg_id",
                             _resent(tap, lose))
        stage.row.expect("every answer to one msg_id is the same (applied once)",
                         _same_answers(tap))
        stage.row.expect("the server applied each start, renew and finish once",
                         _applied_once(stage, facts, tap))
        stage.row.merge_facts(facts, stage.journal())

    body.__doc__ = _LOST_DOC[(kind, lose)]
    return body


_LOST_DOC = {
    ("start", "request"): "(A supervisor without grants.) The first request holding a "
    "start never reaches the server and "
    "the connection is cut. The server releases the reservation with the session; the "
    "supervisor resends the start with its msg_id after the resume, is refused, and the task "
    "is dispatched again: its handler runs once, after a confirmed start.",
    ("start", "answer"): "(A supervisor without grants.) The server applies a start, its "
    "answer is lost and the connection "
    "cut. After the resume the supervisor resends the start with its original msg_id; the "
    "receipt answers it, and the handler runs once.",
    ("renew", "request"): "The first renew never reaches the server and the connection is "
    "cut while the handlers run; after the reconnect the resume and the resent renew (same "
    "msg_id) keep the leases, or the handler is killed at its local expiry.",
    ("renew", "answer"): "The server applies a renew, its answer is lost and the connection "
    "cut; the renew resent with its msg_id is answered from the receipt, and the attempt's "
    "renewal count equals the renew msg_ids the server answered ok (none counted twice).",
    ("finish", "request"): "The first finish never reaches the server and the connection is "
    "cut; after the resume the supervisor resends it with its msg_id and the result is "
    "accepted once.",
    ("finish", "answer"): "The server applies a finish (and the claim riding on it), its "
    "answer is lost and the connection cut; the finish and claim resent with their msg_ids "
    "get the stored answers: one outcome, the same claimed attempts.",
    ("drain", "request"): "SIGTERM while two handlers run; the drain request never reaches "
    "the server and the connection is cut. The drain is per connection (the next one gets no "
    "credit): the supervisor finishes its handlers, confirms every result and exits 0.",
    ("drain", "answer"): "SIGTERM while two handlers run; the server applies the drain, its "
    "answer is lost and the connection cut. The supervisor reconnects, confirms every result "
    "and exits 0; a second supervisor would run anything left to retry.",
}


def _reconnected_after(sup: SupervisorProcess, cut_at: float) -> float | None:
    """ms from ``cut_at`` (wall-clock s) to the supervisor's next "connected to" log line."""
    for record in log_records(sup):
        if str(record.get("message", "")).startswith("connected to") and record["ts"] >= cut_at:
            return (float(record["ts"]) - cut_at) * 1000
    return None


def _unreported(facts: list[TaskFacts], attempts: set[str]) -> list[str]:
    """The attempts among ``attempts`` the server closed by expiry without any report."""
    bad = []
    for t in facts:
        reported = {e["attempt_id"] for e in t.evidence}
        for att in t.attempts:
            if (att["id"] in attempts and att["code"] == "LEASE_EXPIRED"
                    and att["id"] not in reported):
                bad.append(f"attempt {att['id']} expired without a report")
    return bad


def _resent(tap: OpTap, lose: str) -> list[str]:
    bad = []
    for op in tap.lost_ops():
        times = len(tap.received.get(str(op["msg_id"]), []))
        need = 1 if lose == "request" else 2  # the lost request never reached the server
        if times < need:
            bad.append(f"{op['op']} {op['msg_id']} reached the server {times} times")
    return bad


def _answer_facts(answer: dict[str, Any]) -> str:
    """What a replayed answer must repeat. The protocol lets a replay differ only in time
    and credit: ``lease_ms`` is what remains, and a resent claim's ``credited`` is 0 (credit
    belongs to the connection that applied it); its claimed attempts are the same."""
    kept = {k: v for k, v in answer.items() if k not in ("lease_ms", "credited")}
    if isinstance(kept.get("claimed"), list):
        kept["claimed"] = [c.get("attempt_id") for c in kept["claimed"] if isinstance(c, dict)]
    return json.dumps(kept, sort_keys=True)


def _same_answers(tap: OpTap) -> list[str]:
    bad = []
    for msg_id, answers in tap.answers.items():
        kept = {_answer_facts(a) for a in answers}
        if len(kept) > 1:
            bad.append(f"{msg_id} was answered differently: {sorted(kept)}")
    return bad


def _applied_once(stage: Stage, facts: list[TaskFacts], tap: OpTap) -> list[str]:
    bad = []
    renews_ok: dict[str, set[str]] = collections.defaultdict(set)
    for msg_id, op in tap.ops_of("renew").items():
        if any(a.get("ok") for a in tap.answers.get(msg_id, [])):
            renews_ok[str(op["attempt_id"])].add(msg_id)
    for t in facts:
        events = collections.Counter((e["kind"], e["attempt_id"]) for e in stage.audit(t.task_id))
        for (kind, attempt), n in events.items():
            if kind in ("attempt_started", "attempt_finished") and n > 1:
                bad.append(f"{kind} {n} times for {attempt}")
        for att in t.attempts:
            if att["renewals"] != len(renews_ok.get(att["id"], ())):
                bad.append(f"attempt {att['id']} counts {att['renewals']} renewals, the server "
                           f"answered {len(renews_ok.get(att['id'], ()))} renew msg_ids ok")
    return bad


def _outage(stage: Stage, server: Server) -> None:
    """Blackhole the network past the lease TTL while handlers run: the supervisor kills
    them at its local expiry; after the reconnect the retries run once each."""
    assert server.proxy is not None
    sup = stage.supervisor(2, url=server.proxy.url)
    stage.submit(2, 2.5, "IDEMPOTENT", lease_ttl_ms=800, payload_extra={"retry_seconds": 0.1})
    stage.wait_runs(2)
    server.proxy.blackhole(True)
    time.sleep(2.0 * UNIT)  # the scenario: an outage of 2 s, past the 0.8 s leases
    server.proxy.blackhole(False)
    server.proxy.cut()  # the sockets that swallowed bytes are dead to both ends
    stage.row.faults["outage 2 s > lease TTL 0.8 s"] += 1
    facts = stage.facts()
    journal = stage.journal()
    killed = killed_after_lease_end(facts, journal)
    stage.row.expect("every running handler was killed during the outage",
                     [] if len(killed) >= 2 else [f"{len(killed)} killed executions, not 2"])
    decisions = kill_decisions(facts, [sup])
    margin = 50  # REPORT_MARGIN: the local expiry is at least this before the server's
    stage.row.expect("every kill was decided before the server's lease end",
                     [f"a kill logged {d:+.0f} ms from the lease end" for d in decisions
                      if d > 0])
    # The local expiry is at most lease end - margin; a last stamp later than that (plus
    # the 5 ms stamp interval) means a late kill: measured and said, not hidden.
    late = [d for d in killed if d > -margin + 5]
    if late:
        stage.row.notes.append(f"{len(late)} handlers ran within the {margin} ms margin "
                               f"before the lease end (late kill): {sorted(late)} ms")
    stage.row.measure("kill logged - lease end", decisions)
    stage.row.measure("last instruction - lease end", killed)
    stage.row.merge_facts(facts, journal)


def _kill_supervisor(stage: Stage, server: Server) -> None:
    """SIGKILL orbit-supervise with every slot busy and a backlog: its whole tree dies at
    once; a new supervisor retries the IDEMPOTENT tasks, the NON_IDEMPOTENT ones that ran go
    to NEEDS_REVIEW, and none is lost."""
    sup = stage.supervisor(4)
    extra = {"retry_seconds": 0.1, "grandchild": True, "pid_file": str(stage.dir / "pids")}
    for _ in range(2):  # dispatch is oldest first: the 4 slots get 2 of each
        for idempotency in ("IDEMPOTENT", "NON_IDEMPOTENT", "IDEMPOTENT", "NON_IDEMPOTENT"):
            stage.submit(1, 2.0, idempotency, lease_ttl_ms=1000, payload_extra=extra)
    stage.wait_runs(4)
    wait_until(lambda: len(read_pids(stage.dir / "pids")) >= 8, timeout=10,
               what="4 children and their grandchildren")
    tree = sup.descendants() + read_pids(stage.dir / "pids")
    t0 = time.monotonic()
    sup.send(signal.SIGKILL)
    gone = _wait_gone(tree)
    stage.row.faults["SIGKILL orbit-supervise (4 busy, 4 queued)"] += 1
    stage.row.expect("every child and grandchild died with orbit-supervise",
                     [] if gone else [f"alive after 5 s: {alive(tree)}"])
    if gone:
        stage.row.measure("SIGKILL → whole tree gone", [(time.monotonic() - t0) * 1000])
    ran_first = {r.attempt_id for r in stage.journal().runs}
    stage.supervisor(4)
    facts = stage.facts()
    # What the kill left uncertain, from the server's record: an attempt of the killed
    # supervisor without a reported outcome. Such a NON_IDEMPOTENT task must go to review
    # (never run again); every other task must succeed.
    killed = {a["instance_id"] for t in facts for a in t.attempts if a["id"] in ran_first}
    retried = reviewed = 0
    for t in facts:
        uncertain = any(a["instance_id"] in killed and a["outcome"] == "UNKNOWN"
                        for a in t.attempts)
        review = uncertain and t.idempotency == "NON_IDEMPOTENT"
        t.expect = ("NEEDS_REVIEW",) if review else ("SUCCEEDED",)
        retried += uncertain and t.idempotency == "IDEMPOTENT"
        reviewed += review
    stage.row.expect("the kill left IDEMPOTENT tasks to retry and NON_IDEMPOTENT ones to "
                     "review", [] if retried and reviewed else
                     [f"{retried} idempotent retried, {reviewed} non-idempotent reviewed"])
    stage.row.merge_facts(facts, stage.journal())


def _wait_gone(pids: list[int], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s * UNIT
    while alive(pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def _kill_server(stage: Stage, server: Server) -> None:
    """SIGKILL orbit-server with handlers running and tasks queued, restart it on the same
    database and port: the supervisor resumes, every result is confirmed, nothing reruns."""
    sup = stage.supervisor(3)
    stage.submit(3, 1.0, "IDEMPOTENT", lease_ttl_ms=10000)
    stage.submit(3, 1.0, "NON_IDEMPOTENT", lease_ttl_ms=10000)
    for task_id in stage.task_ids:
        stage.expected[task_id] = ("SUCCEEDED",)  # the leases outlast the restart
    stage.wait_runs(3)
    t0 = time.monotonic()
    server.process.restart(crash=True)
    stage.row.measure("server SIGKILL → healthy again", [(time.monotonic() - t0) * 1000])
    stage.row.faults["SIGKILL orbit-server + restart"] += 1
    facts = stage.facts()
    log = sup.log()
    stage.row.expect("the supervisor reconnected to the restarted server",
                     [] if log.count("connected to") >= 2 else ["one connection only"])
    stage.row.merge_facts(facts, stage.journal())


def _kill_child(stage: Stage, server: Server) -> None:
    """SIGKILL a running child from outside: HANDLER_CRASHED with signal 9; an IDEMPOTENT
    task is retried, a NON_IDEMPOTENT one goes to review; the slot serves the next task."""
    stage.supervisor(2)
    (idem,) = stage.submit(1, 20, "IDEMPOTENT", payload_extra={"retry_seconds": 0.1})
    (non,) = stage.submit(1, 20, "NON_IDEMPOTENT")
    stage.expected |= {idem: ("SUCCEEDED",), non: ("NEEDS_REVIEW",)}
    journal = stage.wait_runs(2)
    killed_at = {}
    for run in journal.runs:
        assert run.pid is not None
        os.kill(run.pid, signal.SIGKILL)
        killed_at[run.attempt_id] = time.time() * 1000
        stage.row.faults["SIGKILL child"] += 1
    facts = stage.facts()
    bad = []
    for t in facts:
        for att in t.attempts:
            if att["id"] in killed_at:
                if (att["code"], att["signal"]) != ("HANDLER_CRASHED", signal.SIGKILL):
                    bad.append(f"killed attempt {att['id']}: {att['code']} signal "
                               f"{att['signal']}")
                elif att["finished_at_ms"] is not None:
                    stage.row.measure("child SIGKILL → attempt closed",
                                      [att["finished_at_ms"] - killed_at[att["id"]]])
    stage.row.expect("each killed attempt is UNKNOWN/HANDLER_CRASHED with signal 9", bad)
    stage.row.merge_facts(facts, stage.journal())


def _kill_grandchild(stage: Stage, server: Server) -> None:
    """SIGKILL a handler's grandchild: only that process dies; the handler sees it and
    its result (the grandchild's status) is the one the server keeps."""
    stage.supervisor(1)
    pid_file = stage.dir / "pids"
    (task_id,) = stage.submit(1, 20, "NON_IDEMPOTENT",
                              payload_extra={"grandchild": True, "pid_file": str(pid_file)})
    stage.expected[task_id] = ("SUCCEEDED",)
    child, grandchild = wait_until(lambda: read_pids(pid_file)[1:] and read_pids(pid_file),
                                   timeout=20, what="the grandchild started")
    os.kill(grandchild, signal.SIGKILL)
    stage.row.faults["SIGKILL grandchild"] += 1
    facts = stage.facts()
    (t,) = facts
    stage.row.expect("the handler saw its grandchild killed (result grandchild_rc -9) and "
                     "its child lived on",
                     ([] if isinstance(t.result, dict) and t.result.get("grandchild_rc") == -9
                      else [f"result {t.result!r}"])
                     + ([] if alive([child]) else [f"the child {child} died too"]))
    stage.row.merge_facts(facts, stage.journal())


def _lease_shortened(stage: Stage, server: Server) -> None:
    """The server shortens the lease: with a 1 s lease TTL and a 1.4 s attempt timeout the
    later renewals grant less than the TTL (never past the timeout); the supervisor adopts
    the shorter lease at once and kills the child before the server's lease end."""
    sup = stage.supervisor(2)
    ids = stage.submit(2, 10, "NON_IDEMPOTENT", lease_ttl_ms=1000, attempt_timeout_ms=1400,
                       max_attempts=1)
    for task_id in ids:
        stage.expected[task_id] = ("NEEDS_REVIEW",)
    facts = stage.facts()
    stage.row.faults["lease cut short by the attempt timeout"] += len(ids)
    bad = []
    for t in facts:
        (att,) = t.attempts
        granted = att["lease_expires_at_ms"] - att["started_at_ms"]
        if att["renewals"] < 1 or granted > 1400 + 50:
            bad.append(f"attempt {att['id']}: {att['renewals']} renewals, lease end "
                       f"{granted} ms after its start")
        if att["kill_reason"] not in ("ATTEMPT_TIMEOUT", None):
            bad.append(f"attempt {att['id']}: kill reason {att['kill_reason']}")
    stage.row.expect("renewed, the lease never passed the attempt timeout, killed for it", bad)
    journal = stage.journal()
    stage.row.measure("kill logged - lease end", kill_decisions(facts, [sup]))
    stage.row.measure("last instruction - lease end", killed_after_lease_end(facts, journal))
    stage.row.merge_facts(facts, journal)


def _revoked_credential(stage: Stage, server: Server) -> None:
    """Revoke the worker's credential while its handlers run: the server closes the session
    (fatal UNAUTHENTICATED) within a heartbeat and fences its lease, the supervisor kills its
    children and exits, and nothing the revoked session sends afterwards is taken. The
    IDEMPOTENT task is retried by a worker with a fresh credential after the lease ends; the
    NON_IDEMPOTENT one goes to review."""
    sup = stage.supervisor(2)
    stage.submit(1, 4.0, "IDEMPOTENT", lease_ttl_ms=1000)
    stage.submit(1, 4.0, "NON_IDEMPOTENT", lease_ttl_ms=1000)
    stage.expected[stage.task_ids[0]] = ("SUCCEEDED",)
    stage.expected[stage.task_ids[1]] = ("NEEDS_REVIEW",)
    stage.wait_runs(2)
    tree = sup.descendants()
    credential_id = json.loads(stage.creds.read_text())["credential_id"]
    t0 = time.monotonic()
    revoked_at_ms = time.time_ns() // 1_000_000
    expect(server.env.admin_http.delete(f"/v1/credentials/{credential_id}"), 200)
    stage.row.faults["credential revoked with 2 handlers running"] += 1
    try:
        code: int | None = sup.wait(timeout_s=10)
    except subprocess.TimeoutExpired:
        code = None
    gone = _wait_gone(tree)
    stage.row.expect("orbit-supervise ended on the revocation and its children died",
                     [] if code not in (None, 0) and gone else
                     [f"exit code {code}; alive: {alive(tree)}"])
    stage.row.expect("the session was closed as unauthenticated",
                     [] if "UNAUTHENTICATED" in sup.log() else ["no UNAUTHENTICATED in the log"])
    if gone:
        stage.row.measure("revocation → worker tree gone", [(time.monotonic() - t0) * 1000])
    first = {r.attempt_id for r in stage.journal().runs}
    stage.creds = worker_credentials_file(server.env, stage.queue_id, stage.dir / "worker2.json")
    stage.supervisor(2)
    facts = stage.facts()
    taken = [f"attempt {a['id']} of the revoked worker ended {a['outcome']} at "
             f"{a['finished_at_ms']} after the revocation at {revoked_at_ms}"
             for t in facts for a in t.attempts
             if a["id"] in first and a["outcome"] == "SUCCEEDED"]
    stage.row.expect("no result of the revoked worker was taken", taken)
    stage.row.merge_facts(facts, stage.journal())


def _scenarios() -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    for kind in ("start", "renew", "finish", "drain"):
        out[f"cut_{kind}"] = Scenario(f"cut_{kind}", f"connection cut during {kind}",
                                      _lost_op(kind, "request"), tapped=(kind, "request"))
        out[f"lost_answer_{kind}"] = Scenario(
            f"lost_answer_{kind}", f"answer to {kind} lost",
            _lost_op(kind, "answer"), tapped=(kind, "answer"))
    out["outage_past_ttl"] = Scenario("outage_past_ttl", "outage longer than the lease TTL",
                                      _outage, tapped=None,
                                      server_args={"proxy": True})
    out["kill_supervisor"] = Scenario("kill_supervisor", "SIGKILL of orbit-supervise under "
                                      "load", _kill_supervisor, sigkill=True)
    out["kill_server"] = Scenario("kill_server", "SIGKILL of orbit-server under load, "
                                  "restart", _kill_server, sigkill=True)
    out["kill_child"] = Scenario("kill_child", "SIGKILL of a child", _kill_child, sigkill=True)
    out["kill_grandchild"] = Scenario("kill_grandchild", "SIGKILL of a grandchild",
                                      _kill_grandchild, sigkill=True)
    out["lease_shortened"] = Scenario("lease_shortened", "the server shortens a lease",
                                      _lease_shortened)
    out["revoked_credential"] = Scenario(
        "revoked_credential", "a credential revoked while its worker is connected",
        _revoked_credential)
    return out


SCENARIOS = _scenarios()
# Scenarios whose product behaviour has not landed: their rows say so (name -> title, why).
PENDING: dict[str, tuple[str, str]] = {}


@contextmanager
def scenario_server(ctx: Ctx) -> Iterator[Server]:
    """A server for scenarios (several may share one: each run has its own queue)."""
    process = ServerProcess(ctx.workdir / "server", db_url=ctx.db_url, session_ttl_ms=3000,
                            kill_grace_ms=200)
    process.start()
    try:
        admin = process.bootstrap_admin()
        env = OrbitEnv(process, admin, http_client(process.url, admin.bearer))
        try:
            yield Server(process, env)
        finally:
            env.close()
            env.admin_http.close()
    finally:
        process.stop()


@contextmanager
def _network(scenario: Scenario, server: Server) -> Iterator[None]:
    """The run's proxy (and frame tap) in front of the server, when the scenario uses one."""
    if scenario.tapped is None and not scenario.server_args.get("proxy"):
        yield
        return
    if scenario.tapped is not None:
        kind, lose = scenario.tapped
        server.tap = OpTap(kind, lose)  # type: ignore[arg-type]
    server.proxy = TcpProxy(server.process.port, tap=server.tap).start()
    try:
        yield
    finally:
        server.proxy.stop()
        server.proxy = server.tap = None


def run_scenario(name: str, ctx: Ctx, server: Server | None = None) -> Row:
    """Run one scenario ``ctx.runs`` times (on ``server``, else on one of its own); its row."""
    if server is None:
        with scenario_server(ctx) as own:
            return run_scenario(name, ctx, own)
    scenario = SCENARIOS[name]
    row = Row(name, scenario.title, ctx.store)
    t0 = time.monotonic()
    left_behind: list[int] = []
    for run in range(ctx.runs):
        stage = Stage(server.env, ctx.workdir / f"{name}-run{run}", row)
        try:
            with _network(scenario, server):
                scenario.body(stage, server)
            row.runs += 1
        finally:
            left_behind += stage.close()
    row.expect("nothing a supervisor started outlived it",
               [] if _wait_gone(left_behind) else [f"left alive: {alive(left_behind)}"])
    row.seconds = time.monotonic() - t0
    return row


def unavailable_row(name: str, title: str, store: str, reason: str) -> Row:
    """A scenario that cannot run yet: reported as such, never as a pass."""
    return Row(name, title, store, unavailable=reason)


__all__ = ["PENDING", "SCENARIOS", "Ctx", "Row", "run_scenario", "unavailable_row"]
