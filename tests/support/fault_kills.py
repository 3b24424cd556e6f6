"""The kill scenarios (SIGKILL of orbit-supervise, orbit-server, a child, a grandchild),
a lease the server cuts short, and a credential revoked under a connected worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from .fault_stage import Scenario, Server, Stage, kill_decisions, wait_gone
from .invariants import killed_after_lease_end
from .orbit_http import expect
from .supervisor_helpers import alive, read_pids, worker_credentials_file
from .waiting import wait_until


def kill_supervisor(stage: Stage, server: Server) -> None:
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
    gone = wait_gone(tree)
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


def kill_server(stage: Stage, server: Server) -> None:
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


def kill_child(stage: Stage, server: Server) -> None:
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


def kill_grandchild(stage: Stage, server: Server) -> None:
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


def lease_shortened(stage: Stage, server: Server) -> None:
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


def revoked_credential(stage: Stage, server: Server) -> None:
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
    gone = wait_gone(tree)
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


def scenarios() -> list[Scenario]:
    return [
        Scenario("kill_supervisor", "SIGKILL of orbit-supervise under load", kill_supervisor,
                 sigkill=True),
        Scenario("kill_server", "SIGKILL of orbit-server under load, restart", kill_server,
                 sigkill=True),
        Scenario("kill_child", "SIGKILL of a child", kill_child, sigkill=True),
        Scenario("kill_grandchild", "SIGKILL of a grandchild", kill_grandchild, sigkill=True),
        Scenario("lease_shortened", "the server shortens a lease", lease_shortened),
        Scenario("revoked_credential", "a credential revoked while its worker is connected",
                 revoked_credential),
    ]
