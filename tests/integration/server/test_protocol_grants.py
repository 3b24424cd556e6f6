"""Leases granted with the dispatch (docs/protocol.md, "Grants"), against a real server: a
worker that asks for the ``grant`` feature gets reservations already started, each with its
lease and the frame's ``basis``; it runs them without a start; a declined grant goes back
unspent; a grant its connection never delivered is released by the next connection's
resume; a grant is never declined once confirmed; a worker that never asked keeps the start
round trip."""

from __future__ import annotations

import asyncio

import pytest
from support.lanes import Lane
from support.protocol_client import random_instance

from orbit_wire.errors import ErrorCode

pytestmark = pytest.mark.asyncio

GRANT = ("grant",)


async def test_a_granted_reservation_is_started_and_runs_without_a_start(lane: Lane) -> None:
    async with await lane.connect(capacity=2, features=GRANT) as wc:
        assert wc.welcome is not None and wc.welcome.features == GRANT
        await wc.credit(1)
        task = await asyncio.to_thread(lane.submit, payload={"i": 1})
        [res] = await wc.reservations(1)
        assert res.task_id == task["id"] and res.lease_ms is not None and res.lease_ms > 0
        (frame,) = wc.reserve_frames
        # The server had read the hello and the credit when it granted.
        assert frame.basis == 2 == wc.frames_sent
        (attempt,) = lane.attempts(task["id"])["attempts"]
        assert attempt["state"] == "RUNNING" and attempt["started_at_ms"] is not None
        assert [e["kind"] for e in lane.audit(task["id"])] == [
            "task_submitted", "attempt_reserved", "attempt_started"]
        assert (await wc.finish(res, "SUCCEEDED", result_json='{"ok": 1}')).ok
    assert lane.task(task["id"])["state"] == "SUCCEEDED"


async def test_a_dispatch_pass_grants_too(lane: Lane) -> None:
    waiting = [await asyncio.to_thread(lane.submit, payload={"i": i}) for i in range(2)]
    async with await lane.connect(capacity=2, features=GRANT) as wc:
        await wc.heartbeat()  # frame 2: read before the pass that the credit starts
        await wc.credit(2)
        got = await wc.reservations(2)
        assert {r.task_id for r in got} == {t["id"] for t in waiting}
        assert all(r.lease_ms for r in got) and wc.reserve_frames[0].basis == 3
        for res in got:
            assert (await wc.renew(res)).ok  # a renewal confirms it


async def test_a_declined_grant_goes_back_unspent_and_runs_later(lane: Lane) -> None:
    async with await lane.connect(capacity=1, credit=1, features=GRANT) as wc:
        task = await asyncio.to_thread(lane.submit)
        [res] = await wc.reservations(1)
        assert (await wc.decline(res, "EXPIRED")).ok
        view = await lane.task_async(task["id"])
        assert view["state"] == "PENDING" and view["attempts"] == 0
        (declined,) = lane.attempts(task["id"])["attempts"]
        assert declined["state"] == "RELEASED"
        assert declined["decision_rule"] == "grant_declined"
        assert "attempt_declined" in [e["kind"] for e in lane.audit(task["id"])]
        # The same task comes back (credit again), the same attempt number, a new epoch.
        await wc.credit(1)
        [again] = await wc.reservations(1)
        assert again.task_id == task["id"] and again.attempt_number == 1
        assert again.epoch == res.epoch + 1
        # A confirmed grant is never declined: its handler may have run.
        assert (await wc.renew(again)).ok
        refused = await wc.decline(again)
        assert not refused.ok and refused.error_code == ErrorCode.CONFLICT
        assert (await wc.finish(again, "SUCCEEDED", result_json="1")).ok


async def test_a_grant_the_connection_never_delivered_is_released_by_the_resume(
        lane: Lane) -> None:
    instance = random_instance()
    wc = await lane.connect(capacity=1, credit=1, features=GRANT, instance=instance)
    task = await asyncio.to_thread(lane.submit)
    await wc.reservations(1)  # granted and sent; the worker "never read it"
    await wc.abort()
    async with await lane.connect(capacity=1, features=GRANT, instance=instance) as again:
        resumed = await again.resume([])
        assert resumed.ok and resumed.attempts == ()
        view = await lane.task_async(task["id"])
        assert view["state"] == "PENDING" and view["attempts"] == 0
        (released,) = lane.attempts(task["id"])["attempts"]
        assert released["decision_rule"] == "grant_unreceived"
        await again.credit(1)
        [res] = await again.reservations(1)
        assert res.task_id == task["id"] and res.attempt_number == 1
        assert (await again.finish(res, "SUCCEEDED", result_json="1")).ok


async def test_a_resume_that_lists_a_grant_keeps_it(lane: Lane) -> None:
    instance = random_instance()
    wc = await lane.connect(capacity=1, credit=1, features=GRANT, instance=instance)
    task = await asyncio.to_thread(lane.submit)
    [res] = await wc.reservations(1)
    await wc.abort()
    async with await lane.connect(capacity=1, features=GRANT, instance=instance) as again:
        resumed = await again.resume([(res.attempt_id, res.epoch)])
        (entry,) = resumed.attempts or ()
        assert entry.status == "RUNNING" and entry.lease_ms
        assert (await again.finish(res, "SUCCEEDED", result_json="1")).ok
    assert lane.task(task["id"])["state"] == "SUCCEEDED"
    (attempt,) = lane.attempts(task["id"])["attempts"]
    assert attempt["attempt_number"] == 1


async def test_a_grant_of_the_current_connection_survives_a_resume_that_races_it(
        lane: Lane) -> None:
    # The resume does not list a grant of its own connection that it has not read yet:
    # that grant is never released (only those of earlier connections are).
    async with await lane.connect(capacity=1, credit=1, features=GRANT) as wc:
        task = await asyncio.to_thread(lane.submit)
        [res] = await wc.reservations(1)
        assert (await wc.resume([])).ok
        assert (await wc.renew(res)).ok
        assert (await wc.finish(res, "SUCCEEDED", result_json="1")).ok
    assert lane.task(task["id"])["state"] == "SUCCEEDED"


async def test_a_worker_that_does_not_ask_keeps_the_start_round_trip(lane: Lane) -> None:
    async with await lane.connect(capacity=1, credit=1) as wc:
        assert wc.welcome is not None and wc.welcome.features == ()
        await asyncio.to_thread(lane.submit)
        [res] = await wc.reservations(1)
        assert res.lease_ms is None and wc.reserve_frames[0].basis is None
        assert (await wc.start(res)).ok


async def test_a_grant_read_after_its_lease_ran_out_is_declined_unspent(lane: Lane) -> None:
    # The reaper decides an unconfirmed grant's lapse one session TTL after its lease: the
    # worker's decline within it (a reserve frame delayed past its lease) gives it back.
    async with await lane.connect(capacity=1, credit=1, features=GRANT) as wc:
        task = await asyncio.to_thread(lane.submit, lease_ttl_ms=300, idempotency="NON_IDEMPOTENT")
        [res] = await wc.reservations(1)
        await asyncio.sleep(0.6)  # past the lease; the server's reaper runs every 50 ms
        view = await lane.task_async(task["id"])
        assert view["state"] == "RUNNING"  # not decided yet: the worker may still speak
        assert (await wc.decline(res, "EXPIRED")).ok
    view = lane.task(task["id"])
    assert view["state"] == "PENDING" and view["attempts"] == 0
