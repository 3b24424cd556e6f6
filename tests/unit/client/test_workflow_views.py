"""A workflow as the contract answers it, read by the client (orbit_client/workflows.py: sinks,
the typed errors of each end) and shown by the CLI (cli/render_workflows.py: the graph in
layers with parents, states and causes), with a fixed clock."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from orbit_client import (
    WorkflowBlocked,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowTimeout,
    WorkflowView,
)
from orbit_client.cli.render_workflows import (
    counts_words,
    layers,
    workflow_view,
    workflows_table,
)
from orbit_client.tasks import Task
from orbit_client.workflows import check_outcome, failed_node, sink_results

NOW = 1_774_612_800_000
WID = "0193" + "d" * 28
QID = "0193" + "a" * 28


def tid(n: int) -> str:
    return f"0193{n:028x}"


def chord_view(state: str = "RUNNING", **by_key: dict[str, Any]) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [
        {"key": "0.0", "task_id": tid(1), "state": "SUCCEEDED", "parents": []},
        {"key": "0.1", "task_id": tid(2), "state": "RUNNING", "parents": []},
        {"key": "1", "task_id": tid(3), "state": "WAITING",
         "parents": [{"key": "0.0", "on_failure": "cancel"},
                     {"key": "0.1", "on_failure": "run"}]},
        {"key": "2", "task_id": tid(4), "state": "WAITING",
         "parents": [{"key": "1", "on_failure": "cancel"}]},
    ]
    for node in nodes:
        node.update(by_key.get(node["key"], {}))
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node["state"]] = counts.get(node["state"], 0) + 1
    return {"workflow_id": WID, "queue_id": QID, "name": "encode", "state": state,
            "created_at_ms": NOW - 90_000, "ended_at_ms": None, "counts": counts,
            "nodes": nodes}


def task_view(n: int, state: str, **extra: Any) -> Task[Any]:
    return Task.from_view({
        "id": tid(n), "queue_id": QID, "state": state,
        "capability": {"handler": "h", "handler_version": "v1", "payload_version": "v1"},
        "created_at_ms": NOW, "updated_at_ms": NOW, "deadline_at_ms": NOW + 1, "attempts": 1,
        **extra})


def text_of(renderable: object, width: int = 200) -> str:
    sink = io.StringIO()
    Console(file=sink, width=width, color_system=None).print(renderable)
    return sink.getvalue()


def test_the_view_reads_nodes_parents_and_sinks() -> None:
    view = WorkflowView.from_view(chord_view())
    assert view.id == WID and not view.settled and not view.ended
    assert view.node("1").parents == (("0.0", "cancel"), ("0.1", "run"))
    assert [n.key for n in view.sinks()] == ["2"]


def test_one_sink_gives_its_result_several_give_a_dict_by_key() -> None:
    view = WorkflowView.from_view(chord_view())
    sinks = [view.node("0.0"), view.node("2")]
    tasks = [task_view(1, "SUCCEEDED", result=1), task_view(4, "SUCCEEDED", result="x")]
    assert sink_results(sinks[1:], tasks[1:]) == "x"
    assert sink_results(sinks, tasks) == {"0.0": 1, "2": "x"}


def test_each_end_is_its_typed_error() -> None:
    check_outcome(WorkflowView.from_view(chord_view("SUCCEEDED")), 1.0)
    with pytest.raises(WorkflowTimeout) as timeout:
        check_outcome(WorkflowView.from_view(chord_view()), 1.5)
    assert timeout.value.retryable and "still RUNNING after 1.5 s" in str(timeout.value)
    blocked = chord_view("BLOCKED", **{"0.1": {"state": "NEEDS_REVIEW"},
                                       "1": {"blocked_by": "0.1"}})
    with pytest.raises(WorkflowBlocked) as caught:
        check_outcome(WorkflowView.from_view(blocked), 1.0)
    assert caught.value.blocking == ("0.1",) and caught.value.code == "BLOCKED"
    cancelled = chord_view("CANCELLED", **{"2": {"state": "CANCELLED", "cause": {
        "code": "PARENT_FAILED", "parent_key": "1"}}})
    with pytest.raises(WorkflowCancelled, match="PARENT_FAILED of '1'"):
        check_outcome(WorkflowView.from_view(cancelled), 1.0)


def test_a_failed_workflow_names_the_failed_node_and_its_failure() -> None:
    view = WorkflowView.from_view(chord_view("FAILED", **{"1": {"state": "FAILED"}}))
    check_outcome(view, 1.0)  # the handle reads the failed node's task first
    node = failed_node(view)
    assert node is not None and node.key == "1"
    task = task_view(3, "FAILED", failure={"code": "HANDLER_ERROR", "details": {
        "exception_type": "ValueError", "exception_message": "bad part"}})
    error = WorkflowFailed(view, node, task)
    assert error.code == "HANDLER_ERROR" and error.node.key == "1"
    assert "node '1'" in str(error) and "ValueError: bad part" in str(error)


def test_layers_put_a_node_below_its_deepest_parent() -> None:
    assert layers(chord_view()["nodes"]) == {"0.0": 0, "0.1": 0, "1": 1, "2": 2}


def test_the_graph_view_shows_parents_states_and_causes() -> None:
    view = chord_view("BLOCKED", **{"0.1": {"state": "NEEDS_REVIEW"},
                                    "1": {"blocked_by": "0.1"}})
    text = text_of(workflow_view(view, NOW))
    assert WID in text and "BLOCKED" in text and "1 NEEDS_REVIEW" in text
    assert "0.0, 0.1 (runs on failure)" in text and "blocked: 0.1 needs review" in text
    assert "    2" in text and tid(4) in text  # layer 2, indented twice
    cancelled = chord_view("FAILED", **{"1": {"state": "FAILED"}, "2": {
        "state": "CANCELLED", "cause": {"code": "PARENT_FAILED", "parent_key": "1"}}})
    assert "PARENT_FAILED (parent 1)" in text_of(workflow_view(cancelled, NOW))


def test_the_list_shows_each_workflow_with_its_counts() -> None:
    row = {k: v for k, v in chord_view().items() if k != "nodes"}
    text = text_of(workflows_table([row], NOW))
    assert WID in text and "encode" in text and "2 WAITING, 1 RUNNING, 1 SUCCEEDED" in text
    assert "No workflows." in text_of(workflows_table([], NOW))
    assert counts_words({}) == "-"
