"""Kill facts on the attempt record, however late the kill's report comes (issue 13 item 1),
and a cancel that says when its attempt's outcome is still pending (item 6)."""

from __future__ import annotations

from store_support import World

from orbit_wire.frames import Report
from orbit_wire.model import Outcome

LEASE_MS = 1_000


def _kill_report(**extra: int) -> Report:
    facts = {"child_pid": 4242, "signal": 9, "cpu_ms": 280, "peak_rss_bytes": 12_000_000,
             "kill_age_ms": 3, **extra}
    return Report(kill_reason="ATTEMPT_TIMEOUT", renewals=0, **facts)


def _facts(attempt: dict[str, object]) -> tuple[object, ...]:
    return tuple(attempt[k] for k in ("kill_reason", "signal", "child_pid", "cpu_ms",
                                      "peak_rss_bytes"))


def test_a_kill_reported_in_time_records_when_it_happened(world: World) -> None:
    t = world.submit(lease_ttl_ms=LEASE_MS)
    b = world.hello()
    aid, ep = world.run_once(b)
    world.clock.advance(LEASE_MS - 40)
    res, _ = world.finish(b, aid, ep, Outcome.UNKNOWN, code="LEASE_LOST",
                          report=_kill_report(kill_age_ms=5))
    assert res.disposition == "ACCEPTED"
    (a,) = world.attempts(t["id"])
    # A protocol-1 worker's LEASE_LOST reads as the cause its kill reason names.
    assert (a["code"], _facts(a)) == ("ATTEMPT_TIMEOUT", ("ATTEMPT_TIMEOUT", 9, 4242, 280,
                                                          12_000_000))
    assert world.task(t["id"])["failure"]["code"] == "ATTEMPT_TIMEOUT"
    assert a["killed_at_ms"] == world.clock() - 5
    assert a["kill_after_lease_end_ms"] == -45


def test_a_report_after_the_reaper_keeps_its_facts_and_the_outcome(world: World) -> None:
    t = world.submit(lease_ttl_ms=LEASE_MS)
    b = world.hello()
    aid, ep = world.run_once(b)
    world.clock.advance(LEASE_MS + 2)
    world.service.reaper.reap()
    (a,) = world.attempts(t["id"])
    assert a["code"] == "LEASE_EXPIRED" and a["kill_reason"] is None
    world.clock.advance(90)
    res, _ = world.finish(b, aid, ep, Outcome.UNKNOWN, code="LEASE_LOST",
                          report=_kill_report(kill_age_ms=140))
    assert res.disposition == "EVIDENCE_ONLY"
    (a,) = world.attempts(t["id"])
    assert (a["outcome"], a["code"]) == ("UNKNOWN", "LEASE_EXPIRED")
    assert _facts(a) == ("ATTEMPT_TIMEOUT", 9, 4242, 280, 12_000_000)
    assert a["kill_after_lease_end_ms"] == 2 + 90 - 140
    (e,) = world.evidence(t["id"])
    assert (e["reason"], e["code"]) == ("ATTEMPT_FINISHED", "ATTEMPT_TIMEOUT")
    # The task went to review on the reaper's LEASE_EXPIRED; the late report named the kill.
    task = world.task(t["id"])
    assert (task["state"], task["failure"]["code"]) == ("NEEDS_REVIEW", "ATTEMPT_TIMEOUT")


def test_a_report_before_the_reaper_but_after_the_lease_keeps_its_facts(world: World) -> None:
    t = world.submit(lease_ttl_ms=LEASE_MS)
    b = world.hello()
    aid, ep = world.run_once(b)
    world.clock.advance(LEASE_MS + 10)
    res, _ = world.finish(b, aid, ep, Outcome.UNKNOWN, code="LEASE_LOST",
                          report=_kill_report())
    assert res.disposition == "EVIDENCE_ONLY"
    world.service.reaper.reap()
    (a,) = world.attempts(t["id"])
    assert (a["state"], a["code"]) == ("FINISHED", "LEASE_EXPIRED")
    assert _facts(a) == ("ATTEMPT_TIMEOUT", 9, 4242, 280, 12_000_000)
    assert a["kill_after_lease_end_ms"] == 10 - 3
    assert world.evidence(t["id"])[0]["reason"] == "LEASE_EXPIRED"
    assert world.task(t["id"])["failure"]["code"] == "ATTEMPT_TIMEOUT"


def test_a_second_report_adds_the_reap_and_changes_nothing_recorded(world: World) -> None:
    t = world.submit(lease_ttl_ms=LEASE_MS)
    b = world.hello()
    aid, ep = world.run_once(b)
    world.clock.advance(LEASE_MS - 60)
    world.finish(b, aid, ep, Outcome.UNKNOWN, code="LEASE_LOST",
                 report=_kill_report(kill_age_ms=0))
    world.clock.advance(25)
    res, _ = world.finish(b, aid, ep, Outcome.UNKNOWN, code="LEASE_LOST",
                          report=_kill_report(cpu_ms=300, kill_age_ms=25, reap_ms=20))
    assert res.disposition == "EVIDENCE_ONLY"
    (a,) = world.attempts(t["id"])
    assert a["reap_ms"] == 20
    assert a["cpu_ms"] == 280  # what was recorded stays
    assert a["kill_after_lease_end_ms"] == -60
    assert world.evidence(t["id"]) == []  # the reap's facts, merged: no late report


def test_a_late_result_without_a_kill_does_not_touch_the_attempt(world: World) -> None:
    t = world.submit(lease_ttl_ms=LEASE_MS)
    b = world.hello()
    aid, ep = world.run_once(b)
    world.clock.advance(LEASE_MS + 1)
    world.service.reaper.reap()
    world.finish(b, aid, ep, Outcome.SUCCEEDED, result=1,
                 report=Report(child_pid=7, exit_code=0, cpu_ms=9))
    (a,) = world.attempts(t["id"])
    assert (a["child_pid"], a["cpu_ms"], a["exit_code"]) == (4242, None, None)  # from start


def test_a_cancel_says_its_running_attempt_has_no_outcome_yet(world: World) -> None:
    t = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    view, _ = world.service.tasks.cancel_task(world.producer, t["id"], None)
    assert view["state"] == "CANCELLED" and view["attempt_outcome_pending"] is True
    assert world.task(t["id"])["attempt_outcome_pending"] is True
    (a,) = world.attempts(t["id"])
    assert a["state"] == "RUNNING" and a["outcome"] is None
    world.finish(b, aid, ep, Outcome.UNKNOWN, code="LEASE_LOST",
                 report=Report(kill_reason="TASK_CANCELLED", signal=9, kill_age_ms=1))
    view = world.task(t["id"])
    assert view["state"] == "CANCELLED" and view["attempt_outcome_pending"] is False
    (a,) = world.attempts(t["id"])
    assert (a["state"], a["kill_reason"], a["decision"]) == ("FINISHED", "TASK_CANCELLED",
                                                             "CANCELLED")


def test_a_cancel_closed_by_the_reaper_has_no_outcome_pending(world: World) -> None:
    t = world.submit(lease_ttl_ms=LEASE_MS)
    b = world.hello()
    world.run_once(b)
    world.service.tasks.cancel_task(world.producer, t["id"], None)
    world.clock.advance(LEASE_MS)
    world.service.reaper.reap()
    assert world.task(t["id"])["attempt_outcome_pending"] is False


def test_a_cancel_of_a_reserved_or_pending_task_has_no_outcome_pending(world: World) -> None:
    reserved, pending = world.submit(), world.submit()
    world.service.workers.reserve(world.hello(), 1)
    for t in (reserved, pending):
        view, _ = world.service.tasks.cancel_task(world.producer, t["id"], None)
        assert view["attempt_outcome_pending"] is False
