"""`orbit tasks list`, `orbit queues list`, `orbit workers list` and the review queue, run as
the real command against a real orbit-server (JSON on a pipe, tables on a pseudo-terminal)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from support.cli import Cli
from support.orbit_http import WorkerCredential
from support.protocol_client import ECHO, ProtocolClient
from support.server import ServerProcess

from orbit_client import Credentials, load_credentials, write_credentials
from orbit_wire.ids import is_id

NOBODY = "nobody.serves.this"


@pytest.fixture
def admin_cli(server: ServerProcess, admin_credentials: Credentials, tmp_path: Path) -> Cli:
    path = tmp_path / "admin.json"
    write_credentials(path, admin_credentials)
    return Cli(path)


def lane(admin_cli: Cli, tmp_path: Path, name: str) -> tuple[str, Cli, Path]:
    queue = admin_cli.ok("queues", "create", "--name", name).strip()
    producer, worker = tmp_path / f"{name}-producer.json", tmp_path / f"{name}-worker.json"
    admin_cli.ok("credentials", "create", "--role", "producer", "--queue", queue, "-o",
                 str(producer))
    admin_cli.ok("credentials", "create", "--role", "worker", "--queue", queue, "-o",
                 str(worker))
    return queue, Cli(producer), worker


def submit(cli: Cli, handler: str, payload: str = "{}") -> str:
    task_id = cli.ok("tasks", "submit", "--handler", handler, "--handler-version", "v1",
                     "--payload-version", "v1", "--payload", payload).strip()
    assert is_id(task_id)
    return task_id


def worker_of(worker_file: Path) -> WorkerCredential:
    creds = load_credentials(worker_file)
    return WorkerCredential(creds.credential_id, creds.secret, creds.queues[0])


async def to_review(server: ServerProcess, worker_file: Path, count: int) -> None:
    async with await ProtocolClient.connect(server.ws_url) as wc:
        await wc.hello_as(worker_of(worker_file), capacity=count, capabilities=(ECHO,))
        await wc.credit(count)
        for res in await wc.reservations(count):
            assert (await wc.start(res)).ok
            assert (await wc.finish(res, "UNKNOWN", code="HANDLER_ERROR")).ok


def ids(answer: dict[str, object]) -> list[str]:
    return [t["id"] for t in answer["tasks"]]  # type: ignore[attr-defined,index]


def test_tasks_list_filters_orders_and_pages(
    server: ServerProcess, admin_cli: Cli, tmp_path: Path
) -> None:
    queue, producer, worker_file = lane(admin_cli, tmp_path, "lists")
    served = [submit(producer, ECHO.handler, f'{{"i": {i}}}') for i in range(3)]
    asyncio.run(to_review(server, worker_file, 3))
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

    shown = producer.tty("tasks", "list", "--limit", "4")
    assert shown.returncode == 0, shown.text
    for task_id in everything[-4:]:
        assert task_id in shown.text
    assert "NEEDS_REVIEW" in shown.text and "no live worker" in shown.text
    assert "--cursor " in shown.text  # the fifth task is one page further

    # Usage errors name the option.
    result = producer.run("tasks", "list", "--state", "DONE")
    assert result.returncode == 2 and "--state" in result.stderr
    result = producer.run("tasks", "list", "--created-after", "yesterday")
    assert result.returncode == 2 and "is not a time" in result.stderr
    assert queue  # the producer's one queue was the default throughout


def test_the_review_queue_resolved_in_one_go(
    server: ServerProcess, admin_cli: Cli, tmp_path: Path
) -> None:
    _, producer, worker_file = lane(admin_cli, tmp_path, "review")
    served = [submit(producer, ECHO.handler, f'{{"i": {i}}}') for i in range(3)]
    asyncio.run(to_review(server, worker_file, 3))
    review = ids(producer.json("tasks", "list", "--state", "NEEDS_REVIEW"))
    assert sorted(review) == sorted(served)
    answer = producer.json("tasks", "review", "--retry", *review, "--reason", "fixed")
    assert sorted(ids(answer)) == sorted(served) and answer["errors"] == []
    assert producer.json("tasks", "list", "--state", "NEEDS_REVIEW")["tasks"] == []
    for task_id in served:
        events = producer.json("tasks", "audit", task_id)["events"]
        assert [e for e in events if e["actor"].startswith("operator:")], events


def test_queues_list_shows_counts_and_respects_scope(
    admin_cli: Cli, tmp_path: Path
) -> None:
    mine, producer, _ = lane(admin_cli, tmp_path, "mine")
    other, _, _ = lane(admin_cli, tmp_path, "other")
    submit(producer, NOBODY)
    every = {q["queue_id"]: q for q in admin_cli.json("queues", "list")["queues"]}
    assert {mine, other} <= set(every)
    assert every[mine]["counts"]["PENDING"] == 1 and every[mine]["name"] == "mine"
    assert [q["queue_id"] for q in producer.json("queues", "list")["queues"]] == [mine]
    shown = admin_cli.tty("queues", "list")
    assert shown.returncode == 0
    assert mine in shown.text and other in shown.text and "NEEDS_REVIEW" in shown.text


def test_workers_list_shows_live_workers_and_what_they_run(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    # A long session TTL: the worker below sends no heartbeat while the CLI runs.
    server = server_factory(session_ttl_ms=120_000)
    admin_file = tmp_path / "admin.json"
    write_credentials(admin_file, server.admin())
    admin_cli = Cli(admin_file)
    queue, producer, worker_file = lane(admin_cli, tmp_path, "workers")
    task_id = submit(producer, ECHO.handler)

    async def scenario() -> None:
        async with await ProtocolClient.connect(server.ws_url) as wc:
            await wc.hello_as(worker_of(worker_file), capacity=2, capabilities=(ECHO,))
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
            assert wc.instance_id in shown.text and "Running attempts" in shown.text
            assert task_id in shown.text
            filtered = await asyncio.to_thread(admin_cli.json, "workers", "list", "--queue",
                                               queue)
            assert [w["instance_id"] for w in filtered["workers"]] == [wc.instance_id]
            assert (await wc.finish(res, "SUCCEEDED", result_json="{}")).ok

    asyncio.run(scenario())
    assert orjson.loads(producer.ok("workers", "list"))["workers"] == []


def test_a_task_nobody_serves_says_so_and_can_give_up_in_time(
    admin_cli: Cli, tmp_path: Path
) -> None:
    _, producer, _ = lane(admin_cli, tmp_path, "silent")
    task_id = submit(producer, NOBODY)
    text = producer.tty("tasks", "get", task_id).text
    assert f"no live worker ({NOBODY} v1 · payload v1)" in text
    assert "orbit workers list" in text
    stats = producer.tty("queues", "stats").text
    assert any(line.split()[:1] == [NOBODY] and line.split()[5:7] == ["1", "0"]
               for line in stats.splitlines()), stats
    # With --schedule-to-start the wait ends in FAILED/NOT_STARTED_IN_TIME: exit code 10.
    result = producer.run("tasks", "submit", "--handler", NOBODY, "--handler-version", "v1",
                          "--payload-version", "v1", "--payload", "{}",
                          "--schedule-to-start", "300ms", "--wait", "20")
    assert result.returncode == 10, result.stderr
    task = orjson.loads(result.stdout)
    assert task["state"] == "FAILED" and task["failure"]["code"] == "NOT_STARTED_IN_TIME"
    assert task["policy"]["schedule_to_start_ms"] == 300
