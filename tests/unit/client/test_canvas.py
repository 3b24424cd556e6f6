"""The canvas compiles to the workflow body (orbit_client/canvas.py): chain, group, chord and
Graph shapes, their nesting, stable node keys, edges' on_failure, and the refusals raised
before anything is sent."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from orbit_client import Graph, OrbitApiError, chain, chord, group
from orbit_client.canvas import MAX_WORKFLOW_NODES, workflow_body, workflow_nodes
from orbit_client.workflow_calls import (
    cancel_workflow,
    get_workflow,
    list_workflows,
    submit_workflow,
)
from orbit_wire import TaskType

encode: TaskType[int, str] = TaskType("video.encode", "v1", "v1", idempotent=True)
join: TaskType[dict[str, Any], str] = TaskType("video.join", "v1", "v1")
QID = "0193" + "a" * 28


def shape(canvas: Any) -> list[tuple[str, list[Any]]]:
    return [(n["key"], n["parents"]) for n in workflow_nodes(canvas)]


def test_a_chain_links_each_step_to_the_one_before() -> None:
    assert shape(chain(encode.s(1), encode.s(2), join.s({}))) == [
        ("0", []), ("1", ["0"]), ("2", ["1"])]


def test_a_chord_waits_for_every_member_in_declared_order() -> None:
    flow = chord(group(encode.s(i) for i in range(3)), join.s({}))
    assert shape(flow) == [("0.0", []), ("0.1", []), ("0.2", []),
                           ("1", ["0.0", "0.1", "0.2"])]
    nodes = workflow_nodes(flow)
    assert [n["task"]["payload"] for n in nodes[:3]] == [0, 1, 2]
    assert nodes[3]["task"]["handler"] == "video.join"


def test_a_chord_takes_an_iterable_header_as_a_group() -> None:
    assert shape(chord([encode.s(1), encode.s(2)], join.s({}))) == shape(
        chord(group(encode.s(1), encode.s(2)), join.s({})))


def test_a_chain_of_groups_links_every_sink_to_every_source() -> None:
    flow = chain(group(encode.s(1), encode.s(2)), group(encode.s(3), encode.s(4)))
    assert shape(flow) == [("0.0", []), ("0.1", []), ("1.0", ["0.0", "0.1"]),
                           ("1.1", ["0.0", "0.1"])]


def test_the_pipe_chains_canvases() -> None:
    assert shape(group(encode.s(1)) | join.s({})) == [("0.0", []), ("1", ["0.0"])]


def test_nested_chains_keep_their_positions_as_keys() -> None:
    flow = chain(chain(encode.s(1), encode.s(2)), group(chain(encode.s(3), join.s({}))))
    assert shape(flow) == [("0.0", []), ("0.1", ["0.0"]), ("1.0.0", ["0.1"]),
                           ("1.0.1", ["1.0.0"])]


def test_keys_are_stable_across_compilations() -> None:
    def flow() -> Any:
        return chord(group(encode.s(i) for i in range(5)), join.s({}))

    assert orjson.dumps(workflow_body(flow())) == orjson.dumps(workflow_body(flow()))


def test_on_failure_run_is_said_on_the_edge() -> None:
    nodes = workflow_nodes(chord([encode.s(1), encode.s(2)], join.s({}), on_failure="run"))
    assert nodes[2]["parents"] == [{"key": "0.0", "on_failure": "run"},
                                   {"key": "0.1", "on_failure": "run"}]


def test_an_empty_group_passes_the_previous_sinks_on() -> None:
    assert shape(chain(encode.s(1), group([]), join.s({}))) == [("0", []), ("2", ["0"])]


def test_a_lone_signature_is_a_one_node_workflow() -> None:
    assert shape(encode.s(7)) == [("0", [])]


def test_signature_options_reach_the_spec() -> None:
    nodes = workflow_nodes(chain(encode.s(1, priority=9, max_attempts=2), join.s({})))
    assert nodes[0]["task"]["priority"] == 9 and nodes[0]["task"]["max_attempts"] == 2
    assert nodes[0]["task"]["idempotency"] == "IDEMPOTENT"


def test_a_signature_checks_its_options_at_once() -> None:
    with pytest.raises(Exception, match="unknown task field"):
        encode.s(1, color="red")


def test_the_graph_builder_keeps_its_keys_and_edges() -> None:
    graph = Graph()
    a = graph.add("split", encode.s(0))
    b = graph.add("left", encode.s(1), parents=[a])
    c = graph.add("right", encode.s(2), parents=[a])
    graph.add("join", join.s({}), parents=[b, (c, "run")])
    assert shape(graph) == [("split", []), ("left", ["split"]), ("right", ["split"]),
                            ("join", ["left", {"key": "right", "on_failure": "run"}])]


def test_a_graph_nested_in_a_chain_gets_its_position_as_prefix() -> None:
    graph = Graph()
    graph.add("a", encode.s(1))
    graph.add("b", encode.s(2), parents=["a"])
    assert shape(chain(encode.s(0), graph)) == [("0", []), ("1.a", ["0"]), ("1.b", ["1.a"])]


@pytest.mark.parametrize("build, words", [
    (lambda g: g.add("bad key", encode.s(1)), "node key"),
    (lambda g: (g.add("a", encode.s(1)), g.add("a", encode.s(2))), "used twice"),
    (lambda g: g.add("b", encode.s(1), parents=["nope"]), "not in the graph"),
    (lambda g: g.add("b", encode.s(1), on_failure="maybe"), "on_failure"),
    (lambda g: g.add("b", chain(encode.s(1))), "signature"),
])
def test_the_graph_refuses_bad_nodes(build: Any, words: str) -> None:
    with pytest.raises(OrbitApiError, match=words) as caught:
        build(Graph())
    assert caught.value.code.value == "BAD_REQUEST"


def test_a_workflow_over_the_node_limit_is_refused_before_sending() -> None:
    flow = group(encode.s(i) for i in range(MAX_WORKFLOW_NODES + 1))
    with pytest.raises(OrbitApiError, match="at most 10000 nodes"):
        workflow_nodes(flow)


def test_an_empty_workflow_and_a_foreign_step_are_refused() -> None:
    with pytest.raises(OrbitApiError, match="at least one task"):
        workflow_nodes(group([]))
    with pytest.raises(OrbitApiError, match="must be a signature"):
        workflow_nodes(chain(encode.s(1), "join"))  # type: ignore[arg-type]


def test_the_body_carries_name_and_operation_key() -> None:
    body = workflow_body(chain(encode.s(1)), name="nightly", operation_key="run-7")
    assert body["name"] == "nightly" and body["operation_key"] == "run-7"


def test_the_calls_address_the_workflow_routes() -> None:
    call = submit_workflow(QID, workflow_body(chain(encode.s(1), join.s({}))))
    assert (call.method, call.path, call.expected) == (
        "POST", f"/v1/queues/{QID}/workflows", (200, 201))
    assert orjson.loads(call.body or b"")["nodes"][1]["parents"] == ["0"]
    wid = "0193" + "c" * 28
    assert get_workflow(wid, 5000).params == {"wait_ms": "5000"}
    assert list_workflows(QID, state="blocked", limit=10).params == {
        "state": "BLOCKED", "limit": "10"}
    assert cancel_workflow(wid, "enough").body == b'{"reason":"enough"}'


def test_the_calls_refuse_bad_input_before_sending() -> None:
    with pytest.raises(OrbitApiError, match="non-empty 'nodes'"):
        submit_workflow(QID, {"nodes": []})
    with pytest.raises(OrbitApiError, match=r"nodes\[0\].task"):
        submit_workflow(QID, {"nodes": [{"key": "a", "task": {"handler": "x"}}]})
    with pytest.raises(OrbitApiError, match="workflow id"):
        get_workflow("../x")
    with pytest.raises(OrbitApiError, match="state"):
        list_workflows(QID, state="DONE")


def test_a_schedule_may_fire_a_workflow() -> None:
    from orbit_client.calls import create_schedule
    from orbit_client.workflow_handle import with_workflow_body

    schedule = with_workflow_body({"cron": "0 9 * * *", "workflow": chain(encode.s(1),
                                                                          join.s({}))})
    call = create_schedule(QID, schedule)
    sent = orjson.loads(call.body or b"")
    assert [n["key"] for n in sent["workflow"]["nodes"]] == ["0", "1"]
    with pytest.raises(OrbitApiError, match="'task' spec or a 'workflow'"):
        create_schedule(QID, {"cron": "0 9 * * *"})
