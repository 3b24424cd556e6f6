"""Workflow nodes in the store on SQLite and MariaDB (hand-moved clock, the services called
as the adapters call them): a released node's reservation carries its parents' results in
declared order; results over 1 MiB fail the node with PARENTS_TOO_LARGE; two replicas
finishing the two parents of one node at the same instant release it exactly once; the
reaper's deadline passes a failure on like a worker's report; the retention removes a
workflow with its last node; the open sinks (what a waiting read watches) are the nodes no
other waits for, not ended yet."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import orjson
from sqlalchemy import func, select
from store_support import World

from orbit_server.services import Services
from orbit_server.store.tables import workflow_edges, workflows
from orbit_wire.model import Outcome

DAY = 86_400_000


def _workflow(world: World, nodes: list[tuple[str, list[Any]]],
              service: Services | None = None, **spec: Any) -> dict[str, Any]:
    body = {"nodes": [{"key": k, "task": world.spec(payload={"k": k}, **spec), "parents": p}
                      for k, p in nodes]}
    view, created, _ = (service or world.service).workflows.submit(
        world.producer, world.queue_id, body)
    assert created
    return view


def _ids(view: dict[str, Any]) -> dict[str, str]:
    return {n["key"]: n["task_id"] for n in view["nodes"]}


def _succeed(world: World, b: Any, result: Any) -> str:
    (res,) = world.service.workers.reserve(b, 1)
    assert world.start(b, res.attempt_id, res.epoch).ok
    ok, _ = world.finish(b, res.attempt_id, res.epoch, Outcome.SUCCEEDED, result=result)
    assert ok.ok, ok
    return res.task_id


def test_a_released_node_reservation_carries_its_parents_results(world: World) -> None:
    view = _workflow(world, [("a", []), ("b", []), ("join", ["b", "a"])])
    ids = _ids(view)
    b = world.hello()
    for _ in range(2):
        (res,) = world.service.workers.reserve(b, 1)
        assert res.parents is None  # a node without parents
        assert world.start(b, res.attempt_id, res.epoch).ok
        key = next(k for k, i in ids.items() if i == res.task_id)
        world.finish(b, res.attempt_id, res.epoch, Outcome.SUCCEEDED, result={"from": key})
    assert world.task(ids["join"])["state"] == "PENDING"
    (res,) = world.service.workers.reserve(b, 1)
    assert res.task_id == ids["join"]
    parents = orjson.loads(bytes(res.parents))
    assert [(p["key"], p["result"]) for p in parents] == [("b", {"from": "b"}),
                                                         ("a", {"from": "a"})]
    assert [p["task_id"] for p in parents] == [ids["b"], ids["a"]]


def test_parents_results_over_one_mib_fail_the_node(world: World) -> None:
    big = "x" * (250 * 1024)
    view = _workflow(world, [*((f"p{i}", []) for i in range(5)),
                             ("join", [f"p{i}" for i in range(5)])])
    b = world.hello()
    for _ in range(5):
        _succeed(world, b, {"blob": big})
    join = world.task(_ids(view)["join"])
    assert join["state"] == "FAILED" and join["failure"]["code"] == "PARENTS_TOO_LARGE"
    assert world.service.workflows.get(world.producer, view["workflow_id"])["state"] == "FAILED"


def _finish_on(world: World, service: Services, b: Any, res: Any) -> None:
    ok, _ = replace(world, service=service).finish(b, res.attempt_id, res.epoch,
                                                   Outcome.SUCCEEDED, result=1,
                                                   msg=f"m-{res.attempt_id}")
    assert ok.ok, ok


def test_two_replicas_ending_two_parents_at_once_release_the_node_once(world: World) -> None:
    for round_ in range(3):
        view = _workflow(world, [("a", []), ("b", []), ("join", ["a", "b"])])
        ids = _ids(view)
        b = world.hello()
        started = []
        for _ in range(2):
            (res,) = world.service.workers.reserve(b, 1)
            assert world.start(b, res.attempt_id, res.epoch).ok
            started.append(res)
        with world.other_service(round_ + 10) as other:
            errors = world.race(
                lambda s=started[0], w=b: _finish_on(world, world.service, w, s),
                lambda s=started[1], o=other, w=b: _finish_on(world, o, w, s))
        assert errors == []
        join = world.task(ids["join"])
        assert join["state"] == "PENDING", join
        released = [e for e in world.audit(ids["join"]) if e["kind"] == "task_released"]
        assert len(released) == 1
        assert _succeed(world, b, 3) == ids["join"]  # the queue is empty for the next round


def test_the_reaper_passes_a_deadline_failure_on_like_a_report(world: World) -> None:
    view = _workflow(world, [("a", []), ("next", ["a"]),
                             ("cleanup", [{"key": "a", "on_failure": "run"}])],
                     deadline_ms=100)
    ids = _ids(view)
    world.clock.advance(60_000)  # the waiting nodes' deadlines count from their release
    world.service.reaper.reap()
    assert world.task(ids["a"])["failure"]["code"] == "DEADLINE_EXCEEDED"
    after = world.task(ids["next"])
    assert after["state"] == "CANCELLED" and after["failure"]["code"] == "PARENT_FAILED"
    assert world.task(ids["cleanup"])["state"] == "PENDING"


def test_the_retention_removes_a_workflow_with_its_last_node(world: World) -> None:
    view = _workflow(world, [("a", []), ("b", ["a"])])
    b = world.hello()
    _succeed(world, b, 1)
    _succeed(world, b, 2)
    world.clock.advance(2 * DAY)
    config = replace(world.service.tx.config, task_retention_ms=DAY)
    services = Services(world.engine, config, world.clock, random.Random(3))
    assert services.retention.prune_tasks() == 2
    with world.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(workflows).where(
            workflows.c.id == view["workflow_id"])) == 0
        assert conn.scalar(select(func.count()).select_from(workflow_edges)) == 0


def test_the_open_sinks_are_the_nodes_nobody_waits_for_not_ended_yet(world: World) -> None:
    view = _workflow(world, [("root", []), ("left", ["root"]), ("right", ["root"]),
                             ("alone", [])])
    ids = _ids(view)
    wid = view["workflow_id"]

    def sinks(limit: int = 10) -> list[str]:
        return world.service.workflows.open_sinks(world.producer, wid, limit)

    assert sinks() == [ids["left"], ids["right"], ids["alone"]]  # submit order
    assert sinks(2) == [ids["left"], ids["right"]]
    b = world.hello()
    assert _succeed(world, b, 1) == ids["root"]  # not a sink: the sinks stay
    assert sinks() == [ids["left"], ids["right"], ids["alone"]]
    ended = _succeed(world, b, 2)
    assert sinks() == [i for i in (ids["left"], ids["right"], ids["alone"]) if i != ended]
