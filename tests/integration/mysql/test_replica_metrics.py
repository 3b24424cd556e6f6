"""Two replicas on one MariaDB database: the tasks-by-state gauge (from the database) is the
same on both; the submit counters are each replica's own and add up."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.metrics import scrape, value
from support.orbit_http import bearer_of, expect, http_client, new_credential, new_queue, task_spec
from support.server import ServerProcess, replica_pair

pytestmark = pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True)


def test_database_series_agree_and_replica_series_add_up(
        server_factory: Callable[..., ServerProcess]) -> None:
    a, b, admin = replica_pair(server_factory)
    with http_client(a.url, admin.bearer) as admin_http:
        queue = new_queue(admin_http, "shared")
        made = new_credential(admin_http, "producer", [queue])
    bearer = bearer_of(made)
    for server, count in ((a, 3), (b, 2)):
        with http_client(server.url, bearer) as producer:
            for _ in range(count):
                expect(producer.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 201)
    _, on_a = scrape(f"{a.url}/metrics")
    _, on_b = scrape(f"{b.url}/metrics")
    for samples in (on_a, on_b):
        assert value(samples, "orbit_tasks", queue=queue, state="PENDING") == 5
        assert value(samples, "orbit_queue_info", queue=queue, name="shared") == 1
    assert value(on_a, "orbit_tasks_submitted_total", queue=queue) == 3
    assert value(on_b, "orbit_tasks_submitted_total", queue=queue) == 2
    replicas = {labels["replica"] for s in (on_a, on_b) for labels, _ in s["orbit_server_info"]}
    assert len(replicas) == 2
