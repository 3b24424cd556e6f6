"""A paused capability against a real server, at the worker protocol (docs/flow-control.md
"Pause and resume"): a request's ``claim`` skips it (its slots become credit), a submit that
finds the worker waiting does not reserve it while another capability of the same worker is
still served, and the resume reserves it at once. Event-ordered: a reservation that should
not have been sent arrives before the one checked (``only_reserved``)."""

from __future__ import annotations

import pytest
from support.lanes import Lane
from support.orbit_http import expect
from support.protocol_client import ECHO

from orbit_wire.frames import ClaimOp
from orbit_wire.model import Capability

pytestmark = pytest.mark.asyncio

OTHER = Capability("test.other", "v1", "v1")


async def test_claims_and_submits_skip_a_paused_capability_until_its_resume(
        lane: Lane) -> None:
    expect(lane.producer.post(f"/v1/queues/{lane.queue}/pause",
                              json={"handler": ECHO.handler, "reason": "protocol"}), 200)
    paused = lane.submit()
    async with await lane.connect(capacity=2, capabilities=(ECHO, OTHER)) as wc:
        (claim,) = (await wc.request(ClaimOp(wc.msg_id(), 2))).results
        assert claim.ok and claim.claimed == () and claim.credited == 2
        assert lane.task(paused["id"])["waiting"]["reason"] == "PAUSED"
        served = expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks", json={
            "handler": OTHER.handler, "handler_version": OTHER.handler_version,
            "payload_version": OTHER.payload_version, "payload": {}}), 201)
        await wc.only_reserved(1, among=[served["id"]])
        assert lane.task(paused["id"])["state"] == "PENDING"
        resumed = expect(lane.producer.post(f"/v1/queues/{lane.queue}/resume",
                                            json={"handler": ECHO.handler}), 200)
        assert resumed["resumed"] is True
        await wc.only_reserved(1, among=[paused["id"]])
