"""What a workflow node's end costs the store, counted in statements on SQLite and MariaDB
(every statement the driver runs: SQLite's trace callback, MariaDB's cursor executions).

A chord member's end that releases nothing (the callback still waits on other members) runs
a plain task's end plus the edges' take and the callback's decrement: on SQLite one
``UPDATE ... RETURNING`` and the decrement (2 statements more; before this was measured the
pass ran 5: the edges' read, their mark, the decrement, a load of the whole callback row and
a read of its count); on MariaDB, which has no ``UPDATE ... RETURNING``, a locking read, the
mark and the decrement (3). The callback is not loaded (no SELECT of the tasks table alone)
until the end that releases it, which reads its parents' results. A sink's end (no edges)
costs one statement more than a plain end."""

from __future__ import annotations

import re
from typing import Any

from store_support import World

from orbit_wire.model import Outcome

# The statements a member's end adds to a plain task's end, per store.
MEMBER_EXTRA = {"sqlite": 2, "mysql": 3}


def _end_next(world: World, b: Any, result: Any) -> tuple[str, list[str]]:
    """Reserve and start the next task, then succeed it: its id and the statements of the
    finish alone."""
    (res,) = world.service.workers.reserve(b, 1)
    assert world.start(b, res.attempt_id, res.epoch).ok
    with world.driver_statements() as seen:
        ok, _ = world.finish(b, res.attempt_id, res.epoch, Outcome.SUCCEEDED, result=result)
    assert ok.ok, ok
    return res.task_id, list(seen)


def _loads_of_tasks(seen: list[str]) -> list[str]:
    """SELECTs of the tasks table alone (a record's load), not joined with attempts."""
    return [s for s in seen if s.lstrip().upper().startswith("SELECT")
            and re.search(r"\bFROM tasks\s+WHERE\b", s)]


def test_a_member_end_that_releases_nothing_adds_only_the_edges_take_and_a_decrement(
        world: World) -> None:
    plain = world.submit()["id"]
    body = {"nodes": [{"key": f"m{i}", "task": world.spec(payload={"i": i})} for i in range(3)]
            + [{"key": "join", "task": world.spec(),
                "parents": [f"m{i}" for i in range(3)]}]}
    view, _, _ = world.service.workflows.submit(world.producer, world.queue_id, body)
    ids = {n["key"]: n["task_id"] for n in view["nodes"]}
    b = world.hello()
    ended, base = _end_next(world, b, 0)
    assert ended == plain
    extra = MEMBER_EXTRA[world.engine.dialect.name]
    for i in range(2):
        ended, seen = _end_next(world, b, i)
        assert ended == ids[f"m{i}"]
        assert len(seen) == len(base) + extra, seen
        assert _loads_of_tasks(seen) == [], seen
        assert world.task(ids["join"])["state"] == "WAITING"
    ended, seen = _end_next(world, b, 2)  # the last member releases the callback
    assert ended == ids["m2"] and world.task(ids["join"])["state"] == "PENDING"
    assert len(_loads_of_tasks(seen)) == 1, seen
    ended, seen = _end_next(world, b, "joined")  # a sink: no edges to take
    assert ended == ids["join"]
    assert len(seen) == len(base) + 1, seen
    assert world.service.workflows.get(world.producer, view["workflow_id"])["state"] == \
        "SUCCEEDED"
