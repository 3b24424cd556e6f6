"""Workers chosen by labels, over the worker protocol against a real server on each store:
a task that ``requires`` labels is reserved only for a worker whose hello's labels include
them all, a task that requires nothing for any worker; a task no live worker can match stays
PENDING and its ``waiting`` fact names the labels, and does not hold back the tasks behind
it; bad labels are refused in hello and in a submit; a TaskType's declared ``requires``
round-trips through the registration."""

from __future__ import annotations

from typing import Any

import pytest
from support.lanes import Lane
from support.orbit_http import expect, task_spec
from support.protocol_client import ECHO, ProtocolClient
from support.waiting import wait_until

from orbit_wire.frames import Hello
from orbit_wire.policy import CapabilityPolicy, DeclaredPolicy

pytestmark = pytest.mark.asyncio

GPU = {"gpu": "a100", "mem": "64G"}


def _submit(lane: Lane, **policy: Any) -> str:
    return str(expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks",
                                         json=task_spec(**policy)), 201)["id"])


def _task(lane: Lane, task_id: str) -> dict[str, Any]:
    return dict(expect(lane.producer.get(f"/v1/tasks/{task_id}"), 200))


async def test_tasks_go_only_to_workers_with_their_labels(lane: Lane) -> None:
    async with await ProtocolClient.connect(lane.ws_url) as gpu, \
            await ProtocolClient.connect(lane.ws_url) as plain:
        await gpu.hello_as(lane.worker, labels=GPU)
        await plain.hello_as(lane.worker)
        # A task nobody can take, first and of the highest priority: it must not hold back
        # the tasks behind it.
        nobody = _submit(lane, requires={"gpu": "h100"}, priority=9)
        need = [_submit(lane, requires={"gpu": "a100"}) for _ in range(3)]
        anyone = [_submit(lane) for _ in range(3)]
        assert _task(lane, need[0])["policy"]["requires"] == {"gpu": "a100"}
        assert _task(lane, anyone[0])["policy"]["requires"] is None

        # The worker without labels takes the tasks that require nothing, and only those.
        await plain.credit(8)
        taken = await plain.only_reserved(3, among=anyone)
        assert {r.task_id for r in taken} == set(anyone)
        # The labelled one takes those that require what it has.
        await gpu.credit(8)
        taken = await gpu.only_reserved(3, among=need)
        assert {r.task_id for r in taken} == set(need)
        # Submitted while both wait with credit: a task that requires a100 goes to the
        # labelled worker, one that requires nothing to either.
        late = _submit(lane, requires={"gpu": "a100"})
        assert [r.task_id for r in await gpu.only_reserved(1, among=[late])] == [late]
        # The submit's own answer says so too, though workers wait with credit.
        answer = expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks", json=task_spec(
            requires={"gpu": "h100"})), 201)
        assert answer["waiting"]["reason"] == "NO_MATCHING_WORKER", answer

        view = _task(lane, nobody)
        assert view["state"] == "PENDING"
        assert view["waiting"]["reason"] == "NO_MATCHING_WORKER", view
        assert view["waiting"]["requires"] == {"gpu": "h100"}
        workers = expect(lane.producer.get("/v1/workers"), 200)["workers"]
        labels = {w["instance_id"]: w["labels"] for w in workers}
        assert labels == {gpu.instance_id: GPU, plain.instance_id: {}}

    # With no live worker at all, the usual fact: nobody offers the capability.
    wait_until(lambda: (_task(lane, nobody)["waiting"] or {}).get("reason") == "NO_LIVE_WORKER",
               timeout=30.0, what="the waiting fact once the workers left")


async def test_a_hello_with_a_bad_label_is_refused(lane: Lane) -> None:
    w = lane.worker
    async with await ProtocolClient.connect(lane.ws_url) as wc:
        await wc.send(Hello(
            credential_id=w.credential_id, credential_secret=w.secret,
            instance_id=wc.instance_id, instance_secret=wc.instance_secret,
            queue_id=w.queue_id, capabilities=(ECHO,), capacity=1,
            labels={"gpu": "a 100"}))
        err = await wc.error()
        assert err.code == "BAD_FRAME" and err.fatal, err
        assert "labels" in err.message, err


async def test_a_submit_with_bad_requires_is_refused(lane: Lane) -> None:
    url = f"/v1/queues/{lane.queue}/tasks"
    for requires in ({"gpu": "a 100"}, {"": "x"}, {f"k{i}": "v" for i in range(17)}, ["gpu"]):
        answer = lane.producer.post(url, json=task_spec(requires=requires))
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == "BAD_REQUEST" and "requires" in error["message"], error


async def test_declared_requires_round_trip_through_the_registration(lane: Lane) -> None:
    declared = DeclaredPolicy(requires={"gpu": "a100"})
    async with await ProtocolClient.connect(lane.ws_url) as wc:
        await wc.hello_as(lane.worker, labels=GPU,
                          policies=(CapabilityPolicy(ECHO, declared),))
        registered = expect(lane.producer.get(f"/v1/queues/{lane.queue}/capabilities"),
                            200)["capabilities"]
        assert [r["policy"] for r in registered] == [{"requires": {"gpu": "a100"}}]
        # A submit that leaves requires out gets the registered one; one that sets it wins.
        task = expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks",
                                         json=task_spec()), 201)
        assert task["policy"]["requires"] == {"gpu": "a100"}
        assert task["policy_source"] == "registered"
        mine = _submit(lane, requires={"mem": "64G"})
        assert _task(lane, mine)["policy"]["requires"] == {"mem": "64G"}
        await wc.credit(4)
        got = {r.task_id for r in await wc.reservations(2)}
        assert got == {task["id"], mine}
