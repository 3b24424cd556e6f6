"""Every row of the outcome table (docs/handlers.md "Failures") through the worker protocol,
against a real server process."""

from __future__ import annotations

import asyncio

import pytest
from support.lanes import Lane, wait_for_state
from support.orbit_http import expect
from support.waiting import UNIT

from orbit_wire.frames import Report

pytestmark = pytest.mark.asyncio

DONE = {"SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED"}


async def test_success_stores_exact_result_and_attempt_history(lane: Lane) -> None:
    task = lane.submit(payload={"text": "hello orbit"})
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert r.task_id == task["id"] and r.epoch == 1 and r.attempt_number == 1
        assert r.payload == {"text": "hello orbit"}
        assert r.idempotency == "NON_IDEMPOTENT"
        started = await wc.start(r, child_pid=4242)
        assert started.ok and started.lease_ms is not None and 0 < started.lease_ms <= 30000
        renewed = await wc.renew(r)
        assert renewed.ok and renewed.lease_ms is not None
        text = '{"text":"HELLO ORBIT","ratio":1.50,"big":9007199254740993}'
        report = Report(child_pid=4242, exit_code=0, cpu_ms=12, peak_rss_bytes=1 << 20,
                        renewals=1)
        done = await wc.finish(r, "SUCCEEDED", result_json=text, report=report)
        assert done.ok and done.disposition == "ACCEPTED" and done.task_state == "SUCCEEDED"
    got = lane.task(task["id"])
    assert got["state"] == "SUCCEEDED" and got["attempts"] == 1
    assert text in lane.task_raw(task["id"])  # the exact number text survives
    [attempt] = lane.attempts(task["id"])["attempts"]
    assert attempt["state"] == "FINISHED" and attempt["outcome"] == "SUCCEEDED"
    assert attempt["child_pid"] == 4242 and attempt["cpu_ms"] == 12
    assert attempt["peak_rss_bytes"] == 1 << 20 and attempt["renewals"] >= 1
    assert attempt["decision"] == "SUCCEEDED"
    assert attempt["instance_id"] == wc.instance_id
    kinds = [e["kind"] for e in lane.audit(task["id"])]
    assert len(kinds) >= 4, kinds  # submit, reserve, start, finish/decision at least


async def test_object_rejected_fails_the_task(lane: Lane) -> None:
    task = lane.submit(max_attempts=5)
    empty = lane.submit(max_attempts=5)
    async with await lane.connect(credit=2) as wc:
        by_task = {r.task_id: r for r in await wc.reservations(2)}
        for r in by_task.values():
            assert (await wc.start(r)).ok
        r1 = by_task[task["id"]]
        res = await wc.finish(r1, "FAILED", code="OBJECT_REJECTED",
                              details_json='{"field":"sku","n":1.0}')
        assert res.ok and res.task_state == "FAILED"
        r2 = by_task[empty["id"]]
        res = await wc.finish(r2, "FAILED", code="OBJECT_REJECTED")
        assert res.ok and res.task_state == "FAILED"
    failed = lane.task(task["id"])
    assert failed["state"] == "FAILED" and failed["attempts"] == 1
    assert failed["failure"] == {"code": "OBJECT_REJECTED", "details": {"field": "sku", "n": 1.0}}
    assert lane.task(empty["id"])["failure"] == {"code": "OBJECT_REJECTED", "details": {}}


async def test_temporary_rejection_is_retried_with_a_new_epoch(lane: Lane) -> None:
    task = lane.submit(max_attempts=3)
    async with await lane.connect(credit=2) as wc:
        [r1] = await wc.reservations(1)
        assert (await wc.start(r1)).ok
        res = await wc.finish(r1, "FAILED", code="TEMPORARY_REJECTION", retryable=True)
        assert res.ok and res.task_state == "PENDING"
        [r2] = await wc.reservations(1)
        assert r2.task_id == task["id"] and r2.epoch == 2 and r2.attempt_number == 2
        assert r2.attempt_id != r1.attempt_id
        assert (await wc.start(r2)).ok
        res = await wc.finish(r2, "SUCCEEDED", result_json='{"ok":true}')
        assert res.task_state == "SUCCEEDED"
    history = lane.attempts(task["id"])["attempts"]
    assert [a["decision"] for a in history] == ["RETRY", "SUCCEEDED"]


async def test_non_idempotent_with_uncertain_history_goes_to_review(lane: Lane) -> None:
    task = lane.submit(max_attempts=5)  # NON_IDEMPOTENT by default
    async with await lane.connect(credit=2) as wc:
        [r1] = await wc.reservations(1)
        assert (await wc.start(r1)).ok
        res = await wc.finish(r1, "UNKNOWN", code="HANDLER_ERROR")
        assert res.task_state == "NEEDS_REVIEW"  # uncertain + non-idempotent: no auto retry
        # The operator retries; the next attempt is rejected temporarily, which would retry,
        # but the history holds an uncertain attempt: review again (rule uncertain_history).
        retried = expect(lane.review(task["id"], "retry", reason="checked"), 200)
        assert retried["state"] == "PENDING"
        [r2] = await wc.reservations(1)
        assert r2.epoch == 2
        assert (await wc.start(r2)).ok
        res = await wc.finish(r2, "FAILED", code="TEMPORARY_REJECTION", retryable=True)
        assert res.task_state == "NEEDS_REVIEW"
    history = lane.attempts(task["id"])["attempts"]
    assert history[-1]["decision"] == "NEEDS_REVIEW"
    assert history[-1]["decision_rule"] == "uncertain_history"
    actors = [e["actor"] for e in lane.audit(task["id"])]
    assert any(a.startswith("operator:") for a in actors), actors


async def test_handler_error_idempotent_retries_non_idempotent_reviews(lane: Lane) -> None:
    idem = lane.submit(idempotency="IDEMPOTENT", max_attempts=3)
    non = lane.submit(idempotency="NON_IDEMPOTENT", max_attempts=3)
    async with await lane.connect(credit=3) as wc:
        first = {r.task_id: r for r in await wc.reservations(2)}
        for r in first.values():
            assert (await wc.start(r)).ok
        res = await wc.finish(first[idem["id"]], "UNKNOWN", code="HANDLER_ERROR")
        assert res.task_state == "PENDING"
        res = await wc.finish(first[non["id"]], "UNKNOWN", code="HANDLER_ERROR")
        assert res.task_state == "NEEDS_REVIEW"
        [again] = await wc.reservations(1)
        assert again.task_id == idem["id"] and again.epoch == 2
    [a1, _a2] = lane.attempts(idem["id"])["attempts"]
    assert a1["outcome"] == "UNKNOWN" and a1["code"] == "HANDLER_ERROR"
    assert a1["decision"] == "RETRY"


async def test_handler_crashed_records_exit_and_follows_policy(lane: Lane) -> None:
    idem = lane.submit(idempotency="IDEMPOTENT", max_attempts=1)
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        res = await wc.finish(r, "UNKNOWN", code="HANDLER_CRASHED",
                              report=Report(child_pid=77, signal=11, kill_reason="SEGFAULT"))
        # Budget exhausted after an uncertain outcome: review, never FAILED.
        assert res.task_state == "NEEDS_REVIEW"
    [a] = lane.attempts(idem["id"])["attempts"]
    assert a["code"] == "HANDLER_CRASHED" and a["signal"] == 11 and a["child_pid"] == 77
    assert a["kill_reason"] == "SEGFAULT"


@pytest.mark.parametrize("bad_result", [
    '{"n": 123456789012345678901234567890}',
    '{"unterminated": ',
    "[" * 40 + "]" * 40,
    '{"s": "' + "x" * (257 * 1024) + '"}',
])
async def test_server_revalidates_results(lane: Lane, bad_result: str) -> None:
    task = lane.submit()
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        res = await wc.finish(r, "SUCCEEDED", result_json=bad_result)
        assert res.ok and res.task_state == "NEEDS_REVIEW"
    got = lane.task(task["id"])
    assert got["state"] == "NEEDS_REVIEW" and got["result"] is None
    [a] = lane.attempts(task["id"])["attempts"]
    assert a["outcome"] == "UNKNOWN" and a["code"] == "INVALID_HANDLER_RESULT"


async def test_lease_lost_report_is_uncertain(lane: Lane) -> None:
    task = lane.submit(idempotency="IDEMPOTENT", max_attempts=2)
    async with await lane.connect(credit=2) as wc:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        res = await wc.finish(r, "UNKNOWN", code="LEASE_LOST")
        assert res.task_state == "PENDING"
        [r2] = await wc.reservations(1)
        assert (await wc.start(r2)).ok
        res = await wc.finish(r2, "UNKNOWN", code="LEASE_LOST")
        assert res.task_state == "NEEDS_REVIEW"  # budget out, last outcome uncertain
    assert lane.task(task["id"])["attempts"] == 2


async def test_late_report_is_evidence_only(lane: Lane) -> None:
    task = lane.submit(lease_ttl_ms=300, max_attempts=1)
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        expired = await wait_for_state(lane, task["id"], DONE)
        assert expired["state"] == "NEEDS_REVIEW"  # LEASE_EXPIRED is uncertain
        late = await wc.finish(r, "SUCCEEDED", result_json='{"late":true}')
        assert late.ok and late.disposition == "EVIDENCE_ONLY"
        renew = await wc.renew(r)
        assert not renew.ok and renew.error_code in ("LEASE_EXPIRED", "STALE_EPOCH")
    got = lane.task(task["id"])
    assert got["state"] == "NEEDS_REVIEW" and got["result"] is None
    history = lane.attempts(task["id"])
    [a] = history["attempts"]
    assert a["code"] == "LEASE_EXPIRED"
    [ev] = history["evidence"]
    assert ev["attempt_id"] == r.attempt_id and ev["outcome"] == "SUCCEEDED"
    assert ev["result"] == {"late": True}


async def test_vanished_worker_lease_expires_by_reaper(lane: Lane) -> None:
    task = lane.submit(lease_ttl_ms=300)
    wc = await lane.connect(credit=1)
    [r] = await wc.reservations(1)
    assert (await wc.start(r)).ok
    await wc.abort()  # no close handshake, no finish: the worker is gone
    got = await wait_for_state(lane, task["id"], DONE)
    assert got["state"] == "NEEDS_REVIEW"
    [a] = lane.attempts(task["id"])["attempts"]
    assert a["state"] == "FINISHED" and a["outcome"] == "UNKNOWN"
    assert a["code"] == "LEASE_EXPIRED"
    assert any(e["actor"] == "server" for e in lane.audit(task["id"]))


async def test_budget_exhaustion_failed_vs_review(lane: Lane) -> None:
    explicit = lane.submit(idempotency="IDEMPOTENT", max_attempts=2)
    uncertain = lane.submit(idempotency="IDEMPOTENT", max_attempts=2)
    outcomes = {explicit["id"]: ("FAILED", "TEMPORARY_REJECTION", True),
                uncertain["id"]: ("UNKNOWN", "HANDLER_ERROR", False)}
    finals: dict[str, str] = {}
    async with await lane.connect(credit=4) as wc:
        for _ in range(4):
            [r] = await wc.reservations(1)
            assert (await wc.start(r)).ok
            outcome, code, retryable = outcomes[r.task_id]
            res = await wc.finish(r, outcome, code=code, retryable=retryable)
            assert res.task_state is not None
            finals[r.task_id] = res.task_state
    assert finals == {explicit["id"]: "FAILED", uncertain["id"]: "NEEDS_REVIEW"}
    failed = lane.task(explicit["id"])
    assert failed["failure"]["code"] == "TEMPORARY_REJECTION" and failed["attempts"] == 2
    assert lane.attempts(explicit["id"])["attempts"][-1]["decision"] == "FAILED"


async def test_pending_past_deadline_fails(lane: Lane) -> None:
    task = lane.submit(deadline_ms=300)
    got = await lane.task_async(task["id"], wait_ms=10_000)
    assert got["state"] == "FAILED"
    assert got["failure"]["code"] == "DEADLINE_EXCEEDED"


async def test_cancel_running_pushes_cancel_and_keeps_outcome(lane: Lane) -> None:
    task = lane.submit()
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        cancelled = await asyncio.to_thread(lane.cancel, task["id"])
        assert cancelled["state"] == "CANCELLED" and cancelled["cancel_requested"] is True
        push = await wc.cancel_push()
        assert (push.attempt_id, push.epoch, push.reason) == (r.attempt_id, r.epoch,
                                                             "TASK_CANCELLED")
        res = await wc.finish(r, "UNKNOWN", code="LEASE_LOST",
                              report=Report(signal=9, kill_reason="CANCELLED"))
        assert res.ok and res.task_state == "CANCELLED"
    assert lane.task(task["id"])["state"] == "CANCELLED"
    [a] = lane.attempts(task["id"])["attempts"]
    assert a["outcome"] == "UNKNOWN" and a["code"] == "LEASE_LOST" and a["signal"] == 9


async def test_cancel_reserved_attempt_releases_it(lane: Lane) -> None:
    task = lane.submit()
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        await asyncio.to_thread(lane.cancel, task["id"])
        started = await wc.start(r)
        assert not started.ok
        assert started.error_code in ("CONFLICT", "STALE_EPOCH", "LEASE_EXPIRED", "NOT_FOUND")
    assert lane.task(task["id"])["state"] == "CANCELLED"
    assert lane.task(task["id"])["attempts"] == 0


async def test_review_succeed_and_fail(lane: Lane) -> None:
    a = lane.submit()
    b = lane.submit()
    async with await lane.connect(credit=2) as wc:
        for r in await wc.reservations(2):
            assert (await wc.start(r)).ok
            res = await wc.finish(r, "UNKNOWN", code="HANDLER_ERROR")
            assert res.task_state == "NEEDS_REVIEW"
    ok = expect(lane.review(a["id"], "succeed", result={"manual": 1}, reason="verified"), 200)
    assert ok["state"] == "SUCCEEDED" and ok["result"] == {"manual": 1}
    bad = expect(lane.review(b["id"], "fail", reason="gave up"), 200)
    assert bad["state"] == "FAILED" and bad["failure"]["code"] == "REVIEW_FAILED"
    conflict = lane.review(a["id"], "retry")
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "CONFLICT"
    bad_action = lane.review(b["id"], "explode")
    assert bad_action.status_code == 400


async def test_long_poll_returns_when_the_worker_finishes(lane: Lane) -> None:
    task = lane.submit()
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        poll = asyncio.ensure_future(lane.task_async(task["id"], wait_ms=30_000))
        await asyncio.sleep(0.2 * UNIT)  # the scenario: the poll is waiting on a RUNNING task
        assert not poll.done()
        done = await wc.finish(r, "SUCCEEDED", result_json='{"n":1.000}')
        assert done.task_state == "SUCCEEDED"
        got = await asyncio.wait_for(poll, 20 * UNIT)
    assert got["state"] == "SUCCEEDED" and got["result"] == {"n": 1.0}
