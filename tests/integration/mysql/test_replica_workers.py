"""Two orbit-server replicas on one MariaDB database: each lists the workers connected to
either (GET /v1/workers reads the instance rows every replica keeps current)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from support.orbit_http import expect, http_client, new_credential, new_queue
from support.protocol_client import ProtocolClient
from support.server import ServerProcess, replica_pair
from support.waiting import wait_until

pytestmark = pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True)


def _worker_ids(url: str, bearer: str) -> dict[str, dict[str, Any]]:
    with http_client(url, bearer) as client:
        return {w["instance_id"]: w for w in expect(client.get("/v1/workers"), 200)["workers"]}


def test_workers_of_two_replicas_on_one_database(
        server_factory: Callable[..., ServerProcess]) -> None:
    a, b, admin = replica_pair(server_factory)
    with http_client(a.url, admin.bearer) as admin_http:
        queue_id = new_queue(admin_http)
        made = new_credential(admin_http, "worker", [queue_id])

    async def run() -> None:
        async with await ProtocolClient.connect(a.ws_url) as wa, \
                await ProtocolClient.connect(b.ws_url) as wb:
            await wa.hello(made["credential_id"], made["secret"], queue_id)
            await wb.hello(made["credential_id"], made["secret"], queue_id, capacity=2)
            for url in (a.url, b.url):  # each replica lists both
                workers = _worker_ids(url, admin.bearer)
                assert set(workers) == {wa.instance_id, wb.instance_id}
                assert workers[wa.instance_id]["replica"].endswith(f":{a.port}")
                assert workers[wb.instance_id]["replica"].endswith(f":{b.port}")
            await wb.close()
            wait_until(lambda: set(_worker_ids(a.url, admin.bearer)) == {wa.instance_id},
                       timeout=10, what="B's closed worker leaving A's list")

    asyncio.run(run())
