"""The typed producer API against a real orbit-server, with a protocol worker finishing the
tasks: ``submit(TaskType, payload, ...)`` answers a ``Task``; ``result`` answers the result
or raises TaskFailed, TaskNeedsReview, TaskCancelled, TaskTimeout; the async twins agree;
the dict API still works beside it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import lanes
from support.orbit_http import OrbitEnv
from support.protocol_client import ECHO, ProtocolClient

from orbit_client import (
    AsyncOrbitClient,
    OrbitApiError,
    OrbitClient,
    Task,
    TaskCancelled,
    TaskFailed,
    TaskNeedsReview,
    TaskTimeout,
    TaskType,
)
from orbit_wire.errors import ErrorCode
from orbit_wire.model import TaskState

ECHO_TYPE: TaskType[dict[str, Any], dict[str, Any]] = TaskType(
    ECHO.handler, ECHO.handler_version, ECHO.payload_version)
NO_BACKOFF = {"initial_ms": 0, "max_ms": 0, "jitter": 0.0}


class Lane:
    """A queue with a producer client (on a credentials file) and a worker credential."""

    def __init__(self, orbit: OrbitEnv, tmp_path: Path) -> None:
        lane = lanes.Lane.open(orbit, "typed")
        self.env = orbit
        self.queue = lane.queue
        self.producer_file = lane.credentials_file(tmp_path / "producer.json")
        self.producer = OrbitClient(credentials=self.producer_file)
        self.worker = lane.worker

    def close(self) -> None:
        self.producer.close()


@pytest.fixture
def lane(orbit: OrbitEnv, tmp_path: Path) -> Iterator[Lane]:
    made = Lane(orbit, tmp_path)
    try:
        yield made
    finally:
        made.close()


async def _finish_next(lane: Lane, task_id: str, outcome: str, **finish: Any) -> None:
    async with await ProtocolClient.connect(lane.env.server.ws_url) as wc:
        await wc.hello_as(lane.worker, capacity=1)
        await wc.credit(1)
        [res] = await wc.reservations(1)
        assert res.task_id == task_id
        assert (await wc.start(res)).ok
        assert (await wc.finish(res, outcome, **finish)).ok


async def test_typed_submit_and_result(lane: Lane) -> None:
    # The credential's only queue is the default.
    task = await asyncio.to_thread(lane.producer.submit, ECHO_TYPE, {"text": "hi"},
                                   idempotent=True, priority=7, operation_key="typed-1")
    assert isinstance(task, Task)
    assert task.state is TaskState.PENDING and task.queue_id == lane.queue
    assert task.capability == ECHO_TYPE.capability and task.priority == 7
    assert task.view["policy"]["idempotency"] == "IDEMPOTENT"
    await _finish_next(lane, task.id, "SUCCEEDED", result_json='{"text":"HI","n":1.10}')
    result = await asyncio.to_thread(lane.producer.result, task, 10)
    assert result == {"text": "HI", "n": 1.1}
    done = await asyncio.to_thread(lane.producer.task, task.id)
    assert done.state is TaskState.SUCCEEDED and done.result_json == '{"text":"HI","n":1.10}'
    # The same operation key with the same spec answers the same task; with another spec it
    # is a typed conflict naming the task.
    again = await asyncio.to_thread(lane.producer.submit, ECHO_TYPE, {"text": "hi"},
                                    idempotent=True, priority=7, operation_key="typed-1")
    assert again.id == task.id
    with pytest.raises(OrbitApiError) as conflict:
        await asyncio.to_thread(lane.producer.submit, ECHO_TYPE, {"text": "other"},
                                operation_key="typed-1")
    assert conflict.value.code is ErrorCode.CONFLICT and task.id in str(conflict.value)


async def test_failed_needs_review_cancelled_and_timeout_are_typed_errors(lane: Lane) -> None:
    p = lane.producer
    failed = await asyncio.to_thread(p.submit, ECHO_TYPE, {"n": 1})
    await _finish_next(lane, failed.id, "FAILED", code="OBJECT_REJECTED",
                       details_json='{"field":"n"}')
    with pytest.raises(TaskFailed) as info:
        await asyncio.to_thread(p.result, failed, 10)
    assert info.value.code == "OBJECT_REJECTED" and info.value.details == {"field": "n"}
    assert info.value.task.id == failed.id

    uncertain = await asyncio.to_thread(p.submit, ECHO_TYPE, {"n": 2})  # NON_IDEMPOTENT
    await _finish_next(lane, uncertain.id, "UNKNOWN", code="HANDLER_ERROR")
    with pytest.raises(TaskNeedsReview):
        await asyncio.to_thread(p.result, uncertain.id, 10)

    waiting = await asyncio.to_thread(p.submit, ECHO_TYPE, {"n": 3}, delay_ms=3_600_000)
    assert waiting.next_attempt_at_ms == waiting.created_at_ms + 3_600_000
    with pytest.raises(TaskTimeout) as timed:
        await asyncio.to_thread(p.result, waiting, 0.2)
    assert isinstance(timed.value, TimeoutError)
    assert timed.value.task.state is TaskState.PENDING
    await asyncio.to_thread(p.cancel, waiting.id)
    with pytest.raises(TaskCancelled):
        await asyncio.to_thread(p.result, waiting, 10)


async def test_async_twins(lane: Lane) -> None:
    async with AsyncOrbitClient(credentials=lane.producer_file) as p:
        task = await p.submit(ECHO_TYPE, {"a": 1}, max_attempts=1, backoff=NO_BACKOFF)
        assert isinstance(task, Task) and task.view["policy"]["max_attempts"] == 1
        await _finish_next(lane, task.id, "SUCCEEDED", result_json='{"ok":true}')
        assert await p.result(task, 10) == {"ok": True}
        assert (await p.task(task.id)).state is TaskState.SUCCEEDED
        cancelled = await p.submit(ECHO_TYPE, {"a": 2}, delay_ms=60_000)
        await p.cancel(cancelled.id)
        with pytest.raises(TaskCancelled):
            await p.result(cancelled.id, 5)
        with pytest.raises(TaskTimeout):
            await p.result((await p.submit(ECHO_TYPE, {"a": 3}, delay_ms=60_000)), 0.1)
        # The dict API is unchanged beside it.
        plain = await p.submit(lane.queue, ECHO_TYPE.spec({"a": 4}))
        assert isinstance(plain, dict) and plain["state"] == "PENDING"


def test_typed_submit_refusals_are_local(lane: Lane, orbit: OrbitEnv) -> None:
    p = lane.producer
    for bad in ({"priority": 10}, {"delay_ms": -1}, {"eta": 5},
                {"delay_ms": 1, "not_before": 5}):
        with pytest.raises(OrbitApiError) as info:
            p.submit(ECHO_TYPE, {"n": 1}, **bad)
        assert info.value.code.value == "BAD_REQUEST" and info.value.status is None
    with pytest.raises(OrbitApiError, match="options"):
        p.submit(lane.queue, ECHO_TYPE.spec({"n": 1}), priority=3)  # type: ignore[call-overload]
    # An admin credential is not scoped to one queue: the queue must be named.
    with OrbitClient(credentials=orbit.admin) as admin:
        with pytest.raises(OrbitApiError, match="which queue"):
            admin.submit(ECHO_TYPE, {"n": 1})
        made = admin.submit(ECHO_TYPE, {"n": 1}, queue=lane.queue)
        assert made.queue_id == lane.queue
    with OrbitClient(credentials=orbit.admin, queue=lane.queue) as admin:
        assert admin.submit(ECHO_TYPE, {"n": 1}).queue_id == lane.queue
