"""Per-slot control groups with real processes: the kernel's OOM kill recorded MEMORY_LIMIT
with its count, cgroup.kill taking what left the process group, the groups removed at
close and leftovers of a dead run removed at start. They need a writable memory cgroup (v2
delegated, or v1's controller) and skip with the reason where the host has none."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from pathlib import Path

import msgspec
import orjson
import pytest
from pool_support import (
    request,
    run,
    running_pool,
    snapshot,
    wait_all_gone,
    wait_for_pids,
)

from orbit_supervisor.attempts import Attempt
from orbit_supervisor.cgroup_plan import choose
from orbit_supervisor.cgroups import ChildCgroups, probe_host
from orbit_supervisor.pool import ChildOutcome, PoolStats
from orbit_wire.model import Capability, Outcome

MIB = 1024 * 1024
HOST = probe_host()
PLAN = choose(HOST, 100 * MIB, None)
needs_memory_cgroup = pytest.mark.skipif(
    PLAN.memory is None, reason="no writable memory cgroup on this host (neither a delegated "
    "cgroup v2 group with the memory controller nor cgroup v1's memory controller)")
needs_cgroup_kill = pytest.mark.skipif(
    not PLAN.kill_v2, reason="no writable cgroup v2 group with cgroup.kill on this host")


def _sup_request(handler: str, payload: dict[str, str]) -> Attempt:
    """An attempt of a handler of supervisor_handlers (version v1)."""
    att = request(handler, payload)
    return Attempt(msgspec.structs.replace(att.reservation,
                                           capability=Capability(handler, "v1", "v1")),
                   att.lease)


def _procs(path: str) -> list[int]:
    with open(os.path.join(path, "cgroup.procs")) as fh:
        return [int(x) for x in fh.read().split()]


@needs_memory_cgroup
def test_kernel_oom_kill_is_memory_limit_with_its_count_and_the_slot_recovers() -> None:
    async def scenario() -> tuple[ChildOutcome, ChildOutcome, PoolStats, list[str], bool]:
        async with running_pool(1, child_memory_max=100 * MIB) as pool:
            groups = pool.cgroups
            assert groups is not None
            dirs = groups.slot_dirs(0)
            hog = await pool.execute(request("memory_hog", {"mib": 300, "hold": 30}))
            after = await pool.execute(request("whoami"))
            pid = orjson.loads(after.result_json or "")["pid"]
            placed = all(pid in _procs(path) for path in dirs)  # the next child too
            return hog, after, pool.stats(), dirs, placed
    hog, after, stats, dirs, placed = run(scenario())
    assert (hog.outcome, hog.code) == (Outcome.UNKNOWN, "MEMORY_LIMIT")
    assert hog.report.kill_reason == "MEMORY_LIMIT" and hog.report.signal == signal.SIGKILL
    assert hog.report.oom_kills is not None and hog.report.oom_kills >= 1  # the kernel's
    assert after.outcome is Outcome.SUCCEEDED and placed
    assert stats.killed == {"MEMORY_LIMIT": 1} and stats.crashed == 0
    assert dirs and not any(os.path.exists(path) for path in dirs)  # removed at close


@needs_cgroup_kill
def test_kill_takes_a_setsid_grandchild_that_left_the_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"

    async def scenario() -> tuple[ChildOutcome, list[int], list[int], ChildOutcome]:
        async with running_pool(1, child_memory_max=200 * MIB) as pool:
            groups = pool.cgroups
            assert groups is not None
            req = request("blocked_read", {"pid_file": str(pid_file)})
            task = asyncio.create_task(pool.execute(req))
            pids = await wait_for_pids(pid_file, 3)  # child, same group, own session
            v2_dir = groups.slot_dir(0, "v2")
            assert v2_dir is not None
            in_group = _procs(v2_dir)
            procs = snapshot(pids)
            assert os.getpgid(pids[2]) != os.getpgid(pids[0])  # it left the process group
            assert pool.kill(req, "LEASE_LOST")
            outcome = await task
            left = await asyncio.to_thread(wait_all_gone, procs, 2.0)
            assert left == [], f"still running after 2 s: {left}"
            after = await pool.execute(request("echo"))
            return outcome, pids, in_group, after
    outcome, pids, in_group, after = run(scenario())
    assert set(pids) <= set(in_group)  # all three were in the slot's group
    assert (outcome.outcome, outcome.code) == (Outcome.UNKNOWN, "LEASE_LOST")
    assert after.outcome is Outcome.SUCCEEDED


@needs_cgroup_kill
def test_cgroup_kill_reaches_a_process_no_tree_walk_finds() -> None:
    # A grandchild re-parented away from its parent (here to init, or whatever reaps
    # orphans for this test process): only the group still knows it.
    groups = ChildCgroups.open(64 * MIB, None, 1, logging.getLogger("test.cgroups"))
    try:
        v2_dir = groups.slot_dir(0, "v2")
        assert v2_dir is not None
        out = subprocess.run(
            ["sh", "-c", f"echo $$ > {v2_dir}/cgroup.procs; setsid sleep 1000 >/dev/null "
                         "2>&1 & echo $!"], capture_output=True, check=True, timeout=10)
        orphan = int(out.stdout.split()[-1])
        procs = snapshot([orphan])
        assert procs and orphan in _procs(v2_dir)
        assert groups.kill(0)
        assert wait_all_gone(procs, 2.0) == []
    finally:
        run(groups.aclose())
    assert not any(os.path.exists(d) for d in groups.slot_dirs(0))


@needs_memory_cgroup
def test_groups_of_a_dead_run_are_removed_at_start(caplog: pytest.LogCaptureFixture) -> None:
    own = HOST.v1_memory_dir if PLAN.memory == "v1" else HOST.v2_dir
    assert own is not None
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)  # its pid is free: the run that named a group for it is gone
    leftover = os.path.join(own, f"orbit-{dead.pid}")
    os.makedirs(os.path.join(leftover, "slot-0"), exist_ok=True)
    caplog.set_level(logging.INFO, logger="test.cgroups")
    groups = ChildCgroups.open(64 * MIB, None, 1, logging.getLogger("test.cgroups"))
    try:
        assert not os.path.exists(leftover)
        assert "left by an earlier run" in caplog.text
        assert f"child limits: {PLAN.mode.value}" in caplog.text  # the line said at start
    finally:
        run(groups.aclose())


@needs_cgroup_kill
def test_a_lost_templates_detached_grandchild_dies_with_its_slots_group(
        tmp_path: Path) -> None:
    # Without the orphan reaper (reap_orphans=False) only the slot's group still reaches
    # the grandchild that left the child's process group and session.
    pid_file = tmp_path / "pids"

    async def scenario() -> tuple[ChildOutcome, list[int], list[int], ChildOutcome]:
        async with running_pool(1, spec="supervisor_handlers:HANDLERS",
                                child_memory_max=200 * MIB) as pool:
            lost = await pool.execute(_sup_request("sup.kills_its_template",
                                                   {"pid_file": str(pid_file)}))
            pids = await wait_for_pids(pid_file, 3)
            left = await asyncio.to_thread(wait_all_gone, snapshot(pids), 2.0)
            after = await pool.execute(_sup_request("sup.upper", {"text": "x"}))
            return lost, pids, left, after
    lost, pids, left, after = run(scenario())
    assert lost.report.kill_reason == "TEMPLATE_LOST" and len(pids) == 3
    assert left == [], f"still running after 2 s: {left}"
    assert after.outcome is Outcome.SUCCEEDED


@pytest.mark.skipif(PLAN.memory is None or choose(HOST, None, 0.5).cpu is None,
                    reason="no writable memory and cpu cgroups on this host")
def test_each_slot_holds_its_child_under_both_limits() -> None:
    async def scenario() -> tuple[list[int], dict[str, dict[str, str]], list[list[int]]]:
        async with running_pool(2, child_memory_max=64 * MIB, child_cpu_max=0.5) as pool:
            groups = pool.cgroups
            assert groups is not None
            pids = sorted(pool.child_pids().values())
            files: dict[str, dict[str, str]] = {}
            members: list[list[int]] = []
            for index in range(2):
                for kind in ("v2", "memory", "cpu"):
                    path = groups.slot_dir(index, kind)
                    if path is None:
                        continue
                    members.append(_procs(path))
                    for name in ("memory.max", "cpu.max", "memory.limit_in_bytes",
                                 "memory.memsw.limit_in_bytes", "cpu.cfs_quota_us"):
                        if os.path.exists(os.path.join(path, name)):
                            with open(os.path.join(path, name)) as fh:
                                files.setdefault(f"{kind}/{index}", {})[name] = fh.read().strip()
            return pids, files, members
    pids, files, members = run(scenario())
    assert all(len(m) == 1 and m[0] in pids for m in members)  # one child per slot group
    assert sorted({m[0] for m in members}) == pids
    for index in range(2):
        if PLAN.memory == "v1":
            assert files[f"memory/{index}"]["memory.limit_in_bytes"] == str(64 * MIB)
            if HOST.v1_memsw:
                assert files[f"memory/{index}"]["memory.memsw.limit_in_bytes"] == str(64 * MIB)
        else:
            assert files[f"v2/{index}"]["memory.max"] == str(64 * MIB)
        cpu = files.get(f"cpu/{index}", {}).get("cpu.cfs_quota_us") or files[
            f"v2/{index}"]["cpu.max"].split()[0]
        assert cpu == "50000"
