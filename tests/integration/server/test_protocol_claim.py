"""Claiming in a request (docs/protocol.md "Claiming in a request"), against a real server:
a claim after a finish reserves and starts tasks in the request's transaction and answers
them in the response (no reserve frame, no start); slots it cannot fill become credit; it
claims nothing after a failed finish or while draining; it obeys the 2 x capacity bound; a
retransmitted claim answers the same attempts with their current lease and no credit."""

from __future__ import annotations

import pytest
from support.lanes import Lane
from support.protocol_client import random_instance

from orbit_wire.frames import ClaimOp, DrainOp, FinishOp, Request
from orbit_wire.ids import new_id
from orbit_wire.model import Outcome

pytestmark = pytest.mark.asyncio


async def test_a_finish_and_a_claim_refill_the_slot_in_one_round_trip(lane: Lane) -> None:
    first, second = lane.submit(payload={"i": 1}), lane.submit(payload={"i": 2})
    async with await lane.connect(capacity=1, credit=1) as wc:
        [r1] = await wc.reservations(1)
        assert (await wc.start(r1)).ok
        wc.order.clear()
        finish = wc.finish_op(r1, "SUCCEEDED", result_json='{"ok":1}')
        response = await wc.request(finish, ClaimOp(wc.msg_id(), 1))
        done, claim = response.results
        assert done.ok and claim.ok and claim.credited == 0
        (r2,) = claim.claimed or ()
        assert {r1.task_id, r2.task_id} == {first["id"], second["id"]}
        assert r2.payload == {"i": 2} and r2.lease_ms is not None and r2.lease_ms > 0
        assert wc.order == ["response"]  # no reserve frame
        assert lane.task(r2.task_id)["state"] == "RUNNING"
        (attempt,) = lane.attempts(r2.task_id)["attempts"]
        assert attempt["state"] == "RUNNING" and attempt["started_at_ms"] is not None
        kinds = [e["kind"] for e in lane.audit(r2.task_id)]
        assert kinds == ["task_submitted", "attempt_reserved", "attempt_started"]
        # Already started: the worker finishes it without a start.
        assert (await wc.finish(r2, "SUCCEEDED", result_json="2")).ok
        # The claim used the freed slot and left no credit: tasks submitted now wait for
        # credit, and the first reserve frame answers it.
        later = [lane.submit(payload={"i": i}) for i in (3, 4)]
        await wc.credit(2)
        await wc.only_reserved(2, among=[t["id"] for t in later])
    assert lane.task(r2.task_id)["state"] == "SUCCEEDED"


async def test_slots_a_claim_cannot_fill_become_credit(lane: Lane) -> None:
    async with await lane.connect(capacity=3) as wc:
        response = await wc.request(ClaimOp(wc.msg_id(), 3))
        (claim,) = response.results
        assert claim.ok and claim.claimed == () and claim.credited == 3
        task = lane.submit()
        [res] = await wc.reservations(1)  # the credit serves a task submitted later
        assert res.task_id == task["id"] and res.lease_ms is None  # reserved, not started
        assert (await wc.start(res)).ok


async def test_a_claim_after_a_failed_finish_claims_nothing(lane: Lane) -> None:
    for i in range(3):
        lane.submit(payload={"i": i})
    async with await lane.connect(capacity=2) as wc:
        unknown = FinishOp(wc.msg_id(), new_id(7), 1, Outcome.SUCCEEDED, result_json="1")
        response = await wc.request(unknown, ClaimOp(wc.msg_id(), 2))
        failed, claim = response.results
        assert not failed.ok
        assert claim.ok and claim.claimed == () and claim.credited == 0
        # No credit either: credit granted the usual way still works, and its frame holds
        # exactly that credit's two of the three tasks.
        await wc.credit(2)
        await wc.only_reserved(2)


async def test_claims_obey_twice_capacity(lane: Lane) -> None:
    async with await lane.connect(capacity=1) as wc:
        await wc.send(Request(1, (ClaimOp(wc.msg_id(), 2), ClaimOp(wc.msg_id(), 1))))
        assert await wc.expect_fatal("LIMIT_EXCEEDED") == 4004


async def test_a_draining_request_claims_nothing(lane: Lane) -> None:
    task = lane.submit()
    async with await lane.connect(capacity=2) as wc:
        response = await wc.request(DrainOp(wc.msg_id()), ClaimOp(wc.msg_id(), 2))
        drained, claim = response.results
        assert drained.ok and claim.ok and claim.claimed == () and claim.credited == 0
        # Another worker gets the task while the drained session holds on.
        async with await lane.connect(credit=1) as other:
            await other.only_reserved(1, among=[task["id"]])
        assert wc.reserve_frames == []


async def test_a_retransmitted_claim_answers_the_same_attempts_without_credit(
        lane: Lane) -> None:
    task = lane.submit(lease_ttl_ms=30_000)
    instance = random_instance()
    msg = "claim-1"
    first = await lane.connect(capacity=2, instance=instance)
    try:
        (claim,) = (await first.request(ClaimOp(msg, 2))).results
        (res,) = claim.claimed or ()
        assert res.task_id == task["id"] and claim.credited == 1
    finally:
        await first.abort()  # the answer "was lost": the worker reconnects and resends
    async with await lane.connect(capacity=2, instance=instance) as again:
        (replay,) = (await again.request(ClaimOp(msg, 2))).results
        (same,) = replay.claimed or ()
        assert same.attempt_id == res.attempt_id and same.epoch == res.epoch
        assert replay.credited == 0  # credit belonged to the first connection
        assert same.lease_ms is not None and 0 < same.lease_ms <= (res.lease_ms or 0)
        # No credit on this connection: its first reserve frame answers the credit it grants
        # now, with two of the three tasks submitted since.
        for i in range(3):
            lane.submit(payload={"i": i})
        await again.credit(2)
        await again.only_reserved(2)
        assert (await again.finish(same, "SUCCEEDED", result_json="1")).ok
    assert lane.task(task["id"])["state"] == "SUCCEEDED"
