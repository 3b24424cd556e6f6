"""The canvas submitted to a real orbit-server, run by a real orbit-supervise with real
children (tests/fixtures_handlers/workflow_handlers.py), on both stores: a chain of 3
passing results along, a chord of 100 whose callback gets the 100 results in order, the
result() of a FAILED workflow (the failed node, its failure; the node after it CANCELLED
with PARENT_FAILED), a cancel during a run, the waits' paths on the server (the callback
cancelled while a member runs on; a group wider than the sinks it watches), the async
twins, and `orbit workflows get | list | cancel | submit`."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.cli import Cli
from support.lanes import Lane
from support.orbit_http import OrbitEnv
from support.supervisor_helpers import SupervisorProcess
from support.waiting import UNIT, wait_until

from orbit_client import (
    AsyncOrbitClient,
    Graph,
    OrbitClient,
    Workflow,
    WorkflowBlocked,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowTimeout,
    chain,
    chord,
    group,
)
from orbit_client.canvas import workflow_body
from orbit_server.http_workflows import MAX_WATCHED_SINKS
from orbit_wire.ids import is_id
from orbit_wire.tasktype import TaskType

WF_HANDLERS = "workflow_handlers:HANDLERS"
ROOT = Path(__file__).resolve().parents[2]
RESULT_S = 60.0 * UNIT

# The test handlers' declarations (the supervisor imports the module from its own folder).
sys.path.insert(0, str(ROOT / "tests" / "fixtures_handlers"))
from workflow_handlers import ADD, COLLECT, CRASH, ECHO, FAIL, HOLD  # noqa: E402

# A capability no supervisor of these tests serves: its nodes stay PENDING.
UNSERVED: TaskType[int, int] = TaskType("wf.unserved", "v1", "v1", idempotent=True)


@dataclass
class Scene:
    lane: Lane
    client: OrbitClient
    producer_file: Path
    supervisor: SupervisorProcess
    cli: Cli


@pytest.fixture
def scene(orbit: OrbitEnv, tmp_path: Path) -> Iterator[Scene]:
    lane = Lane.open(orbit, "workflows")
    producer_file = lane.credentials_file(tmp_path / "producer.json")
    worker_file = lane.credentials_file(tmp_path / "worker.json", role="worker")
    supervisor = SupervisorProcess(tmp_path, worker_file, lane.queue, workers=2,
                                   handlers=WF_HANDLERS, url=orbit.server.url).start()
    client = OrbitClient(credentials=producer_file)
    try:
        supervisor.wait_log("connected")
        yield Scene(lane, client, producer_file, supervisor, Cli(producer_file))
    finally:
        client.close()
        supervisor.stop()


def test_a_chain_of_three_passes_each_result_to_the_next(scene: Scene) -> None:
    flow = scene.client.submit(chain(ADD.s({"n": 1}), ADD.s({"n": 10}), ADD.s({"n": 100})),
                               name="sum along")
    assert isinstance(flow, Workflow) and is_id(flow.id)
    assert flow.result(RESULT_S) == 111  # 1, then 10 + 1, then 100 + 11
    assert flow.state == "SUCCEEDED" and flow.view.name == "sum along"
    assert [(n.key, n.state, n.parents) for n in flow.nodes()] == [
        ("0", "SUCCEEDED", ()), ("1", "SUCCEEDED", (("0", "cancel"),)),
        ("2", "SUCCEEDED", (("1", "cancel"),))]
    task = scene.client.task(flow.nodes()[2].task_id)
    assert task.view["workflow_id"] == flow.id and task.view["node_key"] == "2"


def test_a_chord_of_100_gets_the_results_in_order(scene: Scene) -> None:
    flow = scene.client.submit(chord(group(ECHO.s(i) for i in range(100)), COLLECT.s({})))
    assert flow.result(RESULT_S * 2) == list(range(100))
    assert {s: n for s, n in flow.view.counts.items() if n} == {"SUCCEEDED": 101}
    assert [n.key for n in flow.view.sinks()] == ["1"]


def test_several_sinks_give_their_results_by_key(scene: Scene) -> None:
    graph = Graph()
    graph.add("root", ADD.s({"n": 1}))
    graph.add("left", ADD.s({"n": 2}), parents=["root"])
    graph.add("right", ADD.s({"n": 3}), parents=["root"])
    assert scene.client.submit(graph).result(RESULT_S) == {"left": 3, "right": 4}


def test_a_failed_workflow_raises_with_the_failed_node_and_its_cause(scene: Scene) -> None:
    flow = scene.client.submit(chain(FAIL.s({}), ADD.s({"n": 1})))
    with pytest.raises(WorkflowFailed) as caught:
        flow.result(RESULT_S)
    error = caught.value
    assert error.node.key == "0" and error.code == "WF_BOOM"
    assert error.details == {"why": "on purpose"} and error.workflow.state == "FAILED"
    after = error.workflow.node("1")
    assert after.state == "CANCELLED"
    assert (after.cause_code, after.cause_parent) == ("PARENT_FAILED", "0")


def test_an_on_failure_callback_runs_and_gets_the_failure(scene: Scene) -> None:
    flow = scene.client.submit(chord([ECHO.s("ok"), FAIL.s({})], COLLECT.s({}),
                                     on_failure="run"))
    with pytest.raises(WorkflowFailed):  # a member FAILED, so the workflow did
        flow.result(RESULT_S)
    callback = flow.view.node("1")
    assert callback.state == "SUCCEEDED"
    assert scene.client.task(callback.task_id).result == ["ok", None]


def test_a_node_in_review_blocks_the_workflow_until_the_review_decides(scene: Scene) -> None:
    flow = scene.client.submit(chain(CRASH.s({}), ADD.s({"n": 1})))
    with pytest.raises(WorkflowBlocked) as caught:
        flow.result(RESULT_S)
    assert caught.value.blocking == ("0",) and caught.value.retryable
    assert flow.view.node("1").blocked_by == "0" and flow.view.node("1").state == "WAITING"
    human = scene.cli.ok("--output", "human", "workflows", "get", flow.id)
    assert "BLOCKED" in human and "blocked: 0 needs review" in human
    scene.client.review(flow.nodes()[0].task_id, "succeed", result=41)
    assert flow.result(RESULT_S) == 42  # the reviewed result went on to the next node


def test_a_cancel_during_a_run_cancels_every_node_not_ended(scene: Scene) -> None:
    flow = scene.client.submit(chain(HOLD.s({}), ADD.s({"n": 1})))
    running = flow.nodes()[0].task_id
    wait_until(lambda: scene.client.task(running).state.value == "RUNNING",
               timeout=RESULT_S, what="the held node running")
    view = flow.cancel("enough")
    assert view.id == flow.id
    with pytest.raises(WorkflowCancelled):
        flow.result(RESULT_S)
    assert [n.state for n in flow.nodes()] == ["CANCELLED", "CANCELLED"]


def test_wait_ends_at_the_timeout_and_the_workflow_goes_on(scene: Scene) -> None:
    flow = scene.client.submit(chain(HOLD.s({}), ADD.s({"n": 1})))
    try:
        with pytest.raises(WorkflowTimeout) as caught:
            flow.result(0.3)
        assert caught.value.retryable and caught.value.workflow.state == "RUNNING"
    finally:
        flow.cancel()


def test_a_wait_ends_when_the_last_member_does_after_the_callback_was_cancelled(
        scene: Scene) -> None:
    """A member FAILED while another runs on: the callback (the only sink) is cancelled at
    once, and the workflow ends FAILED only when the other member has ended too."""
    flow = scene.client.submit(chord([FAIL.s({}), HOLD.s({})], COLLECT.s({})))
    failing, held, callback = (n.task_id for n in flow.nodes())

    def callback_cancelled_and_member_running() -> bool:
        return (scene.client.task(callback).state.value == "CANCELLED"
                and scene.client.task(held).state.value == "RUNNING")

    wait_until(callback_cancelled_and_member_running, timeout=RESULT_S,
               what="the callback cancelled while a member runs")
    assert flow.wait(0.3).state == "RUNNING"  # no open sink: the server reads on
    scene.client.cancel(held, "enough")
    with pytest.raises(WorkflowFailed) as caught:
        flow.result(RESULT_S)
    assert caught.value.node.task_id == failing
    assert [n.state for n in flow.nodes()] == ["FAILED", "CANCELLED", "CANCELLED"]


def test_a_wait_on_a_group_wider_than_the_sinks_watched_ends_with_it(scene: Scene) -> None:
    """Over MAX_WATCHED_SINKS sinks the server reads the state on a fixed step: a wait
    started before a cancel still answers the CANCELLED workflow."""
    flow = scene.client.submit(group(UNSERVED.s(i) for i in range(MAX_WATCHED_SINKS + 1)))
    seen: list[str] = []

    def wait() -> None:
        with OrbitClient(credentials=scene.producer_file) as other:
            seen.append(other.workflow(flow.id).wait(RESULT_S).state)

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        flow.cancel("enough")
    finally:
        waiter.join(RESULT_S * 2)
    assert seen == ["CANCELLED"]


def test_the_async_twins_agree(scene: Scene) -> None:
    async def run() -> tuple[Any, str, list[str]]:
        async with AsyncOrbitClient(credentials=scene.producer_file) as orbit:
            flow = await orbit.submit(chain(ADD.s({"n": 2}), ADD.s({"n": 3})))
            result = await flow.result(RESULT_S)
            again = await orbit.workflow(flow.id)
            listed = await orbit.list_workflows(scene.lane.queue)
            return result, again.state, [w["workflow_id"] for w in listed["workflows"]]

    result, state, listed = asyncio.run(run())
    assert (result, state) == (5, "SUCCEEDED") and len(listed) == 1


def test_the_cli_gets_lists_cancels_and_submits(scene: Scene, tmp_path: Path) -> None:
    done = scene.client.submit(chain(ADD.s({"n": 1}), ADD.s({"n": 2})), name="cli chain")
    assert done.result(RESULT_S) == 3
    got = scene.cli.json("workflows", "get", done.id, "--json")
    assert got["workflow_id"] == done.id and got["state"] == "SUCCEEDED"
    human = scene.cli.ok("--output", "human", "workflows", "get", done.id)
    assert done.id in human and "cli chain" in human and "2 SUCCEEDED" in human
    assert done.nodes()[1].task_id in human

    body = workflow_body(chain(HOLD.s({}), ADD.s({"n": 1})))
    (tmp_path / "flow.json").write_bytes(orjson.dumps(body))
    held = scene.cli.ok("workflows", "submit", "@" + str(tmp_path / "flow.json")).strip()
    assert is_id(held)
    listed = scene.cli.json("workflows", "list", "--state", "running", "--json")
    assert [w["workflow_id"] for w in listed["workflows"]] == [held]
    table = scene.cli.ok("--output", "human", "workflows", "list")
    assert held in table and done.id in table
    cancelled = scene.cli.json("workflows", "cancel", held, "--reason", "cli", "--json")
    assert cancelled["workflow_id"] == held
    ended = scene.client.workflow(held).wait(RESULT_S)
    assert ended.state == "CANCELLED"
    missing = scene.cli.run("workflows", "get", "0" * 32)
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr
