"""Long jobs end to end (issue 32): a real orbit-server (SQLite and MariaDB), real
orbit-supervise processes and real children running handlers that report progress.

- the progress of a running handler is visible through the API (the attempt's
  ``progress``) and `orbit tasks get` while it runs;
- a task killed mid-loop (its attempt timeout) resumes from its checkpoint on the next
  attempt and does not redo the finished part (at most the step a kill cut short);
- a handler that stops reporting is killed at ``progress_timeout_ms`` with
  PROGRESS_TIMEOUT, long before its attempt timeout (a generous bound)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.cli import Cli
from support.examples import run_example
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect
from support.supervisor_helpers import SupervisorProcess, spec, wait_task
from support.waiting import UNIT, wait_until

KILL_BOUND_MS = 2000 * UNIT  # generous: the progress deadline -> the child killed


@dataclass
class JobLane:
    lane: Lane
    cli: Cli
    worker_file: Path
    workdir: Path
    started: list[SupervisorProcess]

    def supervise(self, workers: int = 1) -> SupervisorProcess:
        sup = SupervisorProcess(self.workdir, self.worker_file, self.lane.queue,
                                workers=workers)
        self.started.append(sup)
        return sup.start()

    def submit(self, payload: dict[str, Any], **policy: Any) -> str:
        body = expect(self.lane.producer.post(f"/v1/queues/{self.lane.queue}/tasks",
                                              json=spec("reports_progress", payload,
                                                        **policy)), 201)
        return str(body["id"])

    def attempts(self, task_id: str) -> list[dict[str, Any]]:
        return list(self.lane.attempts(task_id)["attempts"])


@pytest.fixture
def jobs(orbit: OrbitEnv, tmp_path: Path) -> Iterator[JobLane]:
    lane = Lane.open(orbit)
    made = JobLane(lane, Cli.producer_of(lane, tmp_path),
                   lane.credentials_file(tmp_path / "worker.json", "worker"), tmp_path, [])
    try:
        yield made
    finally:
        for sup in made.started:
            sup.stop()


def _running_progress(jobs: JobLane, task_id: str) -> dict[str, Any] | None:
    """The running attempt's progress once it is part-way (None before)."""
    history = jobs.attempts(task_id)
    if not history or history[-1]["outcome"] is not None:
        return None
    progress = history[-1].get("progress")
    if progress is None or not 0 < (progress.get("fraction") or 0) < 1:
        return None
    return dict(progress)


@pytest.mark.timeout(120)
def test_progress_is_visible_while_the_handler_runs(jobs: JobLane) -> None:
    jobs.supervise()
    # 40 steps of 100 ms under a 900 ms lease: a renewal about every 300 ms carries news.
    task_id = jobs.submit({"steps": 40, "step_s": 0.1}, lease_ttl_ms=900)
    progress = wait_until(lambda: _running_progress(jobs, task_id), timeout=30,
                          what="the running attempt's progress in the API")
    assert 1 <= progress["details"]["i"] < 40
    assert progress["fraction"] == pytest.approx(progress["details"]["i"] / 40)
    assert jobs.lane.task(task_id)["state"] == "RUNNING"
    # The CLI shows it too, while the handler still runs.
    shown = jobs.cli.tty("tasks", "get", task_id)
    assert shown.returncode == 0, shown.text
    assert "progress" in shown.text and "%" in shown.text, shown.text
    # It moves on, and the last note (sent before the answer) is what the attempt keeps.
    later = wait_until(
        lambda: (p := _running_progress(jobs, task_id)) is not None
        and p["details"]["i"] > progress["details"]["i"] and p,
        timeout=30, what="the progress moving on")
    assert later["at_ms"] >= progress["at_ms"]
    task = wait_task(jobs.lane.producer, task_id, timeout_s=60)
    assert task["state"] == "SUCCEEDED" and task["result"] == {"steps": 40, "resumed_from": 0}
    (attempt,) = jobs.attempts(task_id)
    assert attempt["progress"]["fraction"] == 1.0
    assert attempt["progress"]["details"] == {"i": 40}
    assert task["checkpoint"] is None  # no attempt failed: nothing to resume from


@pytest.mark.timeout(180)
def test_a_task_killed_mid_loop_resumes_from_its_checkpoint(jobs: JobLane,
                                                            tmp_path: Path) -> None:
    jobs.supervise()
    journal = tmp_path / "steps.txt"
    # 30 steps of 100 ms, 1.5 s per attempt: each attempt is killed part-way until one
    # finishes what is left.
    task_id = jobs.submit({"steps": 30, "step_s": 0.1, "path": str(journal)},
                          attempt_timeout_ms=1500, idempotency="IDEMPOTENT", max_attempts=6,
                          backoff={"initial_ms": 50, "max_ms": 50, "multiplier": 1.0,
                                   "jitter": 0.0})
    task = wait_task(jobs.lane.producer, task_id, timeout_s=90)
    assert task["state"] == "SUCCEEDED", task
    history = jobs.attempts(task_id)
    assert len(history) >= 2, history
    killed = history[:-1]
    for attempt in killed:
        assert attempt["kill_reason"] == "ATTEMPT_TIMEOUT", attempt
        assert attempt["progress"] is not None and attempt["progress"]["details"]["i"] >= 1
    # The last attempt started after the previous one's last report.
    resumed_from = task["result"]["resumed_from"]
    assert resumed_from == killed[-1]["progress"]["details"]["i"], (task, killed[-1])
    assert task["checkpoint"] == killed[-1]["progress"]["details"]
    steps = [int(line.split()[1]) for line in journal.read_text().splitlines()]
    assert sorted(set(steps)) == list(range(1, 31))
    # Finished parts are not redone: a step runs twice only when a kill cut it between its
    # work and its report (at most once per kill).
    redone = sum(count - 1 for count in Counter(steps).values())
    assert redone <= len(killed), Counter(steps)
    assert len(steps) < 30 + len(killed) + 1


@pytest.mark.timeout(120)
def test_a_handler_that_stops_reporting_is_killed_at_its_progress_timeout(
        jobs: JobLane) -> None:
    jobs.supervise()
    # Two quick steps, then silence for 30 s; the progress timeout is 800 ms, the attempt
    # timeout a minute.
    task_id = jobs.submit({"steps": 5, "step_s": 0.05, "silent_after": 2, "silent_s": 30},
                          progress_timeout_ms=800, attempt_timeout_ms=60_000,
                          max_attempts=1)
    task = wait_task(jobs.lane.producer, task_id, timeout_s=60)
    assert task["state"] in ("NEEDS_REVIEW", "FAILED"), task
    assert task["failure"]["code"] == "PROGRESS_TIMEOUT", task
    (attempt,) = jobs.attempts(task_id)
    assert attempt["kill_reason"] == "PROGRESS_TIMEOUT", attempt
    # Our report decided it, or (late) the server's expiry did and kept its facts.
    assert attempt["code"] in ("PROGRESS_TIMEOUT", "LEASE_EXPIRED"), attempt
    ran_ms = attempt["killed_at_ms"] - attempt["started_at_ms"]
    # Silent after ~100 ms of steps: killed 800 ms later, within the kill bound.
    assert 800 <= ran_ms < 100 + 800 + KILL_BOUND_MS, attempt
    # Its last report reached the server with the kill's report: the next attempt's
    # checkpoint.
    assert attempt["progress"]["details"] == {"i": 2}
    assert task["checkpoint"] == {"i": 2}


@pytest.mark.timeout(180)
def test_the_long_job_example_resumes_after_its_crash(orbit: OrbitEnv, tmp_path: Path) -> None:
    """examples/long_job (docs/handlers.md): SIGKILLed after item 12 of 30, it resumes after
    item 12 with the sum so far and no item runs twice."""
    lines = run_example("long_job", orbit, tmp_path)
    assert len(lines) == 5, lines
    assert re.fullmatch(r'task=\w+ state=SUCCEEDED result=\{"resumed_after":12,"sum":9455\}',
                        lines[0]), lines
    assert lines[1:4] == ["attempt=1 outcome=UNKNOWN code=HANDLER_CRASHED",
                          "attempt=2 outcome=SUCCEEDED code=None",
                          "items=30 run_twice=0"], lines
    assert lines[4] == "worker_drained=true started=2 confirmed=2 running=0", lines
