"""Memory limit while a task runs, and recycling between tasks (max tasks, memory)."""

from __future__ import annotations

from pathlib import Path

import orjson
from pool_support import request, run, running_pool, snapshot, wait_all_gone

from orbit_supervisor.pool import ChildOutcome, PoolStats
from orbit_wire.model import Outcome

MIB = 1024 * 1024


def test_memory_limit_kills_mid_task_and_the_slot_recovers() -> None:
    async def scenario() -> tuple[ChildOutcome, ChildOutcome, PoolStats]:
        async with running_pool(1, max_memory_bytes=150 * MIB,
                                memory_check_interval=0.02) as pool:
            hog = await pool.execute(request("memory_hog", {"mib": 300, "hold": 30}))
            after = await pool.execute(request("echo"))
            return hog, after, pool.stats()
    hog, after, stats = run(scenario())
    assert (hog.outcome, hog.code) == (Outcome.UNKNOWN, "MEMORY_LIMIT")
    assert hog.report.kill_reason == "MEMORY_LIMIT" and hog.report.signal == 9
    assert hog.report.peak_rss_bytes is not None and hog.report.peak_rss_bytes > 150 * MIB
    assert after.outcome is Outcome.SUCCEEDED
    assert stats.killed == {"MEMORY_LIMIT": 1} and stats.crashed == 0


def test_memory_held_after_a_task_recycles_the_child() -> None:
    # The in-task watcher's first look is one (long) interval in: only the between-task
    # check can see the leak.
    async def scenario() -> tuple[ChildOutcome, ChildOutcome, PoolStats]:
        async with running_pool(1, max_memory_bytes=100 * MIB,
                                memory_check_interval=30) as pool:
            leaky = await pool.execute(request("grow_then_return", {"mib": 120}))
            after = await pool.execute(request("whoami"))
            return leaky, after, pool.stats()
    leaky, after, stats = run(scenario())
    assert leaky.outcome is Outcome.SUCCEEDED
    assert orjson.loads(after.result_json or "")["pid"] != leaky.report.child_pid
    assert (stats.recycled, stats.crashed, stats.killed) == (1, 0, {})


def test_children_are_recycled_after_max_tasks() -> None:
    async def scenario() -> tuple[list[int], PoolStats]:
        async with running_pool(1, max_tasks_per_child=2) as pool:
            outs = [await pool.execute(request("whoami")) for _ in range(5)]
            return [orjson.loads(o.result_json or "")["pid"] for o in outs], pool.stats()
    pids, stats = run(scenario())
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert stats.recycled == 2 and stats.spawned == 3 and stats.crashed == 0


def test_memory_of_descendants_counts_toward_the_limit(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"

    async def scenario() -> tuple[ChildOutcome, list[int]]:
        async with running_pool(1, max_memory_bytes=150 * MIB,
                                memory_check_interval=0.02) as pool:
            out = await pool.execute(request("memory_hog_grandchild",
                                             {"mib": 250, "pid_file": str(pid_file)}))
            return out, [int(x) for x in pid_file.read_text().split()]
    out, pids = run(scenario())
    assert (out.code, out.report.kill_reason) == ("MEMORY_LIMIT", "MEMORY_LIMIT")
    assert wait_all_gone(snapshot(pids), 2.0) == []
