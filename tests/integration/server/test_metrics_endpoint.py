"""GET /metrics of a real server: the metrics token, the off switch, route templates as
labels, and tasks by state counted from the database at most once per refresh period."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from support.lanes import Lane
from support.metrics import parse, scrape, value
from support.orbit_http import OrbitEnv, expect, expect_error, task_spec
from support.server import ServerProcess, server_command

from orbit_wire.frames import ClaimOp

TOKEN = "metrics-token-0123456789abcdef"


def test_token_refresh_period_and_route_labels(server_factory: Callable[..., ServerProcess],
                                               tmp_path: Path) -> None:
    token_file = tmp_path / "metrics.token"
    token_file.write_text(TOKEN + "\n")
    server = server_factory(extra_args=("--metrics-token-file", str(token_file),
                                        "--metrics-refresh-ms", "600000"))
    url = f"{server.url}/metrics"
    body = expect_error(httpx.get(url, timeout=10), 401, "UNAUTHENTICATED")
    assert TOKEN not in str(body)
    refused = httpx.get(url, timeout=10, headers={"Authorization": "Bearer " + "x" * 30})
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"

    admin = server.bootstrap_admin()
    with httpx.Client(base_url=server.url, timeout=10,
                      headers={"Authorization": f"Bearer {admin.bearer}"}) as http:
        env = OrbitEnv(server, admin, http)
        queue = env.queue("metrics-q")
        _, before = scrape(url, TOKEN)  # counts the database now: the queue has no task
        assert value(before, "orbit_queue_info", queue=queue, name="metrics-q") == 1
        producer = env.producer(queue)
        task = expect(producer.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 201)
        expect(producer.get(f"/v1/tasks/{task['id']}"), 200)
        expect_error(producer.get(f"/v1/tasks/{'0' * 32}"), 404, "NOT_FOUND")
        expect_error(producer.get(f"/nowhere/{task['id']}"), 404, "NOT_FOUND")
        text, after = scrape(url, TOKEN)
        env.close()
    # Counted in process at once; the database count waits for its refresh period.
    assert value(after, "orbit_tasks_submitted_total", queue=queue) == 1
    assert value(after, "orbit_tasks", queue=queue) == 0
    assert value(after, "orbit_tasks_counted_timestamp_seconds") \
        == value(before, "orbit_tasks_counted_timestamp_seconds")
    route = "/v1/tasks/{task_id}"
    assert value(after, "orbit_http_requests_total", method="GET", route=route,
                 status="200") == 1
    assert value(after, "orbit_http_requests_total", method="GET", route=route,
                 status="404") == 1
    assert value(after, "orbit_http_requests_total", route="unmatched", status="404") == 1
    assert value(after, "orbit_http_requests_total", route="/metrics", status="401") == 2
    assert task["id"] not in text and "nowhere" not in text
    # OpenMetrics for a scraper that asks for it.
    open_metrics = httpx.get(url, timeout=10, headers={
        "Authorization": f"Bearer {TOKEN}", "Accept": "application/openmetrics-text"})
    assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
    assert open_metrics.text.rstrip().endswith("# EOF")
    assert value(parse(httpx.get(url, timeout=10, headers={
        "Authorization": f"Bearer {TOKEN}"}).text), "orbit_server_info") == 1


def test_metrics_off_and_a_short_token(server_factory: Callable[..., ServerProcess],
                                       tmp_path: Path) -> None:
    server = server_factory(extra_args=("--no-metrics",))
    expect_error(httpx.get(f"{server.url}/metrics", timeout=10), 404, "NOT_FOUND")
    short = tmp_path / "short.token"
    short.write_text("too-short\n")
    done = subprocess.run([*server_command(), "serve", "--db", server.db_url, "--port", "0",
                           "--metrics-token-file", str(short)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "at least 16 characters" in done.stderr


@pytest.mark.asyncio
async def test_commits_syncs_and_frames_are_counted(lane: Lane) -> None:
    """What a lone granted task costs, as the metrics count it (scripts/bench_peers.py
    reports these per task): one commit for the submit with its grant, one for the finish;
    the reserve frame, the finish's request and its response."""
    url = f"{lane.env.server.url}/metrics"
    async with await lane.connect(capacity=1, credit=1, features=("grant",)) as wc:
        # A first task: the producer's token is verified (and its last use written) once.
        lane.submit()
        [first] = await wc.reservations(1)
        assert (await wc.renew(first)).ok
        answer = await wc.request(wc.finish_op(first, "SUCCEEDED", result_json="1"),
                                  ClaimOp(wc.msg_id(), 1))
        assert answer.results[1].credited == 1  # the claim found nothing: credit again
        _, before = scrape(url)
        task = lane.submit()
        [res] = await wc.reservations(1)
        assert (await wc.finish(res, "SUCCEEDED", result_json="1")).ok
        _, after = scrape(url)
    assert res.task_id == task["id"]

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    if lane.env.server.db_url.startswith("sqlite"):
        assert grew("orbit_store_commits_total") == 2
        assert grew("orbit_store_wal_syncs_total") >= 1  # commits close together share one
    else:  # on MySQL every write transaction counts, the reaper's passes included
        assert grew("orbit_store_commits_total") >= 2
        assert "orbit_store_wal_syncs_total" not in after  # the database syncs its own log
    assert grew("orbit_frames_total", channel="worker", direction="out") == 2
    assert grew("orbit_frames_total", channel="worker", direction="in") == 1
    assert grew("orbit_grants_total", queue=lane.queue) == 1
