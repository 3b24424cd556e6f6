"""`orbit tasks list`, `orbit queues list`, `orbit workers list` and the review queue, run as
the real command against a real orbit-server: JSON on a pipe, and on a pseudo-terminal the
tables show the rows the JSON holds (their words: tests/unit/client/test_cli_render.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from support.cli import Cli
from support.lanes import Lane, finish_each
from support.orbit_http import OrbitEnv, http_client
from support.protocol_client import ECHO, ProtocolClient
from support.server import ServerProcess

from orbit_client import Credentials, write_credentials
from orbit_wire.ids import is_id

NOBODY = "nobody.serves.this"


@pytest.fixture
def admin_cli(server: ServerProcess, admin_credentials: Credentials, tmp_path: Path) -> Cli:
    path = tmp_path / "admin.json"
    write_credentials(path, admin_credentials)
    return Cli(path)


def lane(orbit: OrbitEnv, tmp_path: Path, name: str) -> tuple[Lane, Cli]:
    """A queue named ``name`` and `orbit` as its producer."""
    made = Lane.open(orbit, name)
    return made, Cli.producer_of(made, tmp_path)


def submit(cli: Cli, handler: str, payload: str = "{}") -> str:
    task_id = cli.ok("tasks", "submit", "--handler", handler, "--handler-version", "v1",
                     "--payload-version", "v1", "--payload", payload).strip()
    assert is_id(task_id)
    return task_id


def to_review(made: Lane, task_ids: list[str]) -> None:
    """A protocol worker takes the tasks and reports each as uncertain."""
    asyncio.run(finish_each(made.ws_url, made.worker,
                            {t: ("UNKNOWN", "HANDLER_ERROR") for t in task_ids}))


def ids(answer: dict[str, object]) -> list[str]:
    return [t["id"] for t in answer["tasks"]]  # type: ignore[attr-defined,index]


def test_tasks_list_filters_orders_and_pages(orbit: OrbitEnv, tmp_path: Path) -> None:
    made, producer = lane(orbit, tmp_path, "lists")
    served = [submit(producer, ECHO.handler, f'{{"i": {i}}}') for i in range(3)]
    to_review(made, served)
    waiting = [submit(producer, NOBODY) for _ in range(2)]
    everything = served + waiting  # in submit order

    newest = producer.json("tasks", "list")
    assert ids(newest) == everything[::-1] and newest["next_cursor"] is None
    assert ids(producer.json("tasks", "list", "--oldest")) == everything
    assert ids(producer.json("tasks", "list", "--state", "needs_review")) == served[::-1]
    assert ids(producer.json("tasks", "list", "--state", "PENDING,NEEDS_REVIEW",
                             "--handler", NOBODY)) == waiting[::-1]
    assert ids(producer.json("tasks", "list", "--created-after", "2099-01-01")) == []
    assert len(ids(producer.json("tasks", "list", "--created-after", "1h"))) == 5

    # Pages: --limit, then --cursor goes on where the page ended; --all reads every page.
    first = producer.json("tasks", "list", "--oldest", "--limit", "2")
    assert ids(first) == everything[:2] and first["next_cursor"]
    rest = producer.json("tasks", "list", "--oldest", "--cursor", first["next_cursor"])
    assert ids(rest) == everything[2:]
    assert ids(producer.json("tasks", "list", "--all", "--oldest")) == everything
    # A pending task that nobody serves says so, in the list too.
    [pending] = producer.json("tasks", "list", "--state", "PENDING", "--limit", "1")["tasks"]
    assert pending["waiting"]["reason"] == "NO_LIVE_WORKER"

    # On a terminal: the same page, and the cursor of the next (the fifth task).
    page = producer.json("tasks", "list", "--limit", "4")
    shown = producer.tty("tasks", "list", "--limit", "4")
    assert shown.returncode == 0, shown.text
    assert {t for t in everything if t in shown.text} == set(ids(page)) and page["next_cursor"]
    assert page["next_cursor"] in shown.text

    # Usage errors (the options they name: test_cli_render.py).
    assert producer.run("tasks", "list", "--state", "DONE").returncode == 2
    assert producer.run("tasks", "list", "--created-after", "yesterday").returncode == 2
    # The producer's one queue was the default throughout.
    assert {t["queue_id"] for t in producer.json("tasks", "list")["tasks"]} == {made.queue}


def test_the_review_queue_resolved_in_one_go(orbit: OrbitEnv, tmp_path: Path) -> None:
    made, producer = lane(orbit, tmp_path, "review")
    served = [submit(producer, ECHO.handler, f'{{"i": {i}}}') for i in range(3)]
    to_review(made, served)
    review = ids(producer.json("tasks", "list", "--state", "NEEDS_REVIEW"))
    assert sorted(review) == sorted(served)
    answer = producer.json("tasks", "review", "--retry", *review, "--reason", "fixed")
    assert sorted(ids(answer)) == sorted(served) and answer["errors"] == []
    assert producer.json("tasks", "list", "--state", "NEEDS_REVIEW")["tasks"] == []
    for task_id in served:
        events = producer.json("tasks", "audit", task_id)["events"]
        assert [e for e in events if e["actor"].startswith("operator:")], events


def test_queues_list_shows_counts_and_respects_scope(
    orbit: OrbitEnv, admin_cli: Cli, tmp_path: Path
) -> None:
    made, producer = lane(orbit, tmp_path, "mine")
    mine, other = made.queue, Lane.open(orbit, "other").queue
    submit(producer, NOBODY)
    every = {q["queue_id"]: q for q in admin_cli.json("queues", "list")["queues"]}
    assert {mine, other} <= set(every)
    assert every[mine]["counts"]["PENDING"] == 1 and every[mine]["name"] == "mine"
    assert [q["queue_id"] for q in producer.json("queues", "list")["queues"]] == [mine]
    shown = admin_cli.tty("queues", "list")
    assert shown.returncode == 0
    assert mine in shown.text and other in shown.text


def test_workers_list_shows_live_workers_and_what_they_run(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    # A long session TTL: the worker below sends no heartbeat while the CLI runs.
    server = server_factory(session_ttl_ms=120_000)
    admin = server.admin()
    admin_file = tmp_path / "admin.json"
    write_credentials(admin_file, admin)
    admin_cli = Cli(admin_file)
    env = OrbitEnv(server, admin, http_client(server.url, admin.bearer))
    made, producer = lane(env, tmp_path, "workers")
    queue = made.queue
    task_id = submit(producer, ECHO.handler)

    async def scenario() -> None:
        async with await ProtocolClient.connect(server.ws_url) as wc:
            await wc.hello_as(made.worker, capacity=2, capabilities=(ECHO,))
            await wc.credit(1)
            [res] = await wc.reservations(1)
            assert (await wc.start(res)).ok
            # The CLI runs in a thread so this loop keeps serving the socket meanwhile.
            answer = await asyncio.to_thread(producer.json, "workers", "list")
            [worker] = answer["workers"]
            assert worker["instance_id"] == wc.instance_id
            assert worker["queue_id"] == queue and worker["slots"] == 2
            assert worker["capabilities"] == [ECHO.to_dict()]
            [running] = worker["running"]
            assert running["task_id"] == task_id and running["attempt_id"] == res.attempt_id
            shown = await asyncio.to_thread(producer.tty, "workers", "list")
            assert shown.returncode == 0
            assert wc.instance_id in shown.text and task_id in shown.text
            filtered = await asyncio.to_thread(admin_cli.json, "workers", "list", "--queue",
                                               queue)
            assert [w["instance_id"] for w in filtered["workers"]] == [wc.instance_id]
            assert (await wc.finish(res, "SUCCEEDED", result_json="{}")).ok

    try:
        asyncio.run(scenario())
        assert orjson.loads(producer.ok("workers", "list"))["workers"] == []
    finally:
        env.close()
        env.admin_http.close()


def test_a_task_nobody_serves_says_so_and_can_give_up_in_time(
    orbit: OrbitEnv, tmp_path: Path
) -> None:
    _, producer = lane(orbit, tmp_path, "silent")
    task_id = submit(producer, NOBODY)
    waiting = producer.json("tasks", "get", task_id)["waiting"]
    assert waiting["reason"] == "NO_LIVE_WORKER", waiting
    assert waiting["capability"]["handler"] == NOBODY
    [row] = producer.json("queues", "stats")["capabilities"]
    assert row["capability"]["handler"] == NOBODY, row
    assert (row["pending"], row["live_workers"]) == (1, 0), row
    assert row["waiting"]["reason"] == "NO_LIVE_WORKER", row
    # With --schedule-to-start the wait ends in FAILED/NOT_STARTED_IN_TIME: exit code 10.
    result = producer.run("tasks", "submit", "--handler", NOBODY, "--handler-version", "v1",
                          "--payload-version", "v1", "--payload", "{}",
                          "--schedule-to-start", "300ms", "--wait", "20")
    assert result.returncode == 10, result.stderr
    task = orjson.loads(result.stdout)
    assert task["state"] == "FAILED" and task["failure"]["code"] == "NOT_STARTED_IN_TIME"
    assert task["policy"]["schedule_to_start_ms"] == 300
