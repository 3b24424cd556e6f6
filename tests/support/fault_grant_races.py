"""What races a grant (docs/protocol.md, "Grants"): a cancel, a drain and a revocation that
land while a task is granted with its submit (the submit's own transaction starts the
attempt for the idle worker, and the reserve frame follows its commit)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from typing import Any

from .fault_connection import unreported
from .fault_grants import once_as_first
from .fault_stage import Scenario, Server, Stage, log_records, streaming, wait_gone
from .invariants import TaskFacts
from .orbit_http import expect
from .supervisor_helpers import SupervisorProcess, alive, worker_credentials_file
from .waiting import wait_until

ROUNDS = 6


def _instance(sup: SupervisorProcess) -> str:
    """The instance ID the supervisor says hello with (its log's first connection)."""
    found = wait_until(lambda: next((str(r["instance_id"]) for r in log_records(sup)
                                     if r.get("event") == "connected"), None),
                       timeout=20, what="the supervisor's connection")
    assert found is not None
    return found


def _idle(stage: Stage) -> None:
    """Wait until no attempt of the run is open (its worker has its slot back), then a
    moment for the slot's credit to reach the server."""
    def closed() -> bool:
        return all(a["state"] not in ("RESERVED", "RUNNING") for task_id in stage.task_ids
                   for a in stage.history(task_id)["attempts"])

    wait_until(closed, timeout=20, what="every attempt of the run closed")
    time.sleep(0.2)


def cancel_races_grant(stage: Stage, server: Server) -> None:
    """Six rounds: a task is submitted to the idle supervisor, granted in the submit's own
    transaction, and cancelled 0-20 ms after the submit answered, racing the reserve frame
    and the handler's start. Each task ends CANCELLED, and every granted attempt learned of
    the cancel: it ended by the cancel's kill (kill reason TASK_CANCELLED; its grace is 0),
    reported at once, never left to run until a renewal failed (LEASE_LOST) or its lease
    ran out (LEASE_EXPIRED)."""
    rng = random.Random(stage.queue_id)
    stage.supervisor(1)
    cancelled_at: dict[str, float] = {}
    for n in range(ROUNDS):
        _idle(stage)
        (task_id,) = stage.submit(1, 5.0, "NON_IDEMPOTENT" if n % 2 else "IDEMPOTENT",
                                  lease_ttl_ms=6000, cancel_grace_ms=0)
        time.sleep(rng.uniform(0.0, 0.02))
        expect(stage.producer.post(f"/v1/tasks/{task_id}/cancel"), 200)
        cancelled_at[task_id] = time.time() * 1000
        stage.expected[task_id] = ("CANCELLED",)
        stage.row.faults["cancel 0-20 ms after a granted submit"] += 1
    _idle(stage)
    facts = stage.facts()
    journal = stage.journal()
    granted = [(t, a) for t in facts for a in t.attempts if a["started_at_ms"] is not None]
    stage.row.expect("every granted attempt ended by the cancel's kill, reported",
                     [f"attempt {a['id']}: {a['state']} {a['outcome']}/{a['code']}, kill "
                      f"reason {a['kill_reason']}, decision {a['decision']}"
                      for _t, a in granted
                      if a["kill_reason"] != "TASK_CANCELLED" or a["decision"] != "CANCELLED"
                      or a["code"] == "LEASE_EXPIRED"])
    ran = {r.attempt_id: r for r in journal.runs}
    stage.row.notes.append(
        f"{len(granted)} of {ROUNDS} cancels found the task granted; "
        f"{sum(a['id'] in ran for _t, a in granted)} of those handlers had begun")
    stage.row.measure("cancel answered → handler's last instruction",
                      [journal.last_ms[a["id"]] - cancelled_at[t.task_id] for t, a in granted
                       if a["id"] in journal.last_ms])
    stage.row.merge_facts(facts, journal)


def drain_races_grant(stage: Stage, server: Server) -> None:
    """Three rounds, each with a new supervisor idle with credit: a task is submitted
    (granted in the submit's transaction) and SIGTERM follows 0-20 ms later, the drain
    racing the grant's reserve frame. The server answers a drain only after a claim in
    flight, so every grant arrives before the drain's answer and runs (one after it would be
    declined DRAINING, unspent). Each supervisor exits 0, every attempt it ran reported;
    every task runs once, as attempt 1."""
    rng = random.Random(stage.queue_id)
    ran_by_drained: set[str] = set()
    for n in range(3):
        sup = stage.supervisor(1)
        _instance(sup)
        time.sleep(0.2)  # its credit reaches the server
        stage.submit(1, 0.3, "NON_IDEMPOTENT" if n % 2 else "IDEMPOTENT", lease_ttl_ms=3000)
        time.sleep(rng.uniform(0.0, 0.02))
        sup.send(signal.SIGTERM)
        try:
            code: int | None = sup.wait(30)
        except subprocess.TimeoutExpired:
            code = None
        stage.row.faults["SIGTERM 0-20 ms after a granted submit"] += 1
        stage.row.expect("each drained supervisor exits 0", [] if code == 0 else [
            f"orbit-supervise exited {code} after SIGTERM:\n{sup.log()[-2000:]}"])
        ran_by_drained = {r.attempt_id for r in stage.journal().runs}
    stage.supervisor(1)  # runs what a drain left to run
    for task_id in stage.task_ids:
        stage.expected[task_id] = ("SUCCEEDED",)
    facts = stage.facts()
    journal = stage.journal()
    stage.row.expect("exit 0 after the drain: every attempt it ran was reported",
                     unreported(facts, ran_by_drained))
    stage.row.expect("nothing was given back but unspent",
                     [f"attempt {a['id']}: {a['state']} {a['outcome']}/{a['code']}"
                      for t in facts for a in t.attempts if a["outcome"] not in
                      (None, "SUCCEEDED")])
    stage.row.expect("each task ran once, as attempt 1 of 1 spent",
                     once_as_first(facts, journal))
    stage.row.merge_facts(facts, journal)


def revocation_races_grant(stage: Stage, server: Server) -> None:
    """Short tasks are submitted every 100 ms to an idle supervisor, each granted in its
    submit's own transaction, and the worker's credential is revoked meanwhile: the server
    closes the session, the supervisor ends (fatal UNAUTHENTICATED) and its children die.
    No grant goes to the revoked worker after the revocation (the server's recorded instant
    of it), nothing it reports afterwards is taken, and a worker with a fresh credential
    runs what is left: every IDEMPOTENT task succeeds."""
    sup = stage.supervisor(2)
    revoked = _instance(sup)
    time.sleep(0.2)
    with streaming(stage, 0.1, lease_ttl_ms=1000) as stream:
        time.sleep(0.5)
        tree = sup.descendants()
        credential_id = json.loads(stage.creds.read_text())["credential_id"]
        expect(server.env.admin_http.delete(f"/v1/credentials/{credential_id}"), 200)
        with stream.lock:  # and at once a few more, while the revoked session closes
            stage.submit(3, 0.05, "NON_IDEMPOTENT", lease_ttl_ms=1000)
        (committed_ms,) = [c["revoked_at_ms"] for c in expect(
            server.env.admin_http.get("/v1/credentials"), 200)["credentials"]
            if c["credential_id"] == credential_id]
        stage.row.faults["credential revoked while grants stream to its worker"] += 1
        try:
            code: int | None = sup.wait(timeout_s=10)
        except subprocess.TimeoutExpired:
            code = None
        time.sleep(0.3)  # grants keep racing the closed session
    gone = wait_gone(tree)
    stage.row.expect("orbit-supervise ended on the revocation and its children died",
                     [] if code not in (None, 0) and gone else
                     [f"exit code {code}; alive: {alive(tree)}"])
    stage.creds = worker_credentials_file(server.env, stage.queue_id, stage.dir / "worker2.json")
    stage.supervisor(2)
    facts = stage.facts()
    stage.row.expect("no grant went to the revoked worker after the revocation committed",
                     [_late(t, a, committed_ms) for t in facts for a in t.attempts
                      if a["instance_id"] == revoked and a["started_at_ms"] is not None
                      and a["started_at_ms"] > committed_ms])
    stage.row.expect("no result of the revoked worker was taken after the revocation",
                     [f"attempt {a['id']} ended {a['outcome']} at {a['finished_at_ms']}, after "
                      f"{committed_ms}" for t in facts for a in t.attempts
                      if a["instance_id"] == revoked and a["outcome"] == "SUCCEEDED"
                      and a["finished_at_ms"] > committed_ms])
    stage.row.notes.append(f"{len(stage.task_ids)} tasks submitted around the revocation")
    stage.row.merge_facts(facts, stage.journal())


def _late(t: TaskFacts, a: dict[str, Any], committed_ms: int) -> str:
    return (f"attempt {a['id']} of {t.idempotency} task {t.task_id} started at "
            f"{a['started_at_ms']}, {a['started_at_ms'] - committed_ms} ms after the "
            f"revocation committed; it ended {a['outcome']}/{a['code']}, the task {t.state}")


def scenarios() -> list[Scenario]:
    return [
        Scenario("cancel_races_grant", "a cancel racing a grant", cancel_races_grant),
        Scenario("drain_races_grant", "a drain racing a grant", drain_races_grant),
        Scenario("revocation_races_grant", "a revocation racing grants",
                 revocation_races_grant),
    ]
