"""Findings 4 and 5 of the security review (the parts done in the ASGI layer): failed
authentications are rate limited per credential ID and per peer (429 RATE_LIMITED with
Retry-After; over the WebSocket a retryable RATE_LIMITED), submits per credential, worker
connections per credential, and a WebSocket that never says hello is closed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from support.orbit_http import OrbitEnv, expect, http_client, task_spec
from support.protocol_client import ECHO, ProtocolClient
from support.server import ServerProcess

from orbit_wire.frames import Hello


def test_failed_authentications_are_limited(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    made = orbit.credential("producer", [queue])
    wrong = orbit.client(f"{made['credential_id']}.{'0' * 64}")
    statuses = [wrong.get(f"/v1/queues/{queue}/stats").status_code for _ in range(40)]
    assert statuses[0] == 401 and 429 in statuses, statuses
    limited = wrong.get(f"/v1/queues/{queue}/stats")
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    assert limited.json()["error"]["code"] == "RATE_LIMITED"
    # The right secret from another peer still works... and from this peer too: the
    # per-peer bucket counts failures, and the right token is cached or verified once.
    right = orbit.client(f"{made['credential_id']}.{made['secret']}")
    status = right.get(f"/v1/queues/{queue}/stats").status_code
    assert status in (200, 429), status


def test_submits_and_sessions_per_credential_are_limited(
        server_factory: Callable[..., ServerProcess]) -> None:
    srv = server_factory(extra_args=("--submits-per-s", "1", "--submits-burst", "3",
                                     "--max-sessions-per-credential", "1",
                                     "--hello-timeout-ms", "500"))
    admin = srv.bootstrap_admin()
    with http_client(srv.url, admin.bearer) as http:
        env = OrbitEnv(srv, admin, http)
        queue = env.queue()
        producer = env.producer(queue)
        codes = [producer.post(f"/v1/queues/{queue}/tasks", json=task_spec()).status_code
                 for _ in range(6)]
        assert codes[:3] == [201, 201, 201] and 429 in codes[3:], codes
        batch = producer.post(f"/v1/queues/{queue}/tasks/batch",
                              json={"tasks": [task_spec()] * 10})
        assert batch.status_code == 429 and batch.headers.get("Retry-After")
        worker = env.worker_credential(queue)
        async def sessions() -> None:
            async with await ProtocolClient.connect(srv.ws_url) as first:
                await first.hello_as(worker)
                second = await ProtocolClient.connect(srv.ws_url)
                try:
                    await second.send(Hello(worker.credential_id, worker.secret,
                                            second.instance_id, second.instance_secret,
                                            queue, (ECHO,), 1))
                    error = await second.error()
                    assert error.code == "RATE_LIMITED" and error.retryable
                    assert await second.wait_closed() == 4012
                finally:
                    await second.close()
                # The refused hello left no instance behind: only the first is live.
                listed = expect(http.get("/v1/workers", params={"queue_id": queue}), 200)
                assert [w["instance_id"] for w in listed["workers"]] == [first.instance_id]
                silent = await ProtocolClient.connect(srv.ws_url)
                try:
                    assert await silent.wait_closed(timeout=5) == 4008
                finally:
                    await silent.close()
                await first.heartbeat()  # the first session is unaffected

        asyncio.run(sessions())
        env.close()



def test_one_failed_login_budget_for_tasks_schedules_and_hellos(
        server_factory: Callable[..., ServerProcess]) -> None:
    # A budget of 3 that does not refill while the test runs.
    srv = server_factory(extra_args=("--auth-failures-burst", "3",
                                     "--auth-failures-per-s", "0.001"))
    admin = srv.bootstrap_admin()
    with http_client(srv.url, admin.bearer) as http:
        env = OrbitEnv(srv, admin, http)
        queue = env.queue()
        worker = env.worker_credential(queue)
        # One made-up secret for the worker's credential, on three doors.
        wrong = env.client(f"{worker.credential_id}.{'0' * 64}")
        task_route, schedule_route = f"/v1/tasks/{'0' * 32}", f"/v1/schedules/{'0' * 32}"

        async def hello() -> str:
            async with await ProtocolClient.connect(srv.ws_url) as wc:
                await wc.send(Hello(worker.credential_id, "0" * 64, wc.instance_id,
                                    wc.instance_secret, queue, (ECHO,), 1))
                return (await wc.error()).code

        assert wrong.get(schedule_route).status_code == 401
        assert wrong.get(task_route).status_code == 401
        assert asyncio.run(hello()) == "UNAUTHENTICATED"
        # The three failures spent the one budget: every door now refuses at once.
        assert wrong.get(task_route).status_code == 429
        assert wrong.get(schedule_route).status_code == 429
        assert asyncio.run(hello()) == "RATE_LIMITED"
        env.close()
