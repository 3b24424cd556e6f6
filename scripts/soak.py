"""Chaos soak: real server, real supervisors, real faults; then check Orbit's promises.

    .venv/bin/python scripts/soak.py [--seconds 120] [--seed N] [--db URL] [--json PATH]

One `orbit-server` (a SQLite file unless --db), a TCP proxy in front of it for the workers,
and several `orbit-supervise` processes running `append` tasks (each execution appends its
attempt id to a file, then sleeps a random while). A producer submits batches all along,
each task with an operation key, resending a batch whose answer it did not get. Meanwhile,
at random (seeded): every worker connection is cut, the network is blackholed for a few
seconds (local leases run out and children are killed), a supervisor is SIGKILLed or
drained and a new one started, the server is SIGKILLed and restarted on the same database.

The supervisors ask for leases granted with the dispatch (docs/protocol.md, "Grants"). When
the chaos stops, every task must end, and:
- an operation key names one task, however often its batch was resent;
- no attempt ran twice, and every attempt that ran had a confirmed start;
- an idempotent task ends SUCCEEDED, by an attempt that ran;
- a non-idempotent task ran at most once; it ends SUCCEEDED by that run, or NEEDS_REVIEW;
- nothing any supervisor started is still alive;
- every attempt spent is accounted for (tests/support/invariants.py, attempt_accounting):

      attempts started - handler executions
          = grants expired unconfirmed - those of them whose handler ran
            + attempts a claim started that never ran

  "attempts started" sums the tasks' views; "handler executions" are the journal's lines;
  the grants whose lease ran out unconfirmed (attempts.grant_connection still set) and the
  attempts each ``claim`` op started (its receipt) are read from the database after the
  run. A grant the worker received and ran but never confirmed (killed, or cut off, before
  its first renewal) is in both the journal and the expired unconfirmed grants; a claim
  whose answer never reached a running handler (its supervisor killed first) is spent but
  is no grant. The identity holds exactly when no attempt is started ahead of a free child:
  with ``--prefetch`` in --supervisor-args a prefetched attempt may be renewed and then
  killed before it ran, so the soak reports the figures and does not check them;
- orbit_grants_expired_unconfirmed_total of the server as it runs at the end equals the
  grants that expired unconfirmed since its last start (a SIGKILL takes the counts with it).

Exits 0 when all hold, 1 with the violations otherwise; --json also writes the run's facts
(seed, tasks, end states, faults by kind, resent batches, executions, the accounting of
attempts, violations) to PATH.
Every process it starts is stopped by its PID; the run and every wait are bounded in time.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integration" / "supervisor")]

from supervisor_support import (  # noqa: E402  (the test tree's real-process helpers)
    SupervisorProcess,
    alive,
    spec,
    wait_task,
    worker_credentials_file,
)
from support.invariants import (  # noqa: E402
    AttemptLedger,
    Journal,
    Run,
    TaskFacts,
    attempt_accounting,
    check,
    flatten,
)
from support.metrics import scrape, value  # noqa: E402
from support.orbit_http import OrbitEnv, http_client  # noqa: E402
from support.proxy import TcpProxy  # noqa: E402
from support.server import ServerProcess  # noqa: E402

from orbit_server.store.db import create_engine_for  # noqa: E402

SUPERVISORS = 3
WORKERS = 3
SETTLE_S = 120.0  # after the chaos: every task must end within this
TICK_S = 0.05
BACKLOG = 150  # the producer waits while this many tasks are PENDING (capacity ~45 tasks/s)


@dataclass
class Soak:
    rng: random.Random
    env: OrbitEnv
    proxy: TcpProxy
    queue_id: str
    producer: httpx.Client
    creds: Path
    workdir: Path
    runs: Path
    supervisor_args: tuple[str, ...] = ()  # options every orbit-supervise gets
    supervisors: list[SupervisorProcess] = field(default_factory=list)
    retired: list[SupervisorProcess] = field(default_factory=list)
    key_to_id: dict[str, str] = field(default_factory=dict)
    key_idempotency: dict[str, str] = field(default_factory=dict)
    unsent: list[list[dict[str, Any]]] = field(default_factory=list)
    key_conflicts: list[str] = field(default_factory=list)
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    resent: int = 0  # batches resent after an unanswered submit
    next_key: int = 0
    server_started_ms: int = 0  # wall clock before the server's last start (after a kill)

    # ------------------------------------------------------------ processes

    def start_supervisor(self) -> None:
        sup = SupervisorProcess(self.workdir, self.creds, self.queue_id, workers=WORKERS,
                                url=self.proxy.url, extra=self.supervisor_args)
        self.supervisors.append(sup.start())

    def retire(self, sup: SupervisorProcess) -> None:
        sup.descendants()  # remember its tree, to check later that none of it lives
        self.supervisors.remove(sup)
        self.retired.append(sup)

    # ------------------------------------------------------------ producer

    def new_batch(self) -> list[dict[str, Any]]:
        batch = []
        for _ in range(self.rng.randint(1, 12)):
            key = f"soak-{self.next_key}"
            self.next_key += 1
            idem = "IDEMPOTENT" if self.rng.random() < 0.8 else "NON_IDEMPOTENT"
            self.key_idempotency[key] = idem
            batch.append(spec("append", {"path": str(self.runs),
                                         "seconds": round(self.rng.uniform(0, 0.4), 3)},
                              idempotency=idem, operation_key=key, max_attempts=50,
                              lease_ttl_ms=2000,
                              backoff={"initial_ms": 20, "max_ms": 200, "multiplier": 2.0,
                                       "jitter": 0.2}))
        return batch

    def submit(self, batch: list[dict[str, Any]]) -> bool:
        try:
            r = self.producer.post(f"/v1/queues/{self.queue_id}/tasks/batch",
                                   json={"tasks": batch}, timeout=5.0)
        except httpx.HTTPError:
            return False
        if r.status_code != 201:
            return False
        for sent, made in zip(batch, r.json()["tasks"], strict=True):
            key = sent["operation_key"]
            known = self.key_to_id.setdefault(key, made["id"])
            if known != made["id"]:
                self.key_conflicts.append(f"{key}: {known} and {made['id']}")
        return True

    def backlog(self) -> int | None:
        try:
            r = self.producer.get(f"/v1/queues/{self.queue_id}/stats", timeout=5.0)
        except httpx.HTTPError:
            return None
        return int(r.json()["counts"]["PENDING"]) if r.status_code == 200 else None

    def produce(self) -> None:
        pending = self.backlog()
        if pending is None or pending >= BACKLOG:
            return
        if self.unsent and self.submit(self.unsent[0]):  # a resend keeps its keys
            self.unsent.pop(0)
            self.resent += 1
        batch = self.new_batch()
        if not self.submit(batch):
            self.unsent.append(batch)

    # ------------------------------------------------------------ chaos

    def fault(self) -> None:
        kind = self.rng.choice(["cut", "cut", "blackhole", "kill_supervisor",
                                "drain_supervisor", "kill_server"])
        self.faults[kind] += 1
        if kind == "cut":
            self.proxy.cut()
        elif kind == "blackhole":
            self.proxy.blackhole(True)
            time.sleep(self.rng.uniform(1.0, 3.5))  # past the 2 s leases now and then
            self.proxy.blackhole(False)
            self.proxy.cut()  # the sockets that swallowed bytes are dead to both ends
        elif kind in ("kill_supervisor", "drain_supervisor"):
            sup = self.rng.choice(self.supervisors)
            self.retire(sup)
            if kind == "kill_supervisor":
                sup.stop()  # SIGKILL by PID
            else:
                sup.send(signal.SIGTERM)
            self.start_supervisor()
        else:
            self.env.server.kill()
            self.server_started_ms = time.time_ns() // 1_000_000
            self.env.server.start()

    # ------------------------------------------------------------ checks

    def settle(self) -> dict[str, dict[str, Any]]:
        """Wait until every task has ended; their final views by id."""
        for _ in range(200):  # bounded: resends of batches the chaos left unanswered
            if not self.unsent:
                break
            if self.submit(self.unsent[0]):
                self.unsent.pop(0)
            else:
                time.sleep(0.1)
        views: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + SETTLE_S
        for task_id in self.key_to_id.values():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                views[task_id] = wait_task(self.producer, task_id, timeout_s=left)
            except AssertionError:  # not ended in time: reported as such by the check
                continue
        return views

    def facts(self, views: dict[str, dict[str, Any]]) -> list[TaskFacts]:
        out = []
        for key, task_id in self.key_to_id.items():
            view = views.get(task_id)
            history = (self.producer.get(f"/v1/tasks/{task_id}/attempts").json()["attempts"]
                       if view is not None else [])
            out.append(TaskFacts(task_id, self.key_idempotency[key],
                                 None if view is None else view["state"], history,
                                 None if view is None else view["result"],
                                 None if view is None else view["epoch"],
                                 spent=None if view is None else view["attempts"]))
        return out

    def expired_unconfirmed_counted(self) -> float:
        """The running server's orbit_grants_expired_unconfirmed_total for the queue."""
        return float(value(scrape(f"{self.env.server.url}/metrics")[1],
                           "orbit_grants_expired_unconfirmed_total", queue=self.queue_id))


def grant_records(db_url: str, queue_id: str) -> tuple[dict[str, int], frozenset[str]]:
    """From the database after the run: each grant whose lease ran out unconfirmed (attempt
    id -> when it was closed), and the attempts the ``claim`` ops started (their receipts)."""
    engine = create_engine_for(db_url)
    try:
        with engine.connect() as conn:
            expired = {str(row[0]): int(row[1]) for row in conn.execute(text(
                "SELECT id, finished_at_ms FROM attempts WHERE queue_id = :queue AND "
                "grant_connection IS NOT NULL AND code = 'LEASE_EXPIRED'"),
                {"queue": queue_id})}
            claimed = frozenset(str(attempt_id) for (answer,) in conn.execute(text(
                "SELECT answer FROM receipts WHERE op = 'claim'"))
                for attempt_id in orjson.loads(answer).get("claimed", ()))
    finally:
        engine.dispose()
    return expired, claimed


def violations(tasks: list[TaskFacts], runs: list[str], key_conflicts: list[str],
               unsent: int, expired_unconfirmed: frozenset[str] | None = None,
               claimed: frozenset[str] = frozenset()) -> list[str]:
    """The broken promises (pure). ``runs`` holds one "task_id attempt_id" line per handler
    execution; the checks are those of the fault report (tests/support/invariants.py), and
    with ``expired_unconfirmed`` (None: not checked) the accounting of attempts."""
    bad = [f"operation key answered two tasks: {c}" for c in key_conflicts]
    if unsent:
        bad.append(f"{unsent} batches were never accepted")
    journal = Journal([Run(task_id, attempt_id) for task_id, attempt_id, *_rest in
                       (line.split() for line in runs if line)])
    bad += flatten(check(tasks, journal))
    if expired_unconfirmed is not None:
        bad += attempt_accounting(AttemptLedger(
            sum(t.spent or 0 for t in tasks), [r.attempt_id for r in journal.runs],
            expired_unconfirmed, claimed))
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="chaos duration")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--db", default=None, help="database URL (default: a SQLite file)")
    parser.add_argument("--fault-every", type=float, default=1.5,
                        help="mean seconds between faults")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (logs, database) after a violation")
    parser.add_argument("--json", type=Path, default=None,
                        help="write the run's facts and violations to this file as JSON")
    parser.add_argument("--supervisor-args", default="",
                        help='options for every orbit-supervise, e.g. "--prefetch 1"')
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"soak: seed {seed}, {args.seconds:.0f} s of chaos", flush=True)
    with tempfile.TemporaryDirectory(prefix="orbit-soak-") as tmp:
        workdir = Path(tmp)
        server = ServerProcess(workdir / "server", db_url=args.db, session_ttl_ms=3000)
        server.start()
        proxy = TcpProxy(server.port).start()
        admin = server.bootstrap_admin()
        env = OrbitEnv(server, admin, http_client(server.url, admin.bearer))
        soak: Soak | None = None
        bad: list[str] = []
        facts: dict[str, Any] = {"seed": seed, "seconds": args.seconds}
        try:
            queue_id = env.queue("soak")
            soak = Soak(rng, env, proxy, queue_id, env.producer(queue_id),
                        worker_credentials_file(env, queue_id, workdir / "worker.json",
                                                url=proxy.url),
                        workdir, workdir / "runs.txt",
                        tuple(shlex.split(args.supervisor_args)))
            soak.runs.touch()
            for _ in range(SUPERVISORS):
                soak.start_supervisor()
            end = time.monotonic() + args.seconds
            next_fault = time.monotonic() + rng.expovariate(1 / args.fault_every)
            while time.monotonic() < end:
                soak.produce()
                if time.monotonic() >= next_fault:
                    soak.fault()
                    next_fault = time.monotonic() + rng.expovariate(1 / args.fault_every)
                time.sleep(TICK_S)
            views = soak.settle()
            runs = soak.runs.read_text().splitlines()
            expired, claimed = grant_records(server.db_url, queue_id)
            counted = soak.expired_unconfirmed_counted()
            since_start = sum(at >= soak.server_started_ms for at in expired.values())
            tasks = soak.facts(views)
            prefetch = "--prefetch" in args.supervisor_args
            bad = violations(tasks, runs, soak.key_conflicts, len(soak.unsent),
                             None if prefetch else frozenset(expired), claimed)
            if counted != since_start:
                bad.append(f"orbit_grants_expired_unconfirmed_total says {counted:g}; "
                           f"{since_start} grants expired unconfirmed since the server's "
                           "last start")
            states = collections.Counter(v["state"] for v in views.values())
            ran = {line.split()[1] for line in runs if line}
            facts |= {"tasks": len(soak.key_to_id), "states": dict(states),
                      "faults": dict(soak.faults), "resent_batches": soak.resent,
                      "executions": len(runs),
                      "attempts": {"started": sum(t.spent or 0 for t in tasks),
                                   "expired_unconfirmed": len(expired),
                                   "expired_unconfirmed_run": len(set(expired) & ran),
                                   "claimed_never_ran": len(claimed - ran),
                                   "checked": not prefetch}}
            print(f"soak: {len(soak.key_to_id)} tasks {dict(states)}; faults "
                  f"{dict(soak.faults)}; resent batches {soak.resent}; executions {len(runs)}; "
                  f"attempts {facts['attempts']}", flush=True)
        finally:
            if soak is not None:
                for sup in list(soak.supervisors):
                    soak.retire(sup)
                for sup in soak.retired:
                    sup.stop()
            proxy.stop()
            env.close()
            env.admin_http.close()
            server.stop()
        if soak is not None:
            seen = sorted(pid for sup in soak.retired for pid in sup.descendants_seen)
            deadline = time.monotonic() + 5.0
            while alive(seen) and time.monotonic() < deadline:
                time.sleep(0.05)
            bad += [f"process {pid} outlived its supervisor" for pid in alive(seen)]
        if args.json is not None:
            args.json.write_text(json.dumps({**facts, "violations": bad}, indent=1))
        for line in bad[:50]:
            print(f"soak: VIOLATION {line}", flush=True)
        if bad:
            kept = ""
            if args.keep:
                kept = tempfile.mkdtemp(prefix="orbit-soak-kept-")
                shutil.copytree(workdir, kept, dirs_exist_ok=True)
                kept = f"; logs and database copied to {kept}"
            print(f"soak: {len(bad)} violations (seed {seed}){kept}", flush=True)
            return 1
        print(f"soak: every check held (seed {seed})", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
