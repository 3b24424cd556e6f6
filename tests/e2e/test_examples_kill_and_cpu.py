"""The two other runnable examples against a real orbit-server: the hard kill of an
uncooperative handler (and its grandchild), and CPU-bound tasks on two children."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import psutil
from support.examples import example_lines, example_process, run_example
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect
from support.waiting import wait_until


def _grandchild_started(pid: int) -> bool:
    """Whether the handler runs: its grandchild (``sleep 300``) is among ``pid``'s
    descendants (the template, its child, the grandchild)."""
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for process in descendants:
        try:
            if process.cmdline() == ["sleep", "300"]:
                return True
        except psutil.Error:
            continue
    return False


def _ended_attempt(lane: Lane) -> dict[str, Any] | None:
    """The lane's one task's last attempt once it has an outcome."""
    tasks = expect(lane.producer.get(f"/v1/queues/{lane.queue}/tasks"), 200)["tasks"]
    if not tasks:
        return None
    attempts = expect(lane.producer.get(f"/v1/tasks/{tasks[0]['id']}/attempts"),
                      200)["attempts"]
    return attempts[-1] if attempts and attempts[-1]["outcome"] else None


def test_uncooperative_handler_is_killed_with_its_grandchild(
    orbit: OrbitEnv, tmp_path: Path
) -> None:
    """Which code the killed attempt gets is a race on a free-running worker: its kill
    report leaves at the local expiry, a margin before the server's lease end, and the
    attempt is LEASE_LOST if the server reads it in time, the reaper's LEASE_EXPIRED if
    not (docs/supervisor.md, "Kill"). The test decides the race: it holds the worker
    (SIGSTOP) from the moment the handler runs until the reaper has ended the attempt.
    Resumed, the supervisor finds its local expiry past, kills the handler and its
    grandchild, and its late report leaves the kill's reason on the attempt."""
    with example_process("uncooperative", orbit, tmp_path) as (proc, lane):
        wait_until(lambda: _grandchild_started(proc.pid), timeout=60,
                   what="the handler running (its grandchild started)")
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            ended = wait_until(lambda: _ended_attempt(lane), timeout=10,
                               what="the reaper ending the attempt")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        lines = example_lines(proc, tmp_path)
    # Held in time: the lease ran out before any report of the kill.
    assert (ended["code"], ended["kill_reason"]) == ("LEASE_EXPIRED", None), ended
    assert len(lines) == 3, lines
    assert re.fullmatch(
        r"task=[0-9a-f]{32} state=NEEDS_REVIEW outcome=UNKNOWN code=LEASE_EXPIRED "
        r"kill_reason=ATTEMPT_TIMEOUT", lines[0],
    ), lines[0]
    assert re.fullmatch(
        r"handler pid=\d+ alive=false; grandchild pid=\d+ alive=false", lines[1]
    ), lines[1]
    assert lines[2].startswith("worker_drained=true started=1 ")


def test_cpu_heavy_tasks_all_succeed_on_two_children(
    orbit: OrbitEnv, tmp_path: Path
) -> None:
    lines = run_example("cpu_heavy", orbit, tmp_path)
    assert len(lines) == 8, lines
    for line in lines[:6]:
        assert re.fullmatch(
            r'task=[0-9a-f]{32} state=SUCCEEDED result=\{"limit":300000,"primes":25997\} '
            r"cpu_ms=\d+", line
        ), line
    assert re.fullmatch(r"tasks=6 wall_ms=\d+ cpu_ms=\d+ parallelism=\d+\.\d\d", lines[6])
    assert lines[7] == "worker_drained=true started=6 confirmed=6 running=0"
