"""Finding 2 of the security review: a principal learns nothing of queues it cannot use.

A producer of queue B asking for anything of queue A gets exactly the answer it gets for an
ID that does not exist (status, code, and the message with the ID masked); the same holds
for a worker of queue B sending ops on queue A's attempts over the WebSocket.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect, task_spec
from support.protocol_client import ProtocolClient

from orbit_wire.frames import FinishOp, RenewOp, StartOp
from orbit_wire.model import Outcome

MISSING = "f" * 32


def _masked(response: httpx.Response) -> tuple[int, Any]:
    """Status and body with every 32-hex ID replaced, so two answers compare as equal."""
    return response.status_code, re.sub(r"[0-9a-f]{32}", "<id>", response.text)


def test_other_queues_tasks_answer_as_missing(orbit: OrbitEnv, lane: Lane) -> None:
    foreign = lane.submit()
    other_queue = orbit.queue()
    stranger = orbit.producer(other_queue)
    probes = [
        ("GET", "/v1/tasks/{id}", None),
        ("GET", "/v1/tasks/{id}?wait_ms=10", None),
        ("GET", "/v1/tasks/{id}/attempts", None),
        ("GET", "/v1/tasks/{id}/audit", None),
        ("POST", "/v1/tasks/{id}/cancel", {}),
        ("POST", "/v1/tasks/{id}/review", {"action": "retry"}),
    ]
    for method, path, body in probes:
        theirs = stranger.request(method, path.format(id=foreign["id"]), json=body)
        missing = stranger.request(method, path.format(id=MISSING), json=body)
        assert theirs.status_code == 404, (path, theirs.text)
        assert _masked(theirs) == _masked(missing), path
        assert lane.queue not in theirs.text
    for method, path, body in [
        ("POST", "/v1/queues/{q}/tasks", task_spec()),
        ("POST", "/v1/queues/{q}/tasks/batch", {"tasks": [task_spec()]}),
        ("GET", "/v1/queues/{q}/stats", None),
    ]:
        theirs = stranger.request(method, path.format(q=lane.queue), json=body)
        missing = stranger.request(method, path.format(q=MISSING), json=body)
        assert theirs.status_code == 404, (path, theirs.text)
        assert _masked(theirs) == _masked(missing), path
    # Nothing changed on the other queue's task.
    assert lane.task(foreign["id"])["state"] == "PENDING"
    assert not expect(lane.producer.get(f"/v1/tasks/{foreign['id']}/audit"),
                      200)["events"][1:]


async def test_other_queues_attempts_answer_as_missing_on_the_websocket(
        orbit: OrbitEnv, lane: Lane) -> None:
    lane.submit()
    async with await lane.connect(credit=1) as owner:
        [res] = await owner.reservations(1)
        assert (await owner.start(res)).ok
        other = orbit.worker_credential(orbit.queue())
        async with await ProtocolClient.connect(lane.ws_url) as intruder:
            await intruder.hello_as(other)
            for make in (
                lambda aid: StartOp(intruder.msg_id(), aid, res.epoch),
                lambda aid: RenewOp(intruder.msg_id(), aid, res.epoch),
                lambda aid: FinishOp(intruder.msg_id(), aid, res.epoch, Outcome.SUCCEEDED,
                                     result_json="1"),
            ):
                theirs = await intruder.one(make(res.attempt_id))
                missing = await intruder.one(make(MISSING))
                assert not theirs.ok and theirs.error_code == missing.error_code == "NOT_FOUND"
                assert (theirs.error_message or "").replace(res.attempt_id, MISSING) == (
                    missing.error_message)
            resumed = await intruder.resume([(res.attempt_id, res.epoch), (MISSING, 1)])
            lost = {a.attempt_id: a.reason for a in resumed.attempts or ()}
            assert lost[res.attempt_id] == lost[MISSING] == "NOT_FOUND"
        # The owner is unaffected.
        done = await owner.finish(res, "SUCCEEDED", result_json='{"ok": 1}')
        assert done.ok and done.task_state == "SUCCEEDED"
