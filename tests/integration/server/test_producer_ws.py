"""The producer channel (/v1/producer, orbit_wire/producer_frames.py) against a real server,
spoken with a raw WebSocket: submits answered once committed (pipelined, by id), the views
of watched tasks pushed once when they settle, the roles and budgets of HTTP, typed errors
that fail one request or, without an id, the channel; and ``POST .../tasks?wait_ms=``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from support.lanes import Lane
from support.orbit_http import expect, expect_error, task_spec
from support.waiting import UNIT

from orbit_wire.producer_frames import (
    Ended,
    ProducerError,
    ServerMessage,
    Submit,
    Submitted,
    Watch,
    Watching,
    decode_server_message,
    encode_message,
)

pytestmark = pytest.mark.asyncio
TIMEOUT = 10 * UNIT


class Channel:
    """One producer channel; messages sorted into answers by id and pushes."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.answers: dict[int, asyncio.Future[ServerMessage]] = {}
        self.ended: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.failures: asyncio.Queue[ProducerError] = asyncio.Queue()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for data in self.ws:
                msg = decode_server_message(data)
                if isinstance(msg, Ended):
                    self.ended.put_nowait(msg.task)
                elif isinstance(msg, ProducerError) and msg.id is None:
                    self.failures.put_nowait(msg)
                else:
                    assert isinstance(msg, Submitted | Watching | ProducerError)
                    self.answers.setdefault(msg.id, asyncio.Future()).set_result(msg)

    async def ask(self, msg: Submit | Watch) -> ServerMessage:
        fut = self.answers.setdefault(msg.id, asyncio.Future())
        await self.ws.send(encode_message(msg).decode())
        return await asyncio.wait_for(fut, TIMEOUT)

    async def next_ended(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.ended.get(), TIMEOUT)


@contextlib.asynccontextmanager
async def channel(url: str, bearer: str) -> AsyncIterator[Channel]:
    async with websockets.connect(url.replace("http", "ws", 1) + "/v1/producer",
                                  additional_headers={"Authorization": f"Bearer {bearer}"},
                                  open_timeout=TIMEOUT) as ws:
        ch = Channel(ws)
        try:
            yield ch
        finally:
            ch._reader.cancel()


def bearer(lane: Lane) -> str:
    return lane.producer_credentials.bearer


async def test_submits_are_answered_and_their_results_pushed(lane: Lane) -> None:
    async with channel(lane.env.server.url, bearer(lane)) as ch, \
            await lane.connect(capacity=2, credit=2, features=("grant",)) as wc:
        answer = await ch.ask(Submit(1, lane.queue, (task_spec(payload={"i": 1}),)))
        assert isinstance(answer, Submitted)
        (view,) = answer.tasks
        assert view["queue_id"] == lane.queue and view["state"] in ("PENDING", "RUNNING")
        [res] = await wc.reservations(1)
        assert res.task_id == view["id"]
        assert (await wc.finish(res, "SUCCEEDED", result_json='{"n": 1.50}')).ok
        ended = await ch.next_ended()
        assert ended["id"] == view["id"] and ended["state"] == "SUCCEEDED"
        assert ended["result"] == {"n": 1.5}  # the view as GET answers it


async def test_pipelined_submits_are_answered_by_id(lane: Lane) -> None:
    async with channel(lane.env.server.url, bearer(lane)) as ch:
        asks = [ch.ask(Submit(i, lane.queue, (task_spec(payload={"i": i}),), watch=False))
                for i in range(1, 21)]
        answers = await asyncio.gather(*asks)
        for i, answer in enumerate(answers, start=1):
            assert isinstance(answer, Submitted) and answer.id == i
            assert answer.tasks[0]["payload"] == {"i": i}
        batch = await ch.ask(Submit(99, lane.queue, tuple(task_spec() for _ in range(3))))
        assert isinstance(batch, Submitted) and len(batch.tasks) == 3
    made = {t["id"] for a in answers for t in a.tasks}  # type: ignore[attr-defined]
    assert len(made) == 20


async def test_a_resent_submit_with_its_operation_key_makes_no_second_task(lane: Lane) -> None:
    spec = task_spec(operation_key="op-resent-1")
    async with channel(lane.env.server.url, bearer(lane)) as ch:
        first = await ch.ask(Submit(1, lane.queue, (spec,)))
    async with channel(lane.env.server.url, bearer(lane)) as ch:
        again = await ch.ask(Submit(1, lane.queue, (spec,)))
    assert isinstance(first, Submitted) and isinstance(again, Submitted)
    assert first.tasks[0]["id"] == again.tasks[0]["id"]


async def test_a_watch_pushes_a_settled_task_at_once_and_names_unknown_ones(
        lane: Lane) -> None:
    done = lane.submit()
    pending = lane.submit()
    async with await lane.connect(capacity=1, credit=1) as wc:
        [res] = await wc.reservations(1)
        assert (await wc.start(res)).ok
        assert (await wc.finish(res, "SUCCEEDED", result_json="1")).ok
    finished = res.task_id
    waiting = pending["id"] if res.task_id == done["id"] else done["id"]
    other_lane = Lane.open(lane.env)
    stranger = other_lane.submit()
    async with channel(lane.env.server.url, bearer(lane)) as ch:
        answer = await ch.ask(Watch(7, (finished, waiting, stranger["id"], "f" * 32)))
        assert isinstance(answer, Watching)
        # Another queue's task answers exactly as one that does not exist.
        assert set(answer.unknown) == {stranger["id"], "f" * 32}
        assert (await ch.next_ended())["id"] == finished
        expect(lane.producer.post(f"/v1/tasks/{waiting}/cancel", json={}), 200)
        cancelled = await ch.next_ended()
        assert cancelled["id"] == waiting and cancelled["state"] == "CANCELLED"
        assert ch.ended.empty()  # each once


async def test_a_bad_message_fails_the_channel_with_a_typed_error(lane: Lane) -> None:
    async with channel(lane.env.server.url, bearer(lane)) as ch:
        await ch.ws.send('{"type": "teleport", "id": 1}')
        failure = await asyncio.wait_for(ch.failures.get(), TIMEOUT)
        assert failure.error.code == "UNKNOWN_FRAME_TYPE"
        await asyncio.wait_for(ch.ws.wait_closed(), TIMEOUT)
        assert ch.ws.close_code == 4001


async def test_a_refused_submit_fails_only_that_request(lane: Lane) -> None:
    async with channel(lane.env.server.url, bearer(lane)) as ch:
        refused = await ch.ask(Submit(1, lane.queue, ({"handler": "x"},)))
        assert isinstance(refused, ProducerError) and refused.error.code == "BAD_REQUEST"
        elsewhere = await ch.ask(Submit(2, "e" * 32, (task_spec(),)))
        assert isinstance(elsewhere, ProducerError) and elsewhere.error.code == "NOT_FOUND"
        fine = await ch.ask(Submit(3, lane.queue, (task_spec(),)))
        assert isinstance(fine, Submitted)


@pytest.mark.parametrize("who", ["worker", "nobody", "wrong-secret"])
async def test_only_producers_and_admins_open_a_channel(lane: Lane, who: str) -> None:
    token = {"worker": f"{lane.worker.credential_id}.{lane.worker.secret}",
             "nobody": "", "wrong-secret": f"{lane.producer_credentials.credential_id}.x"}[who]
    async with channel(lane.env.server.url, token) as ch:
        failure = await asyncio.wait_for(ch.failures.get(), TIMEOUT)
        assert failure.error.code in {"worker": "PERMISSION_DENIED"}.get(
            who, "UNAUTHENTICATED"), failure
        await asyncio.wait_for(ch.ws.wait_closed(), TIMEOUT)
        assert ch.ws.close_code == 4006
    async with channel(lane.env.server.url, lane.env.admin.bearer) as ch:
        assert isinstance(await ch.ask(Submit(1, lane.queue, (task_spec(),))), Submitted)


async def test_a_revocation_closes_the_channel(lane: Lane) -> None:
    made = lane.env.credential("producer", [lane.queue])
    token = f"{made['credential_id']}.{made['secret']}"
    async with channel(lane.env.server.url, token) as ch:
        assert isinstance(await ch.ask(Submit(1, lane.queue, (task_spec(),))), Submitted)
        expect(lane.env.admin_http.delete(f"/v1/credentials/{made['credential_id']}"), 200)
        failure = await asyncio.wait_for(ch.failures.get(), TIMEOUT)
        assert failure.error.code == "UNAUTHENTICATED"
        await asyncio.wait_for(ch.ws.wait_closed(), TIMEOUT)
        assert ch.ws.close_code == 4006


async def test_submits_spend_the_http_budget(server_factory: Any) -> None:
    srv = server_factory(extra_args=("--submits-per-s", "1", "--submits-burst", "2"))
    admin = srv.admin()
    with httpx.Client(base_url=srv.url, headers={
            "Authorization": f"Bearer {admin.bearer}"}, timeout=TIMEOUT) as http:
        queue = expect(http.post("/v1/queues", json={}), 201)["id"]
        expect(http.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 201)
        async with channel(srv.url, admin.bearer) as ch:
            assert isinstance(await ch.ask(Submit(1, queue, (task_spec(),))), Submitted)
            limited = await ch.ask(Submit(2, queue, (task_spec(),)))
            assert isinstance(limited, ProducerError)
            assert limited.error.code == "RATE_LIMITED" and limited.error.retryable
        expect_error(http.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 429,
                     "RATE_LIMITED")


async def test_an_http_submit_may_wait_for_its_result(lane: Lane) -> None:
    async with await lane.connect(capacity=1, credit=1, features=("grant",)) as wc:
        async def work() -> None:
            [res] = await wc.reservations(1)
            assert (await wc.finish(res, "SUCCEEDED", result_json='"done"')).ok

        worker = asyncio.get_running_loop().create_task(work())
        answer = await asyncio.to_thread(
            lane.producer.post, f"/v1/queues/{lane.queue}/tasks",
            params={"wait_ms": int(TIMEOUT * 1000)}, json=task_spec())
        await asyncio.wait_for(worker, TIMEOUT)
    view = expect(answer, 201)
    assert view["state"] == "SUCCEEDED" and view["result"] == "done"
    # The wait ends at wait_ms with the state then; bad waits are refused as for GET.
    quick = expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks",
                                      params={"wait_ms": 50}, json=task_spec()), 201)
    assert quick["state"] == "PENDING"
    expect_error(lane.producer.post(f"/v1/queues/{lane.queue}/tasks",
                                    params={"wait_ms": 60_001}, json=task_spec()),
                 400, "BAD_REQUEST")
