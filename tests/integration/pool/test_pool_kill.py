"""Crashes, hard kills and process-tree cleanup with real children and grandchildren."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import orjson
import pytest
from pool_support import (
    request,
    run,
    running_pool,
    snapshot,
    wait_all_gone,
    wait_busy,
    wait_for_pids,
)
from support.waiting import UNIT

from orbit_supervisor.pool import ChildOutcome, PoolStats
from orbit_wire.model import Outcome


@pytest.mark.parametrize(("kind", "exit_code", "sig"),
                         [("segfault", None, signal.SIGSEGV), ("exit3", 3, None)])
def test_crash_is_reported_and_the_slot_gets_a_fresh_child(kind: str, exit_code: int | None,
                                                           sig: int | None) -> None:
    async def scenario() -> tuple[ChildOutcome, ChildOutcome, PoolStats]:
        async with running_pool(1) as pool:
            crashed = await pool.execute(request("crash", {"kind": kind}))
            after = await pool.execute(request("echo", {"x": 1}))
            return crashed, after, pool.stats()
    crashed, after, stats = run(scenario())
    assert (crashed.outcome, crashed.code) == (Outcome.UNKNOWN, "HANDLER_CRASHED")
    assert (crashed.report.exit_code, crashed.report.signal) == (exit_code, sig)
    assert crashed.report.kill_reason is None and crashed.report.cpu_ms is not None
    assert after.outcome is Outcome.SUCCEEDED
    assert after.report.child_pid != crashed.report.child_pid
    assert (stats.crashed, stats.spawned) == (1, 2)


@pytest.mark.parametrize("kind", ["close_socket", "garbage"])
def test_a_child_that_breaks_its_channel_is_killed(kind: str) -> None:
    async def scenario() -> tuple[ChildOutcome, ChildOutcome]:
        async with running_pool(1) as pool:
            broken = await pool.execute(request("crash", {"kind": kind}))
            after = await pool.execute(request("echo"))
            return broken, after
    started = time.monotonic()
    broken, after = run(scenario())
    assert (broken.outcome, broken.code) == (Outcome.UNKNOWN, "HANDLER_CRASHED")
    assert broken.report.signal == signal.SIGKILL
    assert after.outcome is Outcome.SUCCEEDED
    assert time.monotonic() - started < 10 * UNIT  # not the handler's 30 s sleep


@pytest.mark.parametrize("handler", ["c_spin", "ignores_sigterm", "blocked_read"])
def test_kill_takes_the_child_and_every_descendant(handler: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"

    async def scenario() -> tuple[ChildOutcome, list[int], float, ChildOutcome, PoolStats]:
        async with running_pool(1) as pool:
            req = request(handler, {"pid_file": str(pid_file)})
            task = asyncio.create_task(pool.execute(req))
            pids = await wait_for_pids(pid_file, 3)
            if handler == "c_spin":
                await asyncio.sleep(0.1 * UNIT)  # the scenario: well inside the regex by now
            procs = snapshot(pids)
            assert len(procs) == 3
            t0 = time.monotonic()
            assert pool.kill(req, "LEASE_LOST")
            assert not pool.kill(req, "LEASE_LOST")  # already killed
            outcome = await task
            latency = time.monotonic() - t0
            left = await asyncio.to_thread(wait_all_gone, procs, 2.0)
            assert left == [], f"still running after 2 s: {left}"
            after = await pool.execute(request("echo"))
            return outcome, pids, latency, after, pool.stats()
    outcome, pids, latency, after, stats = run(scenario())
    assert (outcome.outcome, outcome.code) == (Outcome.UNKNOWN, "LEASE_LOST")
    assert outcome.report.kill_reason == "LEASE_LOST"
    assert outcome.report.signal == signal.SIGKILL
    assert outcome.report.child_pid == pids[0]
    assert latency < 2.0 * UNIT
    assert after.outcome is Outcome.SUCCEEDED
    assert stats.killed == {"LEASE_LOST": 1} and stats.crashed == 0


def test_kill_with_another_code_and_reason() -> None:
    async def scenario() -> ChildOutcome:
        async with running_pool(1) as pool:
            req = request("sleep", {"seconds": 30})
            task = asyncio.create_task(pool.execute(req))
            await wait_busy(pool)
            assert pool.kill(req, "TASK_CANCELLED", code="LEASE_LOST")
            out = await task
            await asyncio.wait_for(pool.wait_idle(1), 5 * UNIT)  # the replacement is ready
            assert (pool.stats().idle, pool.being_replaced) == (1, 0)
            return out
    out = run(scenario())
    assert (out.code, out.report.kill_reason) == ("LEASE_LOST", "TASK_CANCELLED")


def test_kill_of_an_unknown_or_finished_attempt_returns_false() -> None:
    async def scenario() -> tuple[object, object]:
        async with running_pool(1) as pool:
            req = request("echo")
            await pool.execute(req)
            return pool.kill(req, "LEASE_LOST"), pool.kill(request("echo"), "LEASE_LOST")
    assert run(scenario()) == (None, None)


def test_processes_left_behind_by_a_finished_attempt_are_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"

    async def scenario() -> tuple[ChildOutcome, list[int]]:
        async with running_pool(1) as pool:
            out = await pool.execute(request("spawn_and_return", {"pid_file": str(pid_file)}))
            pids = [int(x) for x in pid_file.read_text().split()]
            return out, pids
    out, pids = run(scenario())
    assert out.outcome is Outcome.SUCCEEDED
    child, grandchildren = pids[0], pids[1:]
    assert child == out.report.child_pid and len(grandchildren) == 2
    assert wait_all_gone(snapshot(grandchildren), 2.0) == []


def test_cancelling_execute_kills_the_child() -> None:
    async def scenario() -> tuple[PoolStats, ChildOutcome]:
        async with running_pool(1) as pool:
            task = asyncio.create_task(pool.execute(request("sleep", {"seconds": 30})))
            await wait_busy(pool)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            after = await pool.execute(request("echo"))  # served by the replacement
            return pool.stats(), after
    stats, after = run(scenario())
    assert stats.killed == {"SHUTDOWN": 1} and after.outcome is Outcome.SUCCEEDED


def test_frames_with_a_wrong_generation_are_ignored() -> None:
    async def scenario() -> ChildOutcome:
        async with running_pool(1) as pool:
            return await pool.execute(request("forge"))
    out = run(scenario())
    assert out.outcome is Outcome.SUCCEEDED
    assert orjson.loads(out.result_json or "") == {"real": True}


def test_waiting_callers_are_served_in_turn_and_close_ends_them() -> None:
    async def scenario() -> tuple[list[ChildOutcome], PoolStats]:
        async with running_pool(2) as pool:
            outs = await asyncio.gather(*(pool.execute(request("sleep", {"seconds": 0.05}))
                                          for _ in range(6)))
            return list(outs), pool.stats()
    outs, stats = run(scenario())
    assert all(o.outcome is Outcome.SUCCEEDED for o in outs)
    assert len({o.report.child_pid for o in outs}) == 2
    assert (stats.idle, stats.busy, stats.replacing) == (2, 0, 0)


def test_close_kills_running_children() -> None:
    async def scenario() -> tuple[ChildOutcome, list[int]]:
        async with running_pool(2) as pool:
            task = asyncio.create_task(pool.execute(request("ignores_sigterm")))
            await wait_busy(pool)
            await asyncio.sleep(0.3 * UNIT)  # the scenario: the handler ignores SIGTERM by now
            pids = [p for p in pool.child_pids().values()]
            procs = snapshot([*pids, pool.template_pid or 0])
            await pool.close()
            out = await task
            assert await asyncio.to_thread(wait_all_gone, procs, 2.0) == []
            return out, pids
    out, pids = run(scenario())
    assert (out.outcome, out.code, out.report.kill_reason) == (
        Outcome.UNKNOWN, "SHUTDOWN", "SHUTDOWN")  # a shutdown kill says so
    assert len(pids) == 2


def test_a_lost_template_is_restarted_and_the_pool_keeps_serving() -> None:
    async def scenario() -> tuple[ChildOutcome, ChildOutcome, int | None, int | None]:
        async with running_pool(2) as pool:
            first_template = pool.template_pid
            lost = await pool.execute(request("kill_template"))
            after = await pool.execute(request("whoami"))
            return lost, after, first_template, pool.template_pid
    lost, after, first, second = run(scenario())
    assert (lost.outcome, lost.code, lost.report.kill_reason) == (
        Outcome.UNKNOWN, "HANDLER_CRASHED", "TEMPLATE_LOST")
    assert after.outcome is Outcome.SUCCEEDED
    assert first != second
    assert orjson.loads(after.result_json or "")["imported_in"] == second


def test_graceful_close_lets_running_tasks_finish() -> None:
    async def scenario() -> tuple[ChildOutcome, PoolStats, bool]:
        async with running_pool(2) as pool:
            task = asyncio.create_task(pool.execute(request("sleep", {"seconds": 0.3})))
            await wait_busy(pool)
            procs = snapshot([*pool.child_pids().values(), pool.template_pid or 0])
            await pool.close(kill=False)
            out = await task
            gone = await asyncio.to_thread(wait_all_gone, procs, 2.0) == []
            return out, pool.stats(), gone
    out, stats, gone = run(scenario())
    assert out.outcome is Outcome.SUCCEEDED and gone
    assert stats.killed == {} and stats.crashed == 0


def test_a_service_wide_sigterm_does_not_cut_running_handlers() -> None:
    # systemd's default KillMode sends SIGTERM to every process of the service; the
    # supervisor drains, so the template and the children must keep going.
    async def scenario() -> ChildOutcome:
        async with running_pool(1) as pool:
            task = asyncio.create_task(pool.execute(request("sleep", {"seconds": 0.4})))
            await wait_busy(pool)
            for pid in [pool.template_pid or 0, *pool.child_pids().values()]:
                os.kill(pid, signal.SIGTERM)
            return await task
    out = run(scenario())
    assert out.outcome is Outcome.SUCCEEDED


def test_a_result_that_arrives_after_the_kill_is_dropped() -> None:
    async def scenario() -> ChildOutcome:
        async with running_pool(1) as pool:
            req = request("echo")
            await pool.wait_idle(1)  # the child is ready, so execute() sends at once
            task = asyncio.create_task(pool.execute(req))
            for _ in range(100):  # bounded: execute() takes the child and sends the frame
                await asyncio.sleep(0)
                if pool.stats().busy == 1:
                    break
            assert pool.stats().busy == 1
            # Block the loop: the child answers, but the parent has not read it yet.
            time.sleep(0.3 * UNIT)
            assert pool.kill(req, "LEASE_LOST")
            return await task
    out = run(scenario())
    assert (out.outcome, out.code, out.report.kill_reason) == (
        Outcome.UNKNOWN, "LEASE_LOST", "LEASE_LOST")
    assert out.result_json is None
