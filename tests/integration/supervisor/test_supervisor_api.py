"""The in-process Supervisor API (run/stop/stats/events) against a real server and real
children: counters, the bounded event stream with drop counting, run-once."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from supervisor_support import FIXTURES, HANDLERS, SupEnv, spec
from support.waiting import UNIT, wait_until_async

from orbit_supervisor import (
    OptionError,
    Supervisor,
    SupervisorEvent,
    WorkerAlreadyRun,
)

N_TASKS = 40  # > 128 / 4 events per task, so an unread stream must drop some


@pytest.fixture
def in_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    # The template imports MODULE:ATTR from the current directory, as `python -m` would.
    monkeypatch.chdir(FIXTURES)


def _submit_batch(sup_env: SupEnv, texts: list[str]) -> list[str]:
    body = {"tasks": [spec("upper", {"text": t}) for t in texts]}
    resp = sup_env.producer.post(f"/v1/queues/{sup_env.queue_id}/tasks/batch", json=body)
    assert resp.status_code == 201, resp.text
    return [t["id"] for t in resp.json()["tasks"]]


async def _wait_done(base_url: str, bearer: str, ids: list[str]) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=30 * UNIT,
                                 headers={"Authorization": f"Bearer {bearer}"}) as client:
        left = list(ids)

        async def all_succeeded() -> bool:  # a long poll of up to 1 s on the first one left
            resp = await client.get(f"/v1/tasks/{left[0]}", params={"wait_ms": 1000})
            if resp.json()["state"] == "SUCCEEDED":
                left.pop(0)
            return not left

        await wait_until_async(all_succeeded, timeout=60, interval=0.01,
                               what=lambda: f"every task done ({len(left)} left)")


def test_stats_and_events_with_drop_counting(sup_env: SupEnv, in_fixtures: None) -> None:
    texts = [f"secret-result-{i}" for i in range(N_TASKS)]
    ids = _submit_batch(sup_env, texts)
    sup = Supervisor(HANDLERS, sup_env.queue_id, sup_env.credentials_file, workers=2,
                     shutdown_timeout=20)
    bearer = sup_env.producer.headers["Authorization"].removeprefix("Bearer ")

    async def scenario() -> tuple[list[SupervisorEvent], object]:
        runner = asyncio.create_task(sup.run())
        await _wait_done(sup_env.orbit.server.url, bearer, ids)
        stats_running = sup.stats()
        sup.stop()
        sup.stop()  # idempotent
        await asyncio.wait_for(runner, 30 * UNIT)
        # Read only now: the stream kept the first 128 events and counted the rest.
        seen = [event async for event in sup.events()]
        with pytest.raises(WorkerAlreadyRun):
            await sup.run()
        return seen, stats_running

    events, during = asyncio.run(scenario())
    stats = sup.stats()
    assert stats.started == N_TASKS
    assert stats.reports_confirmed == N_TASKS and stats.evidence_confirmed == 0
    assert stats.running == 0 and stats.reconnects == 0
    assert stats.dropped_events > 0
    assert len(events) == 128
    assert stats.children is not None and stats.children.spawned >= 2
    assert sum(stats.children.killed.values()) == 0  # nothing had to be killed
    types = {e.type for e in events}
    assert {"connected", "reserved", "started", "finished", "report_confirmed"} <= types
    for event in events:
        text = repr(event)
        assert "SECRET-RESULT" not in text and "secret" not in text.lower()
        if event.type in ("reserved", "started", "finished"):
            assert event.task_id in ids and event.attempt_id
    finished = [e for e in events if e.type == "finished"]
    assert finished and all(e.classification == "SUCCEEDED" for e in finished)
    assert getattr(during, "started", None) == N_TASKS  # counters are live during run


def test_events_end_when_run_returns_and_a_reader_sees_them_live(
        sup_env: SupEnv, in_fixtures: None) -> None:
    ids = _submit_batch(sup_env, ["live one", "live two"])
    sup = Supervisor(HANDLERS, sup_env.queue_id, sup_env.credentials_file, workers=1)
    bearer = sup_env.producer.headers["Authorization"].removeprefix("Bearer ")

    async def scenario() -> list[SupervisorEvent]:
        got: list[SupervisorEvent] = []

        async def reader() -> None:
            async for event in sup.events():
                got.append(event)

        reading = asyncio.create_task(reader())
        runner = asyncio.create_task(sup.run())
        await _wait_done(sup_env.orbit.server.url, bearer, ids)
        sup.stop()
        await asyncio.wait_for(runner, 30 * UNIT)
        await asyncio.wait_for(reading, 5 * UNIT)  # ends because run returned
        return got

    got = asyncio.run(scenario())
    assert [e.type for e in got].count("report_confirmed") == 2
    assert got[-1].type == "drained"
    assert sup.stats().dropped_events == 0


def test_options_are_checked_at_construction(sup_env: SupEnv) -> None:
    def make(**kw: Any) -> Supervisor:
        return Supervisor(HANDLERS, sup_env.queue_id, sup_env.credentials_file, **kw)

    with pytest.raises(OptionError, match=r"workers must be an integer in \[1, 256\]"):
        make(workers=0)
    with pytest.raises(OptionError, match="shutdown_timeout"):
        make(shutdown_timeout=301)
    with pytest.raises(OptionError, match="reconnect_min_delay"):
        make(reconnect_min_delay=0.001)
    with pytest.raises(OptionError, match="reconnect_max_delay"):
        make(reconnect_min_delay=1.0, reconnect_max_delay=0.5)
    with pytest.raises(OptionError, match="queue"):
        Supervisor(HANDLERS, "not-a-queue", sup_env.credentials_file)
    sup = make()
    assert "secret" not in repr(sup).lower()
    assert os.fspath(Path(sup_env.credentials_file)) not in repr(sup)


def test_running_attempts_add_no_asyncio_tasks(sup_env: SupEnv, in_fixtures: None) -> None:
    # Each execution reports its outcome from its future's callback: four handlers running
    # at once leave the loop with the tasks it has when nothing runs.
    body = {"tasks": [spec("sleep", {"seconds": 1.5}) for _ in range(4)]}
    resp = sup_env.producer.post(f"/v1/queues/{sup_env.queue_id}/tasks/batch", json=body)
    assert resp.status_code == 201, resp.text
    ids = [t["id"] for t in resp.json()["tasks"]]
    sup = Supervisor(HANDLERS, sup_env.queue_id, sup_env.credentials_file, workers=4,
                     shutdown_timeout=20)
    bearer = sup_env.producer.headers["Authorization"].removeprefix("Bearer ")

    async def scenario() -> tuple[int, int, int]:
        runner = asyncio.create_task(sup.run())
        await wait_until_async(lambda: sup.stats().running == 4, timeout=30,
                               what="four handlers running")
        running, during = sup.stats().running, len(asyncio.all_tasks())
        await _wait_done(sup_env.orbit.server.url, bearer, ids)
        after = len(asyncio.all_tasks())
        sup.stop()
        await asyncio.wait_for(runner, 30 * UNIT)
        return running, during, after

    running, during, after = asyncio.run(scenario())
    assert running == 4 and during == after
    assert sup.stats().reports_confirmed == 4
