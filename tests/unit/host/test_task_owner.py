"""``TaskOwner`` keeps what it started, cancels and awaits it on ``stop``, waits without
cancelling on ``join``, never stops the caller's own task, and logs a task that fails on its
own when given a logger. (tests/unit/test_layers.py checks no module starts a task any
other way.)"""

from __future__ import annotations

import asyncio
import logging

import pytest

from orbit_host.task_owner import TaskOwner


async def test_stop_cancels_and_awaits_what_is_left() -> None:
    owner = TaskOwner()
    ended = owner.start(asyncio.sleep(0))
    hanging = owner.start(asyncio.sleep(60))
    await ended
    assert len(owner) == 1
    await owner.stop()
    assert hanging.cancelled() and len(owner) == 0


async def test_stop_cancels_the_named_tasks_and_join_waits_without_cancelling() -> None:
    owner = TaskOwner(logging.getLogger("test.owner"))
    gate = asyncio.Event()
    forever = owner.start(asyncio.Event().wait(), "forever")
    finishing = owner.start(gate.wait(), "finishing")
    await owner.stop(forever)
    assert forever.cancelled() and not finishing.done()
    joined = owner.start(owner.join(), "joiner")  # join never waits on its own task
    await asyncio.sleep(0)
    assert not joined.done()
    gate.set()
    await asyncio.wait_for(joined, 5)
    assert finishing.result() is True


async def test_stop_from_inside_an_owned_task_spares_that_task() -> None:
    owner = TaskOwner()
    other = owner.start(asyncio.Event().wait())

    async def stopper() -> str:
        await owner.stop()
        return "still running"

    assert await owner.start(stopper()) == "still running"
    assert other.cancelled()


async def test_a_task_that_fails_on_its_own_is_logged_one_being_stopped_is_not(
        caplog: pytest.LogCaptureFixture) -> None:
    owner = TaskOwner(logging.getLogger("test.owner"))

    async def fail() -> None:
        raise ValueError("a bug")

    async def fail_when_stopped() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise OSError("the peer is gone")

    with caplog.at_level(logging.ERROR, logger="test.owner"):
        failing = owner.start(fail(), "failing")
        stopped = owner.start(fail_when_stopped(), "stopped")
        await asyncio.wait({failing})
        await asyncio.sleep(0)  # its done callback runs in the next turn
        await owner.stop()
    assert stopped.done()
    assert [(r.getMessage(), type(r.exc_info[1])) for r in caplog.records if r.exc_info] == [
        ("background task failing failed", ValueError)]
