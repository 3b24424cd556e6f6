"""Hard kills with real processes: lease lost, crashes, memory limit, SIGKILL of the parent."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from supervisor_support import SupEnv, alive, attempts, read_pids, submit, wait_pids, wait_task
from support.waiting import UNIT, wait_until

KILL_BOUND_S = 2.0 * UNIT  # generous: lease lost -> every process of the attempt gone


def _lost_attempt(sup_env: SupEnv, task_id: str) -> dict[str, Any]:
    """The attempt is UNKNOWN; it names its kill's cause itself (ATTEMPT_TIMEOUT here), or
    (when our report lost the race with the server's own expiry) it is LEASE_EXPIRED, our
    report is kept as evidence and its kill facts on the attempt."""
    wait_task(sup_env.producer, task_id)
    history = wait_until(lambda: _settled(attempts(sup_env.producer, task_id)), timeout=10,
                         what="attempt outcome and our report")
    (att,) = history["attempts"]
    assert att["outcome"] == "UNKNOWN", att
    return dict(att)


def _settled(history: dict[str, Any]) -> dict[str, Any] | None:
    (att,) = history["attempts"]
    if att["code"] in ("ATTEMPT_TIMEOUT", "LEASE_LOST"):
        assert att["kill_reason"] == att["code"], att  # a kill's code is its cause
        return history
    if att["code"] == "LEASE_EXPIRED" and att["kill_reason"] is not None and any(
            e["code"] == att["kill_reason"] for e in history["evidence"]):
        return history
    return None


@pytest.mark.parametrize("handler", ["c_spin", "ignores_sigterm", "blocked_read"])
def test_lease_lost_kills_child_and_grandchildren(sup_env: SupEnv, tmp_path: Path,
                                                  handler: str) -> None:
    sup = sup_env.start(workers=1)
    pid_file = tmp_path / f"{handler}.pids"
    task_id = submit(sup_env.producer, sup_env.queue_id, handler, {"pid_file": str(pid_file)},
                     attempt_timeout_ms=500, lease_ttl_ms=2000, max_attempts=1)
    pids = wait_pids(pid_file, "the handler started its grandchildren")
    # Wait well past the bound, so that the bound below is what decides.
    wait_until(lambda: not alive(pids), timeout=20, what=f"{handler} processes gone")
    gone_at_ms = time.time() * 1000
    att = _lost_attempt(sup_env, task_id)
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "NEEDS_REVIEW"  # uncertain and non-idempotent: never retried
    # Lease lost (at the expiry the server granted, the attempt timeout) -> all gone.
    assert gone_at_ms - att["lease_expires_at_ms"] < KILL_BOUND_S * 1000, att
    # Our report decided the attempt (ATTEMPT_TIMEOUT), or the server's expiry came first and
    # the attempt kept our late report's facts (LEASE_EXPIRED): either way it names the child,
    # and the task's failure names the cause.
    assert att["code"] in ("ATTEMPT_TIMEOUT", "LEASE_EXPIRED"), att
    assert att["kill_reason"] == "ATTEMPT_TIMEOUT", att
    assert (att["child_pid"], att["signal"]) == (pids[0], signal.SIGKILL), att
    assert wait_task(sup_env.producer, task_id)["failure"]["code"] == "ATTEMPT_TIMEOUT"
    # The slot got a fresh child: the next task runs.
    nxt = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "next"})
    assert wait_task(sup_env.producer, nxt)["result"] == {"text": "NEXT"}
    assert "killed the child of attempt" in sup.log()


@pytest.mark.parametrize(("kind", "field", "value"),
                         [("segfault", "signal", signal.SIGSEGV), ("exit3", "exit_code", 3)])
def test_crash_is_handler_crashed_and_the_slot_serves_the_next_task(
        sup_env: SupEnv, kind: str, field: str, value: int) -> None:
    sup_env.start(workers=1)
    task_id = submit(sup_env.producer, sup_env.queue_id, "crash", {"kind": kind},
                     max_attempts=1)
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "NEEDS_REVIEW"
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert (att["outcome"], att["code"]) == ("UNKNOWN", "HANDLER_CRASHED")
    assert att[field] == value, att
    nxt = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "after crash"})
    assert wait_task(sup_env.producer, nxt)["result"] == {"text": "AFTER CRASH"}


def test_crash_loop_spends_attempts_and_ends(sup_env: SupEnv) -> None:
    sup_env.start(workers=1)
    task_id = submit(sup_env.producer, sup_env.queue_id, "crash", {"kind": "segfault"},
                     idempotency="IDEMPOTENT", max_attempts=3,
                     backoff={"initial_ms": 10, "max_ms": 20, "multiplier": 1.0, "jitter": 0})
    task = wait_task(sup_env.producer, task_id, timeout_s=30)
    assert task["state"] == "NEEDS_REVIEW"
    history = attempts(sup_env.producer, task_id)["attempts"]
    assert len(history) == 3
    assert all(a["code"] == "HANDLER_CRASHED" for a in history)


def test_memory_limit_kills_mid_task(sup_env: SupEnv) -> None:
    sup_env.start(workers=1, extra=("--max-memory-per-child", "100M"))
    task_id = submit(sup_env.producer, sup_env.queue_id, "memory_hog", {"mib": 200, "hold": 30},
                     max_attempts=1, lease_ttl_ms=5000)
    task = wait_task(sup_env.producer, task_id, timeout_s=30)
    assert task["state"] == "NEEDS_REVIEW"
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert (att["outcome"], att["code"], att["kill_reason"]) == (
        "UNKNOWN", "MEMORY_LIMIT", "MEMORY_LIMIT")
    assert task["failure"]["code"] == "MEMORY_LIMIT"
    nxt = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "small"})
    assert wait_task(sup_env.producer, nxt)["result"] == {"text": "SMALL"}


def test_sigkill_of_the_supervisor_leaves_nothing_alive(sup_env: SupEnv, tmp_path: Path) -> None:
    sup = sup_env.start(workers=2)
    files = [tmp_path / "a.pids", tmp_path / "b.pids"]
    for handler, path in zip(("c_spin", "blocked_read"), files, strict=True):
        submit(sup_env.producer, sup_env.queue_id, handler, {"pid_file": str(path)},
               lease_ttl_ms=30000)
    for path in files:
        wait_pids(path, "handlers running")
    tree = sup.descendants()  # template, children, grandchildren in their groups
    started = [pid for p in files for pid in read_pids(p)]
    assert tree
    sup.send(signal.SIGKILL)
    sup.wait(10)
    wait_until(lambda: not alive(tree + started), timeout=5.0, what="every descendant gone")


def test_cancel_push_kills_and_the_report_is_accepted(sup_env: SupEnv, tmp_path: Path) -> None:
    sup_env.start(workers=1)
    pid_file = tmp_path / "cancel.pids"
    # A grace of 0: the cancel kills at once (test_supervise_cooperative_cancel.py has the
    # grace).
    task_id = submit(sup_env.producer, sup_env.queue_id, "blocked_read",
                     {"pid_file": str(pid_file)}, lease_ttl_ms=30000, cancel_grace_ms=0)
    pids = wait_pids(pid_file, "handler running")
    t0 = time.monotonic()
    task = sup_env.producer.post(f"/v1/tasks/{task_id}/cancel", json={"reason": "test"})
    assert task.status_code == 200 and task.json()["state"] == "CANCELLED"
    # Wait well past the bound, so that the bound below is what decides.
    wait_until(lambda: not alive(pids), timeout=20, what="cancelled handler killed")
    assert time.monotonic() - t0 < KILL_BOUND_S
    # The lease was still valid, so our report decided the attempt (history kept).
    history = wait_until(lambda: _with_code(attempts(sup_env.producer, task_id)), timeout=10,
                         what="report")
    (att,) = history["attempts"]
    # A cancel's kill says so: never LEASE_LOST.
    assert (att["outcome"], att["code"], att["kill_reason"]) == (
        "UNKNOWN", "TASK_CANCELLED", "TASK_CANCELLED")
    assert wait_task(sup_env.producer, task_id)["state"] == "CANCELLED"
    # Its reap's facts joined the attempt; no late report is kept for an ordinary kill.
    assert history["evidence"] == []


def _with_code(history: dict[str, Any]) -> dict[str, Any] | None:
    return history if all(a["code"] for a in history["attempts"]) else None


def test_children_are_recycled_after_max_tasks(sup_env: SupEnv) -> None:
    sup_env.start(workers=1, extra=("--max-tasks-per-child", "2"))
    pids = []
    for _ in range(4):  # one at a time, so the order of children is known
        task_id = submit(sup_env.producer, sup_env.queue_id, "whoami", {})
        pids.append(wait_task(sup_env.producer, task_id)["result"]["pid"])
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[0] != pids[2], pids


def test_a_lost_template_leaves_nothing_its_children_started(sup_env: SupEnv,
                                                             tmp_path: Path) -> None:
    # The handler starts a grandchild in its group and one double-forked into its own
    # session, then SIGKILLs the template: the child dies by its death signal, and the
    # detached grandchild is re-parented to orbit-supervise (a subreaper), which kills it.
    sup = sup_env.start(workers=1)
    pid_file = tmp_path / "orphans.pids"
    task_id = submit(sup_env.producer, sup_env.queue_id, "kills_its_template",
                     {"pid_file": str(pid_file)}, max_attempts=1, lease_ttl_ms=30000)
    pids = wait_pids(pid_file, "the handler started its grandchildren")
    try:
        # Gone, and reaped: not even a zombie is left under the supervisor.
        wait_until(lambda: not any(psutil.pid_exists(p) for p in pids),
                   timeout=KILL_BOUND_S + 3.0, what="the child and both grandchildren gone")
    finally:
        for pid in alive(pids):  # only if the test failed: nothing may outlive it
            os.kill(pid, signal.SIGKILL)
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "NEEDS_REVIEW"
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert (att["outcome"], att["code"], att["kill_reason"]) == (
        "UNKNOWN", "HANDLER_CRASHED", "TEMPLATE_LOST")
    assert "left behind by a lost template" in sup.log()
    # A new template serves the next task.
    nxt = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "after"})
    assert wait_task(sup_env.producer, nxt)["result"] == {"text": "AFTER"}
