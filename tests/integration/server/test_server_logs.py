"""At its default level a real orbit-server says what it is doing: where it listens and on
which database at start, worker connects and disconnects, lease expiries, unserved work,
shutdown; and never a database password."""

from __future__ import annotations

import asyncio

import httpx
from support.orbit_http import OrbitEnv, expect, task_spec
from support.protocol_client import ProtocolClient
from support.waiting import wait_until


def test_default_level_tells_the_story(orbit: OrbitEnv) -> None:
    server = orbit.server
    queue_id = orbit.queue()
    cred = orbit.worker_credential(queue_id)
    producer = orbit.producer(queue_id)

    def log() -> str:
        return server.log_path.read_text(errors="replace")

    start = log()
    assert f"serving on http://127.0.0.1:{server.port}" in start, start
    assert f"dashboard at http://127.0.0.1:{server.port}/ui/" in start, start
    # The root sends a browser to the dashboard.
    root = httpx.get(f"{server.url}/", timeout=10)
    assert (root.status_code, root.headers["location"]) == (302, "ui/")
    page = httpx.get(f"{server.url}/", timeout=10, follow_redirects=True)
    assert page.status_code == 200 and str(page.url) == f"{server.url}/ui/"
    assert "text/html" in page.headers["content-type"]
    assert "database " in start and "latest schema" in start, start

    async def run() -> str:
        async with await ProtocolClient.connect(server.ws_url) as wc:
            await wc.hello_as(cred, agent="orbit-supervise/test")
            wait_until(lambda: f"worker {wc.instance_id} connected" in log(), timeout=10,
                       what="the connect line")
            task = expect(producer.post(f"/v1/queues/{queue_id}/tasks",
                                        json=task_spec(lease_ttl_ms=200)), 201)
            await wc.credit(1)
            [res] = await wc.reservations(1)
            assert (await wc.start(res)).ok  # and never renewed: the lease lapses
            wait_until(lambda: f"lease of attempt {res.attempt_id}" in log(), timeout=20,
                       what="the lease expiry line")
            assert task["id"] in log()
            return wc.instance_id

    instance_id = asyncio.run(run())
    wait_until(lambda: f"worker {instance_id} disconnected" in log(), timeout=10,
               what="the disconnect line")
    server.stop()
    end = log()
    assert "shutting down" in end and "orbit-server stopped" in end, end[-2000:]
    assert "Traceback" not in end, end[-2000:]
