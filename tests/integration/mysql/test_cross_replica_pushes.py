"""Cross-replica pushes: two replicas on one MariaDB database; a worker is connected to
replica A, the producer and the admin talk to replica B.

A cancel made through B reaches the worker on A as a ``cancel`` frame within one
heartbeat (not only at its next renew), and a revocation made through B closes the
worker's session on A within one heartbeat (fatal UNAUTHENTICATED, close 4006).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from support.orbit_http import bearer_of, expect, http_client, new_credential, new_queue, task_spec
from support.protocol_client import ProtocolClient
from support.server import ServerProcess, replica_pair
from support.waiting import UNIT

pytestmark = pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True)


async def test_cancel_and_revocation_reach_a_worker_on_another_replica(
        server_factory: Callable[..., ServerProcess]) -> None:
    a, b, admin = replica_pair(server_factory, admin_on=1, session_ttl_ms=3000)
    with http_client(b.url, admin.bearer) as admin_b:
        queue = new_queue(admin_b)
        producer = new_credential(admin_b, "producer", [queue])
        worker = new_credential(admin_b, "worker", [queue])
        with http_client(b.url, bearer_of(producer)) as prod_b:
            task = expect(prod_b.post(f"/v1/queues/{queue}/tasks",
                                      json=task_spec(lease_ttl_ms=60_000)), 201)
            async with await ProtocolClient.connect(a.ws_url) as wc:
                welcome = await wc.hello(worker["credential_id"], worker["secret"], queue)
                heartbeat_s = welcome.heartbeat_ms / 1000
                await wc.credit(1)
                [res] = await wc.reservations(1)
                assert (await wc.start(res)).ok
                asked = time.monotonic()
                expect(await asyncio.to_thread(prod_b.post, f"/v1/tasks/{task['id']}/cancel"),
                       200)
                cancel = await wc.cancel_push(timeout=heartbeat_s / UNIT)
                took_s = time.monotonic() - asked
                assert (cancel.attempt_id, cancel.epoch) == (res.attempt_id, res.epoch)
                assert took_s <= heartbeat_s * UNIT, took_s

                asked = time.monotonic()
                expect(await asyncio.to_thread(
                    admin_b.delete, f"/v1/credentials/{worker['credential_id']}"), 200)
                code = await wc.wait_closed(timeout=heartbeat_s / UNIT)
                took_s = time.monotonic() - asked
                assert code == 4006, code
                assert took_s <= heartbeat_s * UNIT, took_s
                error = await wc.error(timeout=1)
                assert error.code == "UNAUTHENTICATED" and error.fatal
