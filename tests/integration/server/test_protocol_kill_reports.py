"""Kill reports through the worker protocol against a real server (docs/protocol.md "Kill
reports"): a late report keeps its facts, a second finish adds the reap, and a cancelled
task says while its attempt's outcome is pending."""

from __future__ import annotations

import asyncio

import pytest
from support.lanes import Lane, wait_for_state

from orbit_wire.frames import Report

pytestmark = pytest.mark.asyncio

KILLED = Report(child_pid=4242, signal=9, cpu_ms=280, peak_rss_bytes=9 << 20,
                kill_reason="ATTEMPT_TIMEOUT", renewals=0, kill_age_ms=7)


async def test_a_report_after_the_reaper_leaves_its_facts_on_the_attempt(lane: Lane) -> None:
    task = lane.submit(attempt_timeout_ms=200, max_attempts=1)
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        await wait_for_state(lane, task["id"], {"NEEDS_REVIEW"})  # the reaper closed it
        [a] = lane.attempts(task["id"])["attempts"]
        assert (a["code"], a["kill_reason"], a["child_pid"]) == ("LEASE_EXPIRED", None, None)
        res = await wc.finish(r, "UNKNOWN", code="LEASE_LOST", report=KILLED)
        assert res.ok and res.disposition == "EVIDENCE_ONLY"
    history = lane.attempts(task["id"])
    [a] = history["attempts"]
    assert (a["outcome"], a["code"]) == ("UNKNOWN", "LEASE_EXPIRED")  # the rules decided
    assert (a["kill_reason"], a["signal"], a["child_pid"], a["cpu_ms"],
            a["peak_rss_bytes"]) == ("ATTEMPT_TIMEOUT", 9, 4242, 280, 9 << 20)
    assert a["kill_after_lease_end_ms"] == a["killed_at_ms"] - a["lease_expires_at_ms"]
    assert a["kill_after_lease_end_ms"] > -7  # received after the lease end, less its age
    assert [e["reason"] for e in history["evidence"]] == ["ATTEMPT_FINISHED"]


async def test_a_second_finish_adds_the_reap_to_an_accepted_kill(lane: Lane) -> None:
    task = lane.submit(max_attempts=1)
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        first = await wc.finish(r, "UNKNOWN", code="LEASE_LOST", report=KILLED)
        assert first.ok and first.disposition == "ACCEPTED"
        [a] = lane.attempts(task["id"])["attempts"]
        assert a["reap_ms"] is None and a["kill_after_lease_end_ms"] < 0
        reaped = Report(child_pid=4242, signal=9, cpu_ms=300, peak_rss_bytes=10 << 20,
                        kill_reason="ATTEMPT_TIMEOUT", kill_age_ms=60, reap_ms=55)
        second = await wc.finish(r, "UNKNOWN", code="LEASE_LOST", report=reaped)
        assert second.ok and second.disposition == "EVIDENCE_ONLY"
    [after] = lane.attempts(task["id"])["attempts"]
    assert after["reap_ms"] == 55
    assert {k: after[k] for k in ("cpu_ms", "peak_rss_bytes", "killed_at_ms", "decision")} == {
        k: a[k] for k in ("cpu_ms", "peak_rss_bytes", "killed_at_ms", "decision")}


async def test_a_cancelled_task_says_its_attempt_outcome_is_pending(lane: Lane) -> None:
    task = lane.submit()
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        cancelled = await asyncio.to_thread(lane.cancel, task["id"])
        assert cancelled["state"] == "CANCELLED" and cancelled["attempt_outcome_pending"]
        [a] = lane.attempts(task["id"])["attempts"]
        assert a["state"] == "RUNNING" and a["outcome"] is None
        await wc.cancel_push()
        res = await wc.finish(r, "UNKNOWN", code="LEASE_LOST", report=Report(
            child_pid=4242, signal=9, kill_reason="TASK_CANCELLED", kill_age_ms=1))
        assert res.ok and res.task_state == "CANCELLED"
    got = lane.task(task["id"])
    assert got["state"] == "CANCELLED" and got["attempt_outcome_pending"] is False
    [a] = lane.attempts(task["id"])["attempts"]
    assert (a["outcome"], a["kill_reason"], a["decision"]) == ("UNKNOWN", "TASK_CANCELLED",
                                                               "CANCELLED")


async def test_a_cancelled_attempt_reported_cooperative_keeps_its_result_in_history(
        lane: Lane) -> None:
    # The reservation carries the task's cancel grace; after the cancel the attempt's lease
    # is not renewed (the worker stops asking), and a result the handler returned within the
    # grace decides the attempt, not the task.
    task = lane.submit(cancel_grace_ms=750)
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert r.cancel_grace_ms == 750
        assert (await wc.start(r)).ok
        await asyncio.to_thread(lane.cancel, task["id"])
        await wc.cancel_push()
        refused = await wc.renew(r)
        assert not refused.ok and refused.error_code == "LEASE_EXPIRED"
        res = await wc.finish(r, "SUCCEEDED", result_json='{"partial":1}',
                              report=Report(child_pid=4242, exit_code=0,
                                            ended_by="COOPERATIVE"))
        assert res.ok and res.disposition == "ACCEPTED" and res.task_state == "CANCELLED"
    got = lane.task(task["id"])
    assert (got["state"], got["result"], got["attempt_outcome_pending"]) == (
        "CANCELLED", None, False)
    assert got["policy"]["cancel_grace_ms"] == 750
    [a] = lane.attempts(task["id"])["attempts"]
    assert (a["outcome"], a["ended_by"], a["kill_reason"], a["decision"]) == (
        "SUCCEEDED", "COOPERATIVE", None, "CANCELLED")
