"""Every background task of the server has an owner: ``TaskOwner`` keeps what it started,
cancels or awaits it, and logs a task that fails on its own; and no module of orbit_server
starts a task any other way (parsed: ``create_task`` and ``ensure_future`` appear only in
task_owner.py, or on an ``asyncio.TaskGroup`` the module opened)."""

from __future__ import annotations

import ast
import asyncio
import logging
from pathlib import Path

import pytest

from orbit_server.task_owner import TaskOwner

ROOT = Path(__file__).resolve().parents[3]
STARTERS = frozenset({"create_task", "ensure_future"})


def _task_groups(tree: ast.AST) -> set[str]:
    """Names bound by ``async with asyncio.TaskGroup() as name`` in a module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncWith):
            for item in node.items:
                call = item.context_expr
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "TaskGroup"
                        and isinstance(item.optional_vars, ast.Name)):
                    names.add(item.optional_vars.id)
    return names


def unowned_starts(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    groups = _task_groups(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in STARTERS:
            continue
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if isinstance(receiver, ast.Name) and receiver.id in groups:
            continue
        found.append(f"{path.relative_to(ROOT)}:{node.lineno} calls {name}")
    return found


def test_no_module_of_the_server_starts_a_task_without_an_owner() -> None:
    owner = ROOT / "orbit_server" / "task_owner.py"
    found = [line for path in sorted((ROOT / "orbit_server").rglob("*.py")) if path != owner
             for line in unowned_starts(path)]
    assert found == []
    assert unowned_starts(owner)  # the check sees a start where there is one


async def test_stop_cancels_and_awaits_join_waits_without_cancelling() -> None:
    owner = TaskOwner(logging.getLogger("test.owner"))
    gate = asyncio.Event()
    forever = owner.start(asyncio.Event().wait(), "forever")
    finishing = owner.start(gate.wait(), "finishing")
    await owner.stop(forever)
    assert forever.cancelled() and not finishing.done()
    joined = asyncio.ensure_future(owner.join())
    await asyncio.sleep(0)  # one turn: join is waiting on the task it does not cancel
    assert not joined.done()
    gate.set()
    await asyncio.wait_for(joined, 5)
    assert finishing.result() is True


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
