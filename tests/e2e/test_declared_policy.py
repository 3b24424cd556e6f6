"""The policy declared once, on the TaskType (docs/handlers.md, "Declared policies"), with a
real orbit-server, real orbit-supervise processes and real children: the worker registers
its capabilities' policies in hello; `orbit tasks submit` with no policy flag and no version
gets the registered policy (the task says "registered") and a handler hanging past its
declared time limit is killed there, twice; a second worker declaring another policy for the
same version is refused (POLICY_CONFLICT, exit 5), one declaring it for a new version is not;
and the versions of a handler given alone are found when there is one pair, listed when
there are several, and refused when there is none."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.cli import Cli
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect
from support.supervisor_helpers import SupervisorProcess, wait_task
from support.waiting import wait_until

from orbit_wire.ids import is_id

EXIT_FATAL_SESSION = 5  # orbit-supervise: authentication, permission or protocol
EXIT_USAGE = 2  # orbit: refused before anything was sent


@dataclass
class PolicyLane:
    lane: Lane
    cli: Cli
    worker_file: Path
    workdir: Path
    started: list[SupervisorProcess]

    def supervise(self, handlers: str) -> SupervisorProcess:
        sup = SupervisorProcess(self.workdir, self.worker_file, self.lane.queue, workers=2,
                                handlers=f"policy_handlers:{handlers}")
        self.started.append(sup)
        return sup.start()

    def registered(self) -> list[dict[str, Any]]:
        answer = expect(self.lane.producer.get(f"/v1/queues/{self.lane.queue}/capabilities"),
                        200)
        return list(answer["capabilities"])

    def wait_registered(self, count: int) -> list[dict[str, Any]]:
        return wait_until(lambda: len(found := self.registered()) >= count and found,
                          timeout=30.0, what=lambda: f"{count} registered capabilities")


@pytest.fixture
def policy_lane(orbit: OrbitEnv, tmp_path: Path) -> Iterator[PolicyLane]:
    lane = Lane.open(orbit)
    made = PolicyLane(lane, Cli.producer_of(lane, tmp_path),
                      lane.credentials_file(tmp_path / "worker.json", "worker"), tmp_path, [])
    try:
        yield made
    finally:
        for sup in made.started:
            sup.stop()


def _by_handler(registered: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["capability"]["handler"], r["capability"]["handler_version"]): r["policy"]
            for r in registered}


@pytest.mark.timeout(120)
def test_a_cli_submit_without_policy_flags_gets_the_declared_policy(
        policy_lane: PolicyLane) -> None:
    policy_lane.supervise("HANDLERS")
    declared = _by_handler(policy_lane.wait_registered(3))
    assert declared[("policy.hang", "v1")] == {
        "idempotency": "IDEMPOTENT", "max_attempts": 2, "attempt_timeout_ms": 1500,
        "backoff": {"initial_ms": 50, "max_ms": 60_000, "multiplier": 2.0, "jitter": 0.0}}
    assert declared[("policy.multi", "v1")] == {}
    assert declared[("policy.multi", "v2")] == {"priority": 7}

    cli = policy_lane.cli
    # No version, no policy flag: the one registered pair and its declared policy.
    task = cli.json("tasks", "submit", "--handler", "policy.hang", "--payload",
                    '{"seconds": 30}', "--json")
    assert is_id(task["id"]) and task["capability"]["handler_version"] == "v1"
    assert task["policy_source"] == "registered"
    policy = task["policy"]
    assert (policy["attempt_timeout_ms"], policy["idempotency"], policy["max_attempts"]) == (
        1500, "IDEMPOTENT", 2)
    assert policy["backoff"]["initial_ms"] == 50
    shown = cli.tty("tasks", "get", task["id"])
    assert shown.returncode == 0 and "registered (declared by its worker's TaskType)" in (
        shown.text)
    # The handler hangs past its declared time limit: killed there, run again once (it is
    # declared idempotent), and the two attempts spent (an uncertain end: the review).
    ended = wait_task(policy_lane.lane.producer, task["id"], timeout_s=60.0)
    assert ended["state"] in ("NEEDS_REVIEW", "FAILED") and ended["attempts"] == 2
    history = policy_lane.lane.attempts(task["id"])["attempts"]
    assert len(history) == 2
    for attempt in history:
        ran = attempt["finished_at_ms"] - attempt["started_at_ms"]
        assert 1_000 <= ran < 15_000, attempt  # the declared 1.5 s, not the 5 min default

    # A flag given on the command line wins for that field; the rest stay registered.
    mine = cli.json("tasks", "submit", "--handler", "policy.hang", "--payload",
                    '{"seconds": 0}', "--not-idempotent", "--max-attempts", "5", "--json")
    assert (mine["policy"]["idempotency"], mine["policy"]["max_attempts"],
            mine["policy"]["attempt_timeout_ms"]) == ("NON_IDEMPOTENT", 5, 1500)
    assert mine["policy_source"] == "registered"
    done = wait_task(policy_lane.lane.producer, mine["id"])
    assert done["state"] == "SUCCEEDED"


@pytest.mark.timeout(120)
def test_a_worker_declaring_another_policy_for_the_same_version_is_refused(
        policy_lane: PolicyLane) -> None:
    policy_lane.supervise("HANDLERS")
    policy_lane.wait_registered(3)
    refused = policy_lane.supervise("CONFLICTING")
    assert refused.wait(timeout_s=30.0) == EXIT_FATAL_SESSION
    log = refused.log()
    assert "POLICY_CONFLICT" in log and "policy.hang@v1/v1" in log
    assert "attempt_timeout_ms: registered 1500, declared 9000" in log
    # The registration stands; a new version may declare what it likes.
    policy_lane.supervise("NEXT_VERSION")
    declared = _by_handler(policy_lane.wait_registered(4))
    assert declared[("policy.hang", "v1")]["attempt_timeout_ms"] == 1500
    assert declared[("policy.hang", "v2")]["attempt_timeout_ms"] == 9000


@pytest.mark.timeout(120)
def test_versions_are_found_when_one_pair_is_registered(policy_lane: PolicyLane) -> None:
    cli = policy_lane.cli
    line = cli.fails("NOT_FOUND", EXIT_USAGE, "tasks", "submit", "--handler", "policy.hang",
                     "--payload", "{}")
    assert "no worker has registered handler 'policy.hang'" in line
    policy_lane.supervise("HANDLERS")
    policy_lane.wait_registered(3)
    listed = cli.json("queues", "capabilities", "--json")
    assert _by_handler(listed["capabilities"]) == _by_handler(policy_lane.registered())
    shown = cli.tty("queues", "capabilities")
    assert shown.returncode == 0 and "none (server defaults)" in shown.text
    several = cli.fails("BAD_REQUEST", EXIT_USAGE, "tasks", "submit", "--handler", "policy.multi",
                        "--payload", "{}")
    assert ("--handler-version v1 --payload-version v1, "
            "--handler-version v2 --payload-version v1") in several
    # One version given picks the pair; the declared priority comes with it.
    task = cli.json("tasks", "submit", "--handler", "policy.multi", "--handler-version", "v2",
                    "--payload", "{}", "--json")
    assert task["capability"]["payload_version"] == "v1" and task["priority"] == 7
    assert wait_task(policy_lane.lane.producer, task["id"])["result"] == {"version": "v2"}
    # A schedule gets the versions and, at each tick, the registered idempotency.
    made = cli.json("schedules", "create", "--cron", "0 0 1 1 *", "--handler", "policy.hang",
                    "--payload", "{}", "--json")
    assert made["task"]["handler_version"] == "v1" and "idempotency" not in made["task"]
