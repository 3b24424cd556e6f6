"""Credit carried inside a request (docs/protocol.md "Credits and reservations"), against a
real server: the claim rides in the request's transaction and its ``reserve`` frame comes
before the response; the credit is not granted when a finish of the request fails; it
obeys the 2 x capacity bound; a request that drains ignores it."""

from __future__ import annotations

import asyncio

import pytest
from support.lanes import Lane
from support.protocol_client import ProtocolClient

from orbit_wire.frames import DrainOp, FinishOp, Op, Request, Response, StartOp
from orbit_wire.ids import new_id
from orbit_wire.model import Outcome

pytestmark = pytest.mark.asyncio


async def send_request(wc: ProtocolClient, *ops: Op, credit: int | None) -> Response:
    rid = next(wc._ids)
    await wc.send(Request(rid, ops, credit))
    response: Response = await asyncio.wait_for(wc.responses.get(), 10)
    assert response.id == rid
    return response


async def test_finish_with_credit_reserves_before_the_response(lane: Lane) -> None:
    first, second = lane.submit(payload={"i": 1}), lane.submit(payload={"i": 2})
    async with await lane.connect(capacity=1, credit=1) as wc:
        [r1] = await wc.reservations(1)
        assert (await wc.start(r1)).ok
        wc.order.clear()
        finish = wc.finish_op(r1, "SUCCEEDED", result_json='{"ok":1}')
        response = await send_request(wc, finish, credit=1)
        assert all(r.ok for r in response.results)
        assert wc.order == ["reserve", "response"]
        [r2] = await wc.reservations(1)
        assert {r1.task_id, r2.task_id} == {first["id"], second["id"]}
        assert (await wc.start(r2)).ok
        assert await wc.no_reservation(0.3)  # the credit was spent by the claim
    assert lane.task(r1.task_id)["state"] == "SUCCEEDED"


async def test_credit_is_not_granted_when_a_finish_fails(lane: Lane) -> None:
    lane.submit()
    async with await lane.connect(capacity=2) as wc:
        unknown = FinishOp(wc.msg_id(), new_id(7), 1, Outcome.SUCCEEDED, result_json="1")
        response = await send_request(wc, unknown, credit=2)
        assert not response.results[0].ok
        assert await wc.no_reservation(0.4)  # no credit: nothing reserved, later either
        await wc.credit(1)  # credit granted the usual way still works
        assert len(await wc.reservations(1)) == 1


async def test_request_credit_obeys_twice_capacity(lane: Lane) -> None:
    async with await lane.connect(capacity=1, credit=2) as wc:
        await wc.send(Request(1, (StartOp(wc.msg_id(), new_id(1), 1),), 1))
        assert await wc.expect_fatal("LIMIT_EXCEEDED") == 4004


async def test_a_draining_request_ignores_its_credit(lane: Lane) -> None:
    lane.submit()
    async with await lane.connect(capacity=2) as wc:
        response = await send_request(wc, DrainOp(wc.msg_id()), credit=2)
        assert response.results[0].ok
        assert await wc.no_reservation(0.4)

