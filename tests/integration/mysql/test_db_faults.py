"""Database faults on MariaDB: killed connections and a database that goes away and comes back.

A real server, a real supervisor and real MariaDB connections; faults are made by KILLing the
server's connections (information_schema.processlist) and by putting the server behind a TCP
proxy that is stopped and started again (the shared MariaDB itself is never stopped).
Clients must only ever see success or a typed, retryable 503 UNAVAILABLE; the server must
reconnect by itself; every task it acknowledged must still finish.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mysql_support import Supervisor, kill_connections, upper_spec, worker_credentials
from sqlalchemy.engine import make_url
from support.orbit_http import OrbitEnv, expect, http_client
from support.proxy import TcpProxy
from support.server import ServerProcess
from support.waiting import UNIT, wait_until

from orbit_wire.model import TaskState

pytestmark = pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True)


def _submit_batches(producer: httpx.Client, queue_id: str, batches: int, size: int,
                    acked: list[str], statuses: list[tuple[int, str | None]]) -> None:
    for b in range(batches):
        specs = [upper_spec(b * size + i) for i in range(size)]
        resp = producer.post(f"/v1/queues/{queue_id}/tasks/batch", json={"tasks": specs})
        code = resp.json().get("error", {}).get("code") if resp.status_code >= 400 else None
        statuses.append((resp.status_code, code))
        if resp.status_code == 201:
            acked.extend(t["id"] for t in resp.json()["tasks"])


def _all_finished(producer: httpx.Client, ids: list[str]) -> Callable[[], bool]:
    pending = list(ids)

    def check() -> bool:
        while pending:
            resp = producer.get(f"/v1/tasks/{pending[-1]}")
            if resp.status_code != 200 or not TaskState(resp.json()["state"]).settled:
                return False
            assert resp.json()["state"] == "SUCCEEDED", resp.json()
            pending.pop()
        return True

    return check


def test_killed_connections_give_503_or_success_and_lose_nothing(
        orbit: OrbitEnv, tmp_path: Path) -> None:
    queue_id = orbit.queue()
    producer = orbit.producer(queue_id)
    creds = worker_credentials(orbit.admin_http, queue_id, orbit.server.url,
                               tmp_path / "worker.json")
    sup = Supervisor(tmp_path, creds, queue_id, orbit.server.url, workers=2).start()
    acked: list[str] = []
    statuses: list[tuple[int, str | None]] = []
    submitter = threading.Thread(target=_submit_batches,
                                 args=(producer, queue_id, 60, 10, acked, statuses))
    killed = 0
    try:
        submitter.start()

        def submitter_done() -> bool:  # killing the server's connections all along
            nonlocal killed
            killed += kill_connections(orbit.server.db_url)
            return not submitter.is_alive()

        wait_until(submitter_done, timeout=90, interval=0.05, what="the submitter to end")
        submitter.join(timeout=60 * UNIT)
        assert not submitter.is_alive()
        assert killed > 0
        # Only success or a typed, retryable error: never a 500 or a dropped connection.
        assert {s for s in statuses if s[0] != 201} <= {(503, "UNAVAILABLE")}, statuses
        assert acked, statuses
        # The server reconnected by itself: a plain request works again at once.
        expect(producer.post(f"/v1/queues/{queue_id}/tasks", json=upper_spec(-1)), 201)
        # Every acknowledged task still runs to its end (workers backed off and came back).
        wait_until(_all_finished(producer, acked), timeout=90, interval=0.1,
                   what="acknowledged tasks finish")
    finally:
        sup.stop()
    # No request failed unexpectedly (the pool may log its own reset of a killed connection).
    log = orbit.server.log_tail(1_000_000)
    assert " ERROR orbit" not in log, log[-4000:]


def test_database_down_then_back(server_factory: Callable[..., ServerProcess],
                                 db_url_factory: Callable[[], str], tmp_path: Path) -> None:
    real = make_url(db_url_factory())
    proxy = TcpProxy(real.port or 3306).start()
    port = proxy.port
    via_proxy = real.set(port=port).render_as_string(hide_password=False)
    srv = server_factory(db_url=via_proxy)
    admin = srv.bootstrap_admin()
    with http_client(srv.url, admin.bearer) as admin_http:
        queue_id = expect(admin_http.post("/v1/queues", json={}), 201)["id"]
        made = expect(admin_http.post("/v1/credentials",
                                      json={"role": "producer", "queues": [queue_id]}), 201)
    producer = http_client(srv.url, f"{made['credential_id']}.{made['secret']}")
    restarted: list[TcpProxy] = []
    try:
        before = expect(producer.post(f"/v1/queues/{queue_id}/tasks", json=upper_spec(1)), 201)
        proxy.stop()  # the database is gone: open connections die, new ones are refused
        started = time.monotonic()
        down = producer.post(f"/v1/queues/{queue_id}/tasks", json=upper_spec(2))
        assert down.status_code == 503, down.text
        error: dict[str, Any] = down.json()["error"]
        assert error["code"] == "UNAVAILABLE" and error.get("retryable") is True, error
        assert "password" not in down.text.lower()
        assert time.monotonic() - started < 15 * UNIT  # a prompt answer, not a hang
        got = producer.get(f"/v1/tasks/{before['id']}")
        assert got.status_code == 503 and got.json()["error"]["code"] == "UNAVAILABLE"
        # The database comes back on the same address: the server reconnects by itself.
        restarted.append(TcpProxy(real.port or 3306, port=port).start())
        wait_until(lambda: producer.post(f"/v1/queues/{queue_id}/tasks",
                                         json=upper_spec(3)).status_code == 201,
                   timeout=20, interval=0.1, what="submit works again after the database returned")
        # What it acknowledged before the outage is still there.
        assert expect(producer.get(f"/v1/tasks/{before['id']}"), 200)["state"] == "PENDING"
    finally:
        producer.close()
        srv.stop()
        for p in restarted:
            p.stop()
        proxy.stop()
