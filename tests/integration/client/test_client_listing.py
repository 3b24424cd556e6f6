"""The operator's lists through OrbitClient against real orbit-server processes: a queue's
tasks page by page, the queues with their counts, and the live workers, connected through
the WebSocket (two replicas on one database: tests/integration/mysql/test_replica_workers.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.orbit_http import OrbitEnv, expect, expect_error, http_client
from support.protocol_client import ECHO, ProtocolClient
from support.waiting import wait_until

from orbit_client import OrbitApiError, OrbitClient
from orbit_wire.errors import ErrorCode


def spec(handler: str = ECHO.handler, **extra: Any) -> dict[str, Any]:
    return {"handler": handler, "handler_version": "v1", "payload_version": "v1",
            "payload": {"n": 1}, **extra}


def test_tasks_and_queues_through_the_client(orbit: OrbitEnv) -> None:
    queue_id = orbit.queue("jobs")
    with OrbitClient(orbit.server.url, orbit.admin) as admin:
        made = [t["id"] for t in admin.submit_batch(queue_id, [spec() for _ in range(12)])]
        typo = admin.submit(queue_id, spec(handler="test.ehco"))
        assert typo["waiting"]["reason"] == "NO_LIVE_WORKER"
        assert typo["waiting"]["capability"]["handler"] == "test.ehco"
        first = admin.list_tasks(queue_id, limit=5)
        assert [t["id"] for t in first["tasks"]] == [typo["id"], *made[::-1][:4]]
        assert first["next_cursor"]
        walked = list(admin.iter_tasks(queue_id, order="oldest", limit=4))
        assert [t["id"] for t in walked] == [*made, typo["id"]]
        assert [t["id"] for t in admin.iter_tasks(queue_id, max_tasks=3)] == \
            [typo["id"], *made[::-1][:2]]
        only = admin.list_tasks(queue_id, state=["pending"], handler="test.ehco")
        assert [t["id"] for t in only["tasks"]] == [typo["id"]]
        assert only["tasks"][0]["waiting"]["since"] == typo["created_at_ms"]
        assert admin.list_tasks(queue_id, state="SUCCEEDED") == {"tasks": [],
                                                                  "next_cursor": None}
        queues = admin.list_queues()["queues"]
        mine = [q for q in queues if q["queue_id"] == queue_id]
        assert mine and mine[0]["name"] == "jobs" and mine[0]["counts"]["PENDING"] == 13
        with pytest.raises(OrbitApiError) as exc:
            admin.list_tasks(queue_id, state="DONE")  # refused before sending
        assert exc.value.code is ErrorCode.BAD_REQUEST
        stats = admin.queue_stats(queue_id)
        by_handler = {c["capability"]["handler"]: c for c in stats["capabilities"]}
        assert by_handler["test.ehco"]["pending"] == 1
        assert by_handler["test.ehco"]["live_workers"] == 0
    # Over plain HTTP: bad parameters are typed errors; a producer sees only its queue.
    expect_error(orbit.admin_http.get(f"/v1/queues/{queue_id}/tasks",
                                      params={"cursor": "abc"}), 400, "BAD_REQUEST")
    expect_error(orbit.admin_http.get("/v1/workers", params={"queue": "x"}), 400,
                 "BAD_REQUEST")
    other = orbit.queue("other")
    producer = orbit.producer(queue_id)
    listed = expect(producer.get("/v1/queues"), 200)["queues"]
    assert [q["queue_id"] for q in listed] == [queue_id]
    # Another queue answers exactly as one that does not exist (docs/security.md).
    expect_error(producer.get(f"/v1/queues/{other}/tasks"), 404, "NOT_FOUND")


def _worker_ids(url: str, bearer: str) -> dict[str, dict[str, Any]]:
    with http_client(url, bearer) as client:
        return {w["instance_id"]: w for w in expect(client.get("/v1/workers"), 200)["workers"]}


def test_live_workers_with_running_attempts(orbit: OrbitEnv) -> None:
    queue_id = orbit.queue()
    cred = orbit.worker_credential(queue_id)
    url, bearer = orbit.server.url, orbit.admin.bearer

    async def run() -> None:
        async with await ProtocolClient.connect(orbit.server.ws_url) as wc:
            await wc.hello_as(cred, capacity=3, agent="orbit-supervise/0.1.0")
            seen = _worker_ids(url, bearer)[wc.instance_id]
            assert seen["slots"] == 3 and seen["version"] == "orbit-supervise/0.1.0"
            assert seen["capabilities"] == [ECHO.to_dict()] and seen["running"] == []
            assert seen["replica"].endswith(f":{orbit.server.port}")
            with OrbitClient(url, orbit.admin) as admin:
                task = admin.submit(queue_id, spec())
                assert task["waiting"] is None  # a live worker offers its capability
                await wc.credit(2)
                [res] = await wc.reservations(1)
                assert (await wc.start(res, child_pid=777)).ok
                running = admin.list_workers(queue_id)["workers"][0]["running"]
                assert running == [{"task_id": task["id"], "attempt_id": res.attempt_id,
                                    "child_pid": 777, "running_ms": running[0]["running_ms"]}]
                # The presence write records the credit left (2 granted, 1 spent).
                wait_until(lambda: admin.list_workers()["workers"][0]["credit"] == 1,
                           timeout=10, what="the credit in the presence write")
        wait_until(lambda: wc.instance_id not in _worker_ids(url, bearer), timeout=10,
                   what="the closed connection leaving the list")

    asyncio.run(run())
