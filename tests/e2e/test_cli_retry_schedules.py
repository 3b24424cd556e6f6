"""`orbit tasks retry` and the schedules' seconds field, run as the real command against a
real orbit-server: a bulk retry counted first (--dry-run), refused without --yes off a
terminal, then changing exactly the tasks counted, each audited; a retry by ID; a cron
with seconds refused unless asked for, and one asked for firing on its seconds with its
next five fire times shown."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from support.cli import Cli, run_orbit
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect
from support.waiting import wait_until

from orbit_wire.ids import is_id

HANDLER_A = "retry.a"
HANDLER_B = "retry.b"


@pytest.fixture
def lane_cli(orbit: OrbitEnv, tmp_path: Path) -> tuple[Lane, Cli]:
    lane = Lane.open(orbit, "retry")
    return lane, Cli.producer_of(lane, tmp_path)


def _submit(lane: Lane, handler: str) -> str:
    body = {"handler": handler, "handler_version": "v1", "payload_version": "v1",
            "payload": {}}
    return str(expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks", json=body),
                      201)["id"])


def _state(lane: Lane, task_id: str) -> str:
    return str(expect(lane.producer.get(f"/v1/tasks/{task_id}"), 200)["state"])


def _cancelled(lane: Lane, handler: str) -> str:
    task_id = _submit(lane, handler)
    expect(lane.producer.post(f"/v1/tasks/{task_id}/cancel", json={}), 200)
    return task_id


def test_bulk_retry_counts_asks_then_retries_exactly_those(
        lane_cli: tuple[Lane, Cli]) -> None:
    lane, cli = lane_cli
    wanted = [_cancelled(lane, HANDLER_A) for _ in range(3)]
    other = _cancelled(lane, HANDLER_B)
    pending = _submit(lane, HANDLER_A)
    select = ("tasks", "retry", "--state", "CANCELLED", "--handler", HANDLER_A,
              "--created-after", "1h")

    counted = cli.json(*select, "--dry-run", "--json")
    assert (counted["matched"], counted["retried"], counted["dry_run"]) == (3, 0, True)
    assert cli.ok("--output", "human", *select, "--dry-run") == "3 tasks would be retried\n"
    # Off a terminal, without --yes: refused before anything changes.
    refused = run_orbit(*select, env=cli.env, stdin="")
    assert refused.returncode == 2 and "--yes" in refused.stderr, refused.stderr
    assert [_state(lane, t) for t in wanted] == ["CANCELLED"] * 3

    done = cli.json(*select, "--yes", "--reason", "the outage is over", "--json")
    assert (done["matched"], done["retried"], done["skipped"], done["complete"]) == (
        3, 3, 0, True)
    assert [_state(lane, t) for t in wanted] == ["PENDING"] * 3
    assert _state(lane, other) == "CANCELLED" and _state(lane, pending) == "PENDING"
    for task_id in wanted:
        events = cli.json("tasks", "audit", task_id, "--json")["events"]
        [event] = [e for e in events if e["kind"] == "task_retried"]
        assert event["detail"]["reason"] == "the outage is over"
        assert event["detail"]["bulk"] is True
    assert cli.json(*select, "--dry-run", "--json")["matched"] == 0


def test_retry_by_id_and_its_refusals(lane_cli: tuple[Lane, Cli]) -> None:
    lane, cli = lane_cli
    cancelled = _cancelled(lane, HANDLER_B)
    task = cli.json("tasks", "retry", cancelled, "--reason", "again", "--json")
    assert task["id"] == cancelled and task["state"] == "PENDING"
    line = cli.fails("CONFLICT", 1, "tasks", "retry", cancelled)  # PENDING now
    assert "PENDING" in line and "cannot be retried" in line
    usage = cli.run("tasks", "retry", cancelled, "--state", "FAILED")
    assert usage.returncode == 2 and "not both" in usage.stderr
    assert cli.run("tasks", "retry").returncode == 2


def _schedule_args(queue: str, cron: str, *extra: str) -> list[str]:
    return ["schedules", "create", "--queue", queue, "--cron", cron, "--handler", "sched.t",
            "--handler-version", "v1", "--payload-version", "v1", "--payload", "{}", *extra]


def test_a_cron_with_seconds_is_refused_unless_asked_for(lane_cli: tuple[Lane, Cli]) -> None:
    lane, cli = lane_cli
    line = cli.fails("BAD_REQUEST", 1, *_schedule_args(lane.queue, "*/10 * * * * *"))
    assert "--with-seconds" in line and "first" in line
    assert cli.json("schedules", "list", "--queue", lane.queue)["schedules"] == []

    schedule_id = cli.ok(*_schedule_args(lane.queue, "*/2 * * * * *", "--with-seconds")).strip()
    assert is_id(schedule_id)
    try:
        view: dict[str, Any] = cli.json("schedules", "get", schedule_id)
        assert view["with_seconds"] is True
        fires = [f["at_ms"] for f in view["next_fires"]]
        assert len(fires) == 5 and all(at % 2000 == 0 for at in fires)
        assert [b - a for a, b in itertools.pairwise(fires)] == [2000] * 4
        assert view["next_fires"][0]["local"].endswith("+00:00")

        def fired_twice() -> list[dict[str, Any]] | None:
            firings = cli.json("schedules", "get", schedule_id)["firings"]
            return firings if len([f for f in firings if f["task_id"]]) >= 2 else None

        firings = wait_until(fired_twice, timeout=20, interval=0.2, what="two ticks fired")
        ticks = sorted(f["tick_at_ms"] for f in firings)
        assert all(t % 2000 == 0 for t in ticks)  # on its seconds, not every minute
        assert ticks[-1] - ticks[0] < 60_000

        shown = cli.ok("--output", "human", "schedules", "get", schedule_id)
        assert "Next fire times (UTC)" in shown and "seconds first" in shown
        listed = cli.ok("--output", "human", "schedules", "list", "--queue", lane.queue)
        assert schedule_id in listed and "ACTIVE" in listed
    finally:
        cli.ok("schedules", "delete", schedule_id)
