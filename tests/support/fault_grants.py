"""The grant scenarios on one connection (docs/protocol.md, "Grants"): a reservation arrives
started, and the frame tap (tests/support/ws_tap.py) drops it, holds it past its lease, cuts
the connection under it, or loses the answer to the decline or the resume that gives it back.
Also the checks every grant scenario shares: which grants went back unspent, and that each
task then ran once, as its attempt 1 of 1 spent.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from typing import Any, Literal

from .fault_connection import resent, same_answers
from .fault_stage import Body, Scenario, Server, Stage
from .invariants import Journal, TaskFacts
from .waiting import wait_until
from .ws_tap import FrameRule, Hold, OpTap, Seen

UNSPENT = ("grant_declined", "grant_unreceived")  # rules of a grant given back unspent
# The session TTL of the scenarios that time a grant against the worker's frames: the idle
# worker's heartbeats come 5 s apart (TTL/3, at most 5 s), so its last frame is old when a
# grant is made, and a reserve frame held for seconds never makes it think the server silent.
LONG_TTL_MS = 15_000


# ------------------------------------------------------------------ shared facts and checks


def reserved_ids(frames: Iterable[Seen | dict[str, Any]]) -> list[str]:
    """The attempt IDs of the reservations in some ``reserve`` frames."""
    out = []
    for frame in frames:
        message = frame.message if isinstance(frame, Seen) else frame
        out += [str(r["attempt_id"]) for r in message.get("reservations", ())
                if isinstance(r, dict)]
    return out


def wait_ready(tap: OpTap) -> None:
    """Wait until the worker has offered credit on a connection (it waits for work)."""
    wait_until(lambda: tap.seen("credit", "to_server"), timeout=20,
               what="the supervisor's first credit")


def given_back(facts: list[TaskFacts], attempt_ids: Iterable[str],
               rules: tuple[str, ...] = UNSPENT) -> list[str]:
    """Each of ``attempt_ids`` ended RELEASED by one of ``rules`` (no attempt spent)."""
    by_id = {a["id"]: a for t in facts for a in t.attempts}
    bad = []
    for attempt_id in attempt_ids:
        att = by_id.get(attempt_id)
        if att is None:
            bad.append(f"attempt {attempt_id} is in no task's history")
        elif att["state"] != "RELEASED" or att["decision_rule"] not in rules:
            bad.append(f"attempt {attempt_id} ended {att['state']} {att['outcome']}/"
                       f"{att['code']} (rule {att['decision_rule']}), not given back by "
                       f"{' or '.join(rules)}")
    return bad


def once_as_first(facts: list[TaskFacts], journal: Journal) -> list[str]:
    """Each task's handler ran once, and the run was its attempt number 1, the only attempt
    the task spent."""
    runs = collections.Counter(r.task_id for r in journal.runs)
    bad = []
    for t in facts:
        won = [a for a in t.attempts if a["outcome"] == "SUCCEEDED"]
        if runs[t.task_id] != 1:
            bad.append(f"task {t.task_id} ran {runs[t.task_id]} times")
        if not won or won[0]["attempt_number"] != 1 or t.spent != 1:
            bad.append(f"task {t.task_id} ({t.state}) succeeded by attempt number "
                       f"{[a['attempt_number'] for a in won]}, {t.spent} attempts spent")
    return bad


def never_ran(journal: Journal, attempt_ids: Iterable[str]) -> list[str]:
    ran = {r.attempt_id for r in journal.runs}
    return [f"the handler of attempt {a} ran" for a in attempt_ids if a in ran]


def given_back_events(stage: Stage, facts: list[TaskFacts]) -> collections.Counter[str]:
    """How many give-back audit events (attempt_declined, attempt_released) each attempt of
    the run has."""
    return collections.Counter(e["attempt_id"] for t in facts for e in stage.audit(t.task_id)
                               if e["kind"] in ("attempt_declined", "attempt_released"))


def expect_given_back(stage: Stage, facts: list[TaskFacts], journal: Journal,
                      hit: list[str], rules: tuple[str, ...], *, some: bool = True) -> None:
    """The row's checks for the grants a fault hit (``hit``: given back by ``rules``; at
    least one, with ``some``) and for every other attempt of the run's tasks that did not
    succeed (grants the fault hid from the tap, e.g. re-granted to a connection being cut:
    given back by either rule): none ran, each went back once unspent, and every task ran
    once later as its attempt 1."""
    if some:
        stage.row.expect("the fault hit at least one grant",
                         [] if hit else ["no grant was in the frames the fault hit"])
    others = [a["id"] for t in facts for a in t.attempts
              if a["outcome"] != "SUCCEEDED" and a["id"] not in hit]
    counts = given_back_events(stage, facts)
    stage.row.expect("the fault's grants never ran", never_ran(journal, [*hit, *others]))
    stage.row.expect(f"each grant hit went back once, unspent ({' or '.join(rules)})",
                     given_back(facts, hit, rules))
    stage.row.expect("every other attempt that did not succeed went back once, unspent",
                     given_back(facts, others))
    stage.row.expect("one give-back audit event per attempt given back",
                     [f"attempt {a} has {counts[a]} give-back events" for a in [*hit, *others]
                      if counts[a] != 1])
    stage.row.expect("each task ran once, as attempt 1 of 1 spent",
                     once_as_first(facts, journal))


# ------------------------------------------------------------------ the scenarios


def grant_pair(stage: Stage, server: Server, lease_ttl_ms: int) -> tuple[OpTap, FrameRule]:
    """A supervisor through the run's tap, idle with credit, and two tasks (IDEMPOTENT,
    NON_IDEMPOTENT) submitted in one request, so one dispatch grants both; the tap and its
    one rule (what the scenario does to the grants' reserve frame)."""
    assert server.proxy is not None and server.tap is not None
    tap = server.tap
    (rule,) = tap.rules
    stage.supervisor(2, url=server.proxy.url)
    wait_ready(tap)
    stage.submit_batch(["IDEMPOTENT", "NON_IDEMPOTENT"], 0.3, lease_ttl_ms=lease_ttl_ms)
    return tap, rule


def unread_cut(stage: Stage, server: Server) -> None:
    """The server grants two tasks and the ``reserve`` frame is dropped before the worker
    reads it, the connection cut. The worker's resume on its next connection does not list
    them: the server releases them unspent (rule grant_unreceived), and each task runs once
    later, as attempt 1."""
    tap, rule = grant_pair(stage, server, lease_ttl_ms=5000)
    wait_until(lambda: rule.hits, timeout=20, what="a reserve frame to drop")
    stage.row.faults["reserve frame dropped unread, connection cut"] += 1
    dropped = reserved_ids(rule.hits)
    facts = stage.facts()
    journal = stage.journal()
    resumes = tap.ops_of("resume").values()
    listed = {str(e["attempt_id"]) for op in resumes for e in op.get("attempts", ())}
    stage.row.expect("a resume came after the cut and did not list the dropped grants",
                     ([] if resumes else ["no resume reached the server"])
                     + [f"the resume listed {a}" for a in set(dropped) & listed])
    expect_given_back(stage, facts, journal, dropped, ("grant_unreceived",))
    stage.row.merge_facts(facts, journal)


def cut_running(stage: Stage, server: Server) -> None:
    """Two granted handlers run, neither confirmed yet (the first renewal is due at a third
    of a 6 s lease), when the connection is cut. The resume on the next connection lists
    both (confirming them), the server answers them RUNNING, and each finish is ACCEPTED."""
    assert server.proxy is not None and server.tap is not None
    tap = server.tap
    stage.supervisor(2, url=server.proxy.url)
    wait_ready(tap)
    stage.submit(1, 1.5, "IDEMPOTENT", lease_ttl_ms=6000)
    stage.submit(1, 1.5, "NON_IDEMPOTENT", lease_ttl_ms=6000)
    running = {r.attempt_id for r in stage.wait_runs(2).runs}
    confirmed = running & tap.spoken_of()
    server.proxy.cut()
    stage.row.faults["connection cut under 2 unconfirmed granted handlers"] += 1
    stage.row.expect("the cut came before any grant was confirmed",
                     [f"attempt {a} was confirmed before the cut" for a in confirmed])
    facts = stage.facts()
    stage.row.expect("the resume listed each running grant and was answered RUNNING",
                     resumed_running(tap, running))
    stage.row.expect("each finish was ACCEPTED", finishes_accepted(tap, running))
    stage.row.expect("each task ran once, as attempt 1 of 1 spent",
                     once_as_first(facts, stage.journal()))
    stage.row.merge_facts(facts, stage.journal())


def resume_answers(tap: OpTap) -> dict[str, list[Any]]:
    """attempt id -> the status each resume answer the tap saw gave it, in order."""
    status: dict[str, list[Any]] = collections.defaultdict(list)
    for msg_id in tap.ops_of("resume"):
        for answer in tap.answers.get(msg_id, [])[:1]:
            for entry in answer.get("attempts", ()):
                status[str(entry["attempt_id"])].append(entry.get("status"))
    return status


def resumed_running(tap: OpTap, attempt_ids: set[str]) -> list[str]:
    """Each of ``attempt_ids`` was listed by a resume and answered RUNNING."""
    answers = resume_answers(tap)
    return [f"attempt {a}: resume answers {answers.get(a)}" for a in sorted(attempt_ids)
            if not answers.get(a) or set(answers[a]) != {"RUNNING"}]


def finishes_accepted(tap: OpTap, attempt_ids: set[str]) -> list[str]:
    """The first finish of each of ``attempt_ids`` was answered ACCEPTED."""
    first: dict[str, Any] = {}
    for msg_id, op in tap.ops_of("finish").items():
        for answer in tap.answers.get(msg_id, [])[:1]:
            first.setdefault(str(op["attempt_id"]), answer.get("disposition"))
    return [f"attempt {a}: first finish answered {first.get(a)}" for a in sorted(attempt_ids)
            if first.get(a) != "ACCEPTED"]


def held_past_lease(then: Literal["deliver", "cut"]) -> Body:
    def body(stage: Stage, server: Server) -> None:
        tap, rule = grant_pair(stage, server, lease_ttl_ms=1000)
        wait_until(lambda: tap.held, timeout=20, what="the held reserve frame's end")
        stage.row.faults[f"reserve frame held 2.5 s past a 1 s lease, then {then}"] += 1
        held = reserved_ids(rule.hits)
        facts = stage.facts()
        journal = stage.journal()
        if then == "deliver":
            declined = {str(op["attempt_id"]): op.get("reason")
                        for op in tap.ops_of("decline").values()}
            stage.row.expect("the worker declined each late grant EXPIRED",
                             [f"attempt {a}: declined {declined.get(a)}" for a in held
                              if declined.get(a) != "EXPIRED"])
        expect_given_back(stage, facts, journal, held,
                          ("grant_declined",) if then == "deliver" else ("grant_unreceived",))
        stage.row.merge_facts(facts, journal)

    body.__doc__ = (
        "A grant's reserve frame (two tasks, a 1 s lease) is held 2.5 s, past the lease, "
        + ("then delivered: the worker finds its lease over and declines it (EXPIRED)."
           if then == "deliver" else "then the connection is cut: the worker never reads "
           "it, and its resume on the next connection does not list it.")
        + " The handler never runs; the grant goes back unspent and the task runs once "
        "later, as attempt 1 (docs/protocol.md, \"Grants\").")
    return body


def lost_decline_answer(stage: Stage, server: Server) -> None:
    """A grant reaches the worker after its lease ran out on the worker's clock (its basis
    frame 2.5 s old, the frame held 1.5 s of a 3 s lease) but not on the server's: the
    worker declines it EXPIRED, the server releases it, and the answer is lost with the
    connection. After the resume the decline goes again with its msg_id and the receipt
    answers it: released once, unspent; the task runs once later, as attempt 1."""
    assert server.proxy is not None and server.tap is not None
    tap = server.tap
    stage.supervisor(2, url=server.proxy.url)
    wait_ready(tap)
    # The idle worker's last frame (its credit) is the grant's basis: 2.5 s old at the
    # grant, 2.5 s before its next heartbeat.
    wait_until(lambda: time.time() >= tap.last_at["to_server"] + 2.5, timeout=10,
               what="the worker's last frame 2.5 s old")
    rule = tap.arm(FrameRule("reserve", Hold(1.5)))
    stage.submit_batch(["IDEMPOTENT", "NON_IDEMPOTENT"], 0.3, lease_ttl_ms=3000)
    wait_until(lambda: tap.lost, timeout=20, what="the decline's answer to lose")
    stage.row.faults["decline answer lost, connection cut"] += 1
    held = reserved_ids(rule.hits)
    facts = stage.facts()
    journal = stage.journal()
    declined = {str(op["attempt_id"]): op.get("reason") for op in tap.lost_ops()}
    stage.row.expect("the worker declined each late grant EXPIRED",
                     [f"attempt {a}: declined {declined.get(a)}" for a in held
                      if declined.get(a) != "EXPIRED"])
    stage.row.expect("the lost decline was resent with its original msg_id",
                     resent(tap, "answer"))
    stage.row.expect("every answer to one msg_id is the same (applied once)", same_answers(tap))
    expect_given_back(stage, facts, journal, held, ("grant_declined",))
    stage.row.merge_facts(facts, journal)


def lost_resume_answer(stage: Stage, server: Server) -> None:
    """A granted handler runs when a second grant's reserve frame is dropped and the
    connection cut; the resume on the next connection lists the first (confirming it) and
    not the second (released unspent), and its answer is lost with that connection too. A
    resume is answered afresh, never from a receipt: the next connection's resume (a new
    msg_id) gets the same answer for the running attempt, and nothing is released twice.
    Both tasks run once, as attempt 1; the finish is ACCEPTED."""
    assert server.proxy is not None and server.tap is not None
    tap = server.tap
    stage.supervisor(2, url=server.proxy.url)
    wait_ready(tap)
    stage.submit(1, 3.0, "NON_IDEMPOTENT", lease_ttl_ms=6000)
    (running,) = {r.attempt_id for r in stage.wait_runs(1).runs}
    rule = tap.arm(FrameRule("reserve", "drop_and_cut"))
    stage.submit(1, 0.3, "IDEMPOTENT", lease_ttl_ms=6000)
    wait_until(lambda: tap.lost, timeout=20, what="the resume's answer to lose")
    stage.row.faults["reserve frame dropped, then the resume's answer lost"] += 1
    dropped = reserved_ids(rule.hits)
    facts = stage.facts()
    journal = stage.journal()
    status = resume_answers(tap).get(running, [])
    stage.row.expect("each resume (the lost one and the next) answered the running attempt "
                     "RUNNING", [] if len(status) >= 2 and set(status) == {"RUNNING"} else
                     [f"attempt {running}: resume answers {status}"])
    stage.row.expect("the running attempt's finish was ACCEPTED",
                     finishes_accepted(tap, {running}))
    expect_given_back(stage, facts, journal, dropped, ("grant_unreceived",))
    stage.row.merge_facts(facts, journal)


def scenarios() -> list[Scenario]:
    return [
        Scenario("grant_unread_cut", "grant cut before the worker read it", unread_cut,
                 tap=lambda: OpTap(rules=[FrameRule("reserve", "drop_and_cut")])),
        Scenario("grant_cut_running", "cut while granted handlers run", cut_running,
                 tap=OpTap),
        Scenario("grant_late_delivered", "grant held past its lease, then delivered",
                 held_past_lease("deliver"), session_ttl_ms=LONG_TTL_MS,
                 tap=lambda: OpTap(rules=[FrameRule("reserve", Hold(2.5))])),
        Scenario("grant_late_cut", "grant held past its lease, then cut",
                 held_past_lease("cut"), session_ttl_ms=LONG_TTL_MS,
                 tap=lambda: OpTap(rules=[FrameRule("reserve", Hold(2.5, "cut"))])),
        Scenario("lost_answer_decline", "answer to decline lost", lost_decline_answer,
                 session_ttl_ms=LONG_TTL_MS, tap=lambda: OpTap("decline", "answer")),
        Scenario("lost_answer_resume", "answer to resume lost (grants)", lost_resume_answer,
                 tap=lambda: OpTap("resume", "answer")),
    ]
