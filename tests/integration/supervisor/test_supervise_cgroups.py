"""``orbit-supervise --child-memory-max`` with real processes: the mode said at start, a
handler past the limit OOM-killed by the kernel in its own cgroup and recorded
MEMORY_LIMIT (the count in the log), the parent alive and serving the next task, and the
groups gone once the supervisor exits; a cancel's kill taking a grandchild that left the
process group, from the slot's group. Skipped where the host has no writable memory
cgroup."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from supervisor_support import SupEnv, alive, attempts, submit, wait_pids, wait_task
from support.waiting import wait_until

from orbit_supervisor.cgroup_plan import choose
from orbit_supervisor.cgroups import probe_host

HOST = probe_host()
PLAN = choose(HOST, 100 << 20, 1.0)

pytestmark = pytest.mark.skipif(
    PLAN.memory is None, reason="no writable memory cgroup on this host (neither a delegated "
    "cgroup v2 group with the memory controller nor cgroup v1's memory controller)")


def _bases(pid: int) -> list[str]:
    """The supervisor's groups: it runs in this test's own groups (its parent)."""
    owns = [HOST.v2_dir if PLAN.kill_v2 or PLAN.memory == "v2" else None,
            HOST.v1_memory_dir if PLAN.memory == "v1" else None,
            HOST.v1_cpu_dir if PLAN.cpu == "v1" else None]
    return [os.path.join(own, f"orbit-{pid}") for own in owns if own is not None]


def test_a_handler_past_the_limit_is_oom_killed_and_recorded_memory_limit(
        sup_env: SupEnv) -> None:
    sup = sup_env.start(workers=1, extra=("--child-memory-max", "100M",
                                          "--child-cpu-max", "1"))
    sup.wait_log(f"child limits: {PLAN.mode.value}: ")
    bases = _bases(sup.pid)
    assert bases and all(os.path.isdir(os.path.join(b, "slot-0")) for b in bases)
    task_id = submit(sup_env.producer, sup_env.queue_id, "memory_hog", {"mib": 300, "hold": 30},
                     max_attempts=1, lease_ttl_ms=5000)
    task = wait_task(sup_env.producer, task_id, timeout_s=30)
    assert task["state"] == "NEEDS_REVIEW"
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert (att["outcome"], att["code"], att["kill_reason"], att["signal"]) == (
        "UNKNOWN", "MEMORY_LIMIT", "MEMORY_LIMIT", 9)
    sup.wait_log("killed by the kernel over the memory limit (1 OOM kill")
    assert "over the limit; killing it" not in sup.log()  # not the RSS watch's kill
    nxt = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "small"})
    assert wait_task(sup_env.producer, nxt)["result"] == {"text": "SMALL"}  # parent serves
    sup.send(signal.SIGTERM)
    sup.wait(20)
    wait_until(lambda: not any(os.path.exists(b) for b in bases), timeout=5,
               what=lambda: f"the groups removed at exit: {bases}")


@pytest.mark.skipif(not PLAN.kill_v2, reason="no writable cgroup v2 group with cgroup.kill")
def test_a_cancel_kills_the_detached_grandchild_through_the_slots_group(
        sup_env: SupEnv, tmp_path: Path) -> None:
    sup = sup_env.start(workers=1, extra=("--child-memory-max", "500M"))
    sup.wait_log("kills through cgroup.kill")
    pid_file = tmp_path / "cancel.pids"
    task_id = submit(sup_env.producer, sup_env.queue_id, "blocked_read",
                     {"pid_file": str(pid_file)}, lease_ttl_ms=30000, cancel_grace_ms=0)
    pids = wait_pids(pid_file, "handler running")  # child, same group, own session
    assert HOST.v2_dir is not None
    with open(os.path.join(HOST.v2_dir, f"orbit-{sup.pid}", "slot-0", "cgroup.procs")) as fh:
        in_group = {int(x) for x in fh.read().split()}
    assert set(pids) <= in_group and os.getpgid(pids[2]) != os.getpgid(pids[0])
    cancelled = sup_env.producer.post(f"/v1/tasks/{task_id}/cancel", json={"reason": "test"})
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
    wait_until(lambda: not alive(pids), timeout=10, what="the child and its grandchildren")
