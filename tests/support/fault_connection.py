"""The connection scenarios: an op's request or answer lost with the connection cut (the
frame tap of tests/support/ws_tap.py loses it), and an outage past the lease TTL; and the
checks they share with the grant scenarios (resent with the msg_id, answered the same,
applied once)."""

from __future__ import annotations

import collections
import functools
import json
import signal
import time
from typing import Any

from .fault_stage import Body, Scenario, Server, Stage, kill_decisions, log_records
from .invariants import TaskFacts, killed_after_lease_end
from .supervisor_helpers import SupervisorProcess
from .waiting import UNIT, wait_until
from .ws_tap import Lose, OpTap


def lost_op(kind: str, lose: Lose) -> Body:
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
                             unreported(facts, ran_before_exit))
        back = _reconnected_after(sup, tap.lost_at[0])
        stage.row.expect("the supervisor saw the connection end and reconnected",
                         [] if back is not None else ["no reconnection logged after the cut"])
        if back is not None:
            stage.row.measure("cut -> reconnected", [back])
        if not drain:
            stage.row.expect("the lost op was resent with its original msg_id",
                             resent(tap, lose))
        stage.row.expect("every answer to one msg_id is the same (applied once)",
                         same_answers(tap))
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


def unreported(facts: list[TaskFacts], attempts: set[str]) -> list[str]:
    """The attempts among ``attempts`` the server closed by expiry without any report."""
    bad = []
    for t in facts:
        reported = {e["attempt_id"] for e in t.evidence}
        for att in t.attempts:
            if (att["id"] in attempts and att["code"] == "LEASE_EXPIRED"
                    and att["id"] not in reported):
                bad.append(f"attempt {att['id']} expired without a report")
    return bad


def resent(tap: OpTap, lose: str) -> list[str]:
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


def same_answers(tap: OpTap) -> list[str]:
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


def outage(stage: Stage, server: Server) -> None:
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


def scenarios() -> list[Scenario]:
    out = []
    for kind in ("start", "renew", "finish", "drain"):
        losses: tuple[tuple[Lose, str, str], ...] = (
            ("request", f"cut_{kind}", f"connection cut during {kind}"),
            ("answer", f"lost_answer_{kind}", f"answer to {kind} lost"))
        for lose, name, title in losses:
            out.append(Scenario(name, title, lost_op(kind, lose),
                                tap=functools.partial(OpTap, kind, lose)))
    out.append(Scenario("outage_past_ttl", "outage longer than the lease TTL", outage,
                        proxy=True))
    return out
