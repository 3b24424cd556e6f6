"""A shutdown that keeps its word, measured from outside with real processes: the first
signal says at once what is drained and what a second one does; ``--shutdown-timeout`` is
kept (the process exits soon after it, measured from the signal); the killed attempt's
report, with its facts, reaches the server before the process exits, so the task does not
sit RUNNING until its lease expires."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from supervisor_support import (
    SupEnv,
    alive,
    attempts,
    read_pids,
    submit,
)
from support.orbit_http import expect
from support.waiting import UNIT, wait_until

TIMEOUT_S = 2.0


def _running_attempt(sup_env: SupEnv, task_id: str) -> bool:
    history = attempts(sup_env.producer, task_id)["attempts"]
    return any(a["state"] == "RUNNING" for a in history)


def test_a_hung_handler_is_killed_at_the_timeout_and_reported_before_exit(
        sup_env: SupEnv, tmp_path: Path) -> None:
    sup = sup_env.start(workers=1, extra=("--shutdown-timeout", str(TIMEOUT_S)))
    pid_file = tmp_path / "pids"
    # Blocked in a read that never returns; its lease (30 s) would outlive the test.
    task_id = submit(sup_env.producer, sup_env.queue_id, "blocked_read",
                     {"pid_file": str(pid_file)}, lease_ttl_ms=30000, max_attempts=1)
    wait_until(lambda: _running_attempt(sup_env, task_id), timeout=20, what="running")
    wait_until(lambda: len(read_pids(pid_file)) >= 2, timeout=20, what="its processes")
    started = read_pids(pid_file)
    att_id = next(a["id"] for a in attempts(sup_env.producer, task_id)["attempts"]
                  if a["state"] == "RUNNING")
    t0 = time.monotonic()
    sup.send(signal.SIGTERM)
    # Said at once: what is drained, by queue, and what a second signal does.
    sup.wait_log("SIGTERM: draining", timeout_s=5)
    said_after = time.monotonic() - t0
    assert sup.wait(TIMEOUT_S + 20) == 6
    took = time.monotonic() - t0
    print(f"--shutdown-timeout {TIMEOUT_S:g} s: exited {took:.3f} s after SIGTERM; the "
          f"drain was logged after {said_after:.3f} s")
    assert took >= TIMEOUT_S
    assert took < TIMEOUT_S + 2.0 * UNIT
    log = sup.log()
    line = next(x for x in log.splitlines() if "SIGTERM: draining" in x)
    assert f"1 on queue {sup_env.queue_id}: task {task_id} attempt {att_id}" in line
    assert "second SIGINT or SIGTERM" in line
    assert f"at most {TIMEOUT_S:g} s" in line
    # Right after the exit: the server has the kill's report (not a lease expiry).
    task = expect(sup_env.producer.get(f"/v1/tasks/{task_id}"), 200)
    assert task["state"] != "RUNNING", task
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert att["state"] != "RUNNING", att
    # A shutdown kill carries its own cause, never a lease's.
    assert (att["code"], att["kill_reason"]) == ("SHUTDOWN", "SHUTDOWN"), att
    assert att["child_pid"] == started[0], att
    assert att["signal"] == signal.SIGKILL, att
    assert att["cpu_ms"] is not None, att
    wait_until(lambda: not alive(started), timeout=5, what="the handler's processes gone")


def test_a_second_signal_kills_at_once_and_reports(sup_env: SupEnv, tmp_path: Path) -> None:
    sup = sup_env.start(workers=1)  # the default shutdown timeout: 30 s
    task_id = submit(sup_env.producer, sup_env.queue_id, "sleep", {"seconds": 60},
                     lease_ttl_ms=30000, max_attempts=1)
    wait_until(lambda: _running_attempt(sup_env, task_id), timeout=20, what="running")
    t0 = time.monotonic()
    sup.send(signal.SIGTERM)
    sup.wait_log("SIGTERM: draining", timeout_s=5)
    sup.send(signal.SIGTERM)
    assert sup.wait(20) == 6
    took = time.monotonic() - t0
    print(f"a second SIGTERM: exited {took:.3f} s after the first")
    assert took < 2.0 * UNIT
    assert "SIGTERM again: killing 1 running handler(s) now" in sup.log()
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert (att["code"], att["kill_reason"]) == ("SHUTDOWN", "SHUTDOWN"), att
    assert att["child_pid"] is not None, att
