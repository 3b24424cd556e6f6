"""A producer on one replica waits for a task a worker finishes through another (two replicas
on one MariaDB database): the result reaches the wait within the shared-database re-read,
0.5 s (docs/deployment.md), over an HTTP long poll and over the producer channel alike.

Each delay is measured from the worker's finish being answered (the task is committed
SUCCEEDED) to the wait's answer; the bound adds generous slack for a loaded machine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.orbit_http import bearer_of, expect, http_client, new_credential, new_queue, task_spec
from support.protocol_client import ProtocolClient
from support.server import ServerProcess, replica_pair
from support.waiting import UNIT

from orbit_client import Credentials, OrbitClient
from orbit_server.submitting import SHARED_RECHECK_S

pytestmark = pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True)

ROUNDS = 3
SLACK_S = 1.0


async def test_a_result_finished_on_another_replica_reaches_the_wait_within_the_recheck(
        server_factory: Callable[..., ServerProcess]) -> None:
    a, b, admin = replica_pair(server_factory, admin_on=1, session_ttl_ms=10_000)
    with http_client(b.url, admin.bearer) as admin_b:
        queue = new_queue(admin_b)
        made = new_credential(admin_b, "producer", [queue])
        worker = new_credential(admin_b, "worker", [queue])
    bearer = bearer_of(made)
    producer = Credentials(b.url, made["credential_id"], made["secret"], "producer", (queue,))
    delays: dict[str, list[float]] = {"http": [], "channel": []}
    with http_client(b.url, bearer) as prod_b, OrbitClient(credentials=producer) as client:
        async with await ProtocolClient.connect(a.ws_url) as wc:
            await wc.hello(worker["credential_id"], worker["secret"], queue)
            for _ in range(ROUNDS):
                for way in delays:
                    task = expect(prod_b.post(f"/v1/queues/{queue}/tasks", json=task_spec()),
                                  201)
                    await wc.credit(1)
                    [res] = await wc.reservations(1)
                    assert (await wc.start(res)).ok
                    waiting = asyncio.get_running_loop().run_in_executor(
                        None, _wait, way, prod_b, client, task["id"])
                    await asyncio.sleep(0.2)  # the wait is registered on B
                    assert (await wc.finish(res, "SUCCEEDED", result_json="{}")).ok
                    finished = time.monotonic()
                    view, answered = await waiting
                    assert view["state"] == "SUCCEEDED", view
                    delays[way].append(answered - finished)
    bound = SHARED_RECHECK_S + SLACK_S * UNIT
    for way, measured in delays.items():
        assert max(measured) < bound, (way, measured)


def _wait(way: str, prod_b: Any, client: OrbitClient, task_id: str
          ) -> tuple[dict[str, Any], float]:
    """The task once settled, waited for on replica B ``way``; and when the answer came."""
    if way == "http":
        view = expect(prod_b.get(f"/v1/tasks/{task_id}", params={"wait_ms": 20_000},
                                 timeout=30), 200)
    else:
        view = client.wait(task_id, timeout=20)
    return view, time.monotonic()
