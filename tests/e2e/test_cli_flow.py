"""`orbit queues pause/resume/pauses` and `orbit tasks cancel/review` by filter, run as the
real command against a real orbit-server: a pause shown in the task's waiting line and the
pause log, lifted by its own key only; a bulk cancel counted first, refused without --yes off
a terminal, then cancelling exactly those; a bulk review refused without its decision;
`orbit queues fair` on, shown and off."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import Cli, run_orbit
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect

from orbit_client import write_credentials


@pytest.fixture
def lane_cli(orbit: OrbitEnv, tmp_path: Path) -> tuple[Lane, Cli]:
    lane = Lane.open(orbit, "flow")
    return lane, Cli.producer_of(lane, tmp_path)


def _submit(lane: Lane, handler: str) -> str:
    body = {"handler": handler, "handler_version": "v1", "payload_version": "v1",
            "payload": {}}
    return str(expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks", json=body),
                      201)["id"])


def _state(lane: Lane, task_id: str) -> str:
    return str(expect(lane.producer.get(f"/v1/tasks/{task_id}"), 200)["state"])


def test_pause_shows_in_the_task_and_the_log_and_resume_lifts_its_own_key(
        lane_cli: tuple[Lane, Cli]) -> None:
    lane, cli = lane_cli
    paused = cli.json("queues", "pause", "--handler", "flow.a", "--handler-version", "v1",
                      "--reason", "bad release", "--json")
    assert [(p["scope"], p["reason"]) for p in paused["paused"]] == [
        ("capability_version", "bad release")]
    task_id = _submit(lane, "flow.a")
    shown = cli.ok("--output", "human", "tasks", "get", task_id)
    assert "paused" in shown and "bad release" in shown, shown
    assert "paused" in cli.ok("--output", "human", "queues", "stats")
    # The handler's pause is another key: nothing of it to resume.
    assert cli.ok("--output", "human", "queues", "resume", "--handler", "flow.a") == (
        f"flow.a was not paused in queue {lane.queue}\n")
    assert cli.ok("--output", "human", "queues", "resume", "--handler", "flow.a",
                  "--handler-version", "v1", "--reason", "rolled back") == (
        f"resumed flow.a@v1 in queue {lane.queue}\n")
    log = cli.json("queues", "pauses", "--json")["log"]
    assert [(e["action"], e["reason"]) for e in log] == [("resumed", "rolled back"),
                                                         ("paused", "bad release")]
    refused = run_orbit("queues", "pause", "--handler-version", "v1", "--reason", "x",
                        env=cli.env)
    assert refused.returncode == 2, refused.stderr


def test_bulk_cancel_counts_asks_then_cancels_exactly_those(lane_cli: tuple[Lane, Cli]) -> None:
    lane, cli = lane_cli
    wanted = [_submit(lane, "flow.b") for _ in range(3)]
    other = _submit(lane, "flow.c")
    select = ("tasks", "cancel", "--state", "PENDING", "--handler", "flow.b")
    assert cli.ok("--output", "human", *select, "--dry-run") == "3 tasks would be cancelled\n"
    refused = run_orbit(*select, env=cli.env, stdin="")
    assert refused.returncode == 2 and "--yes" in refused.stderr, refused.stderr
    assert [_state(lane, t) for t in wanted] == ["PENDING"] * 3
    done = cli.json(*select, "--yes", "--reason", "wrong input", "--json")
    assert (done["matched"], done["cancelled"], done["skipped"]) == (3, 3, 0)
    assert [_state(lane, t) for t in wanted] == ["CANCELLED"] * 3
    assert _state(lane, other) == "PENDING"
    # By ID still works; a review by filter needs its decision.
    assert cli.json("tasks", "cancel", other, "--json")["state"] == "CANCELLED"
    assert cli.ok("--output", "human", "tasks", "review", "--fail", "--handler", "flow.b",
                  "--dry-run") == "0 tasks would be reviewed\n"
    refused = run_orbit("tasks", "review", "--handler", "flow.b", "--dry-run", env=cli.env)
    assert refused.returncode == 2, refused.stderr


def test_queues_fair_turns_on_shows_and_turns_off(orbit: OrbitEnv, lane_cli: tuple[Lane, Cli],
                                                  tmp_path: Path) -> None:
    lane, producer_cli = lane_cli
    admin_path = tmp_path / "admin.json"
    write_credentials(admin_path, orbit.admin)
    admin = Cli(admin_path)
    assert admin.ok("--output", "human", "queues", "fair", lane.queue, "--key", "customer") == (
        f"queue {lane.queue}: fair by customer\n")
    assert "turns by customer" in producer_cli.ok("--output", "human", "queues", "stats")
    listed = producer_cli.json("queues", "list", "--json")["queues"]
    assert [q["fair"] for q in listed if q["queue_id"] == lane.queue] == ["customer"]
    shown = producer_cli.json("queues", "fair", "--json")
    assert shown["key"] == "customer"
    assert [c["action"] for c in shown["changes"]] == ["fair_on"]
    assert admin.ok("--output", "human", "queues", "fair", lane.queue, "--off") == (
        f"queue {lane.queue}: not fair (plain priority dispatch)\n")
    # Only an admin changes it; a bad name is refused by the server with its code.
    producer_cli.fails("PERMISSION_DENIED", 1, "queues", "fair", "--key", "customer")
    admin.fails("BAD_REQUEST", 1, "queues", "fair", lane.queue, "--key", "Customer:1")
    both = run_orbit("queues", "fair", lane.queue, "--key", "a", "--off", env=admin.env)
    assert both.returncode == 2, both.stderr
