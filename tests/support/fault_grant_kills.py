"""Grants in flight when a process dies or the worker moves (docs/protocol.md, "Grants"):
SIGKILL of orbit-supervise, SIGKILL of orbit-server and its restart, and a hello of the same
instance on another replica of one MariaDB database while the first replica still holds the
replaced connection and grants."""

from __future__ import annotations

import signal
import time

from .fault_grants import (
    expect_given_back,
    finishes_accepted,
    reserved_ids,
    resumed_running,
    wait_ready,
)
from .fault_stage import Scenario, Server, Stage, streaming, wait_gone
from .metrics import scrape, value
from .server import ServerProcess
from .supervisor_helpers import alive
from .waiting import wait_until
from .ws_tap import FrameRule, Hold, OpTap

EXPIRED_UNCONFIRMED = "orbit_grants_expired_unconfirmed_total"
HOLD_S = 60.0  # a reserve frame kept back until the connection ends


def expired_unconfirmed(server: ServerProcess, queue_id: str) -> float:
    """The server's count of the queue's grants whose lease ran out unconfirmed."""
    return value(scrape(f"{server.url}/metrics")[1], EXPIRED_UNCONFIRMED, queue=queue_id)


def kill_supervisor_grants(stage: Stage, server: Server) -> None:
    """SIGKILL orbit-supervise with six grants out: two handlers it renewed (confirmed), two
    running on grants not confirmed yet (a 6 s lease: the first renewal is due at 2 s), and
    two grants whose reserve frame the tap holds, never read. A new supervisor finishes the
    work. No attempts overlap; each IDEMPOTENT task succeeds on a retry; each NON_IDEMPOTENT
    one goes to review, the unread one too (the lease decides: the server cannot tell a
    grant never read from one whose handler ran); and orbit_grants_expired_unconfirmed_total
    counts exactly the expired grants the server never heard the worker speak of (the tap saw
    every op it sent)."""
    assert server.proxy is not None and server.tap is not None
    tap = server.tap
    sup = stage.supervisor(6, url=server.proxy.url)
    wait_ready(tap)
    fast = {"payload_extra": {"retry_seconds": 0.1}}
    renewed = stage.submit_batch(["IDEMPOTENT", "NON_IDEMPOTENT"], 3.0, lease_ttl_ms=900,
                                 **fast)
    first = {r.attempt_id for r in stage.wait_runs(2).runs}
    wait_until(lambda: first <= tap.spoken_of(), timeout=10, what="both grants renewed")
    running = stage.submit_batch(["IDEMPOTENT", "NON_IDEMPOTENT"], 3.0, lease_ttl_ms=6000,
                                 **fast)
    stage.wait_runs(4)
    rule = tap.arm(FrameRule("reserve", Hold(HOLD_S, "cut")))
    unread = stage.submit_batch(["IDEMPOTENT", "NON_IDEMPOTENT"], 3.0, lease_ttl_ms=1000,
                                **fast)
    wait_until(lambda: rule.hits, timeout=20, what="a reserve frame to hold")
    ran_unconfirmed = {r.attempt_id for r in stage.journal().runs} - tap.spoken_of()
    tree = sup.descendants()
    sup.send(signal.SIGKILL)
    gone = wait_gone(tree)
    server.proxy.cut()  # the held frame dies with its connection
    stage.row.faults["SIGKILL orbit-supervise, 6 grants out (2 renewed, 2 running "
                     "unconfirmed, 2 unread)"] += 1
    stage.row.expect("every child died with orbit-supervise",
                     [] if gone else [f"alive after 5 s: {alive(tree)}"])
    held = reserved_ids(rule.hits)
    stage.row.expect("the kill left grants unread and handlers running on unconfirmed grants",
                     [] if held and ran_unconfirmed else
                     [f"unread {held}, running unconfirmed {sorted(ran_unconfirmed)}"])
    for task_id in [*renewed, *running, *unread]:
        stage.expected[task_id] = (("NEEDS_REVIEW",) if stage.idempotency[task_id] ==
                                   "NON_IDEMPOTENT" else ("SUCCEEDED",))
    stage.supervisor(6)
    facts = stage.facts()
    heard = tap.spoken_of()
    expired = sorted(a["id"] for t in facts for a in t.attempts
                     if a["code"] == "LEASE_EXPIRED" and a["id"] not in heard)
    counted = expired_unconfirmed(server.process, stage.queue_id)
    stage.row.expect(f"{EXPIRED_UNCONFIRMED} counts each expired grant the worker never "
                     "spoke of", [] if counted == len(expired) else
                     [f"the metric says {counted:g}, the expired unconfirmed grants are "
                      f"{expired}"])
    stage.row.expect("those are the unread grants and the unconfirmed running ones",
                     [] if set(expired) == set(held) | ran_unconfirmed else
                     [f"expired unconfirmed {expired}, unread {held}, running unconfirmed "
                      f"{sorted(ran_unconfirmed)}"])
    stage.row.merge_facts(facts, stage.journal())


def kill_server_grants(stage: Stage, server: Server) -> None:
    """SIGKILL orbit-server with grants out, and restart it on the same database and port:
    two handlers run on grants (10 s leases, not yet confirmed), and a second pair's reserve
    frame is held by the tap when the server dies, never read. The supervisor reconnects and
    its resume settles each grant: it lists the running ones (answered RUNNING, and their
    finishes ACCEPTED), the server releases the unread ones unspent (grant_unreceived), and
    those run once later, as attempt 1. Nothing is left to the lease."""
    assert server.proxy is not None and server.tap is not None
    tap = server.tap
    stage.supervisor(4, url=server.proxy.url)
    wait_ready(tap)
    stage.submit_batch(["IDEMPOTENT", "NON_IDEMPOTENT"], 2.0, lease_ttl_ms=10000)
    running = {r.attempt_id for r in stage.wait_runs(2).runs}
    rule = tap.arm(FrameRule("reserve", Hold(HOLD_S, "cut")))
    stage.submit_batch(["IDEMPOTENT", "NON_IDEMPOTENT"], 0.3, lease_ttl_ms=10000)
    wait_until(lambda: rule.hits, timeout=20, what="a reserve frame to hold")
    for task_id in stage.task_ids:
        stage.expected[task_id] = ("SUCCEEDED",)
    server.process.kill()
    server.proxy.cut()  # the held frame dies with its connection
    server.process.start()
    stage.row.faults["SIGKILL orbit-server + restart, 2 grants running, 2 unread"] += 1
    facts = stage.facts()
    journal = stage.journal()
    stage.row.expect("the resume listed each running grant and was answered RUNNING",
                     resumed_running(tap, running))
    stage.row.expect("each running grant's finish was ACCEPTED", finishes_accepted(tap, running))
    expect_given_back(stage, facts, journal, reserved_ids(rule.hits), ("grant_unreceived",))
    stage.row.merge_facts(facts, journal)


def replica_hello(stage: Stage, server: Server) -> None:
    """Two orbit-server replicas on one MariaDB database; the producer submits through
    replica A, a task every 20 ms. The supervisor, idle on A with credit, vanishes from A
    without a close (the proxy severs it: A keeps the session and its credit until it has
    heard nothing for its session TTL) and says hello to replica B as the same instance. A
    must grant nothing to the replaced connection: each of its claims checks, in the
    claim's transaction, that the instance's row still names that connection (a row lock
    orders it with B's hello). Every task runs once, as attempt 1; the grants A made before
    B's hello go back unspent on the resume at B (grant_unreceived); no grant expires
    unconfirmed (neither replica's metric counts one)."""
    assert server.proxy is not None and server.tap is not None
    tap = server.tap
    replica = ServerProcess(stage.dir / "replica-b", db_url=server.process.db_url,
                            session_ttl_ms=server.process.session_ttl_ms,
                            kill_grace_ms=server.process.kill_grace_ms).start()
    try:
        stage.supervisor(2, url=server.proxy.url)
        wait_ready(tap)
        with streaming(stage, 0.02, lease_ttl_ms=3000) as stream:
            time.sleep(0.5)
            server.proxy.retarget(replica.port)
            last_heard = tap.last_at["to_server"]
            server.proxy.sever()
            wait_until(lambda: len(tap.seen("welcome")) >= 2, timeout=20,
                       what="the hello at replica B")
            # A keeps the replaced session at least its TTL past the last frame it heard.
            time.sleep(max(0.0, last_heard + server.process.session_ttl_ms / 1000
                           - time.time()) + 0.5)
        welcomed_b = tap.seen("welcome")[1].at
        window = [at for at in stream.answered
                  if welcomed_b <= at < last_heard + server.process.session_ttl_ms / 1000]
        stage.row.faults["hello on replica B while A holds the replaced session"] += 1
        stage.row.notes.append(f"{len(window)} submits answered by A after B's welcome, "
                               "while A held the replaced session")
        stage.row.expect("tasks were submitted through A while it held the replaced session",
                         [] if window else ["no submit fell in that window"])
        for task_id in stage.task_ids:
            stage.expected[task_id] = ("SUCCEEDED",)
        facts = stage.facts()
        journal = stage.journal()
        counts = {name: expired_unconfirmed(process, stage.queue_id)
                  for name, process in (("A", server.process), ("B", replica))}
        stage.row.expect("no grant expired unconfirmed on either replica",
                         [f"replica {name} counts {n:g}" for name, n in counts.items() if n])
        expect_given_back(stage, facts, journal, [], ("grant_unreceived",), some=False)
        stage.row.merge_facts(facts, journal)
    finally:
        replica.stop()


def scenarios() -> list[Scenario]:
    return [
        Scenario("kill_supervisor_grants", "SIGKILL of orbit-supervise with grants out",
                 kill_supervisor_grants, sigkill=True, tap=OpTap),
        Scenario("kill_server_grants", "SIGKILL of orbit-server with grants out, restart",
                 kill_server_grants, sigkill=True, tap=OpTap),
        Scenario("replica_hello", "hello on another replica while grants commit",
                 replica_hello, tap=OpTap, stores=("mariadb",)),
    ]
