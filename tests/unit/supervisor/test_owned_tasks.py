"""Every background task of orbit_supervisor has an owner that keeps, cancels and awaits it:
the code is read for calls that make a task (``create_task``, ``ensure_future``), and each
must be the TaskOwner's own (owner.py) or a TaskGroup's, bound by ``async with
asyncio.TaskGroup() as NAME`` in the same module (used as ``NAME`` or as ``self.X = NAME``)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from orbit_supervisor.owner import TaskOwner

PACKAGE = Path(__file__).resolve().parents[3] / "orbit_supervisor"
MAKERS = frozenset({"create_task", "ensure_future"})


def _task_groups(tree: ast.Module) -> set[str]:
    """The source texts that name a TaskGroup in this module: ``NAME`` for each
    ``async with asyncio.TaskGroup() as NAME`` and ``self.X`` for each ``self.X = NAME``."""
    groups: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncWith):
            for item in node.items:
                if (ast.unparse(item.context_expr) == "asyncio.TaskGroup()"
                        and isinstance(item.optional_vars, ast.Name)):
                    groups.add(item.optional_vars.id)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                and node.value.id in groups):
            groups.update(ast.unparse(target) for target in node.targets)
    return groups


def unowned(path: Path) -> list[str]:
    """``file:line call`` for every task made outside an owner in ``path``."""
    if path.name == "owner.py":
        return []
    tree = ast.parse(path.read_text(), filename=str(path))
    groups = _task_groups(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in MAKERS:
            continue
        if isinstance(func, ast.Attribute) and ast.unparse(func.value) in groups:
            continue
        found.append(f"{path.name}:{node.lineno} {ast.unparse(func)}")
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_no_task_is_made_outside_an_owner(path: Path) -> None:
    assert unowned(path) == []


def test_the_check_finds_a_bare_task(tmp_path: Path) -> None:
    bare = tmp_path / "bare.py"
    bare.write_text("import asyncio\n\nasync def f(loop):\n"
                    "    asyncio.create_task(g())\n    loop.create_task(g())\n"
                    "    asyncio.ensure_future(g())\n"
                    "    async with asyncio.TaskGroup() as tg:\n        tg.create_task(g())\n")
    assert unowned(bare) == ["bare.py:4 asyncio.create_task", "bare.py:5 loop.create_task",
                             "bare.py:6 asyncio.ensure_future"]


async def test_close_cancels_and_awaits_what_is_left() -> None:
    owner = TaskOwner()
    ended = owner.spawn(asyncio.sleep(0))
    hanging = owner.spawn(asyncio.sleep(60))
    await ended
    assert len(owner) == 1
    await owner.close()
    assert hanging.cancelled() and len(owner) == 0
