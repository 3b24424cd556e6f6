"""The pure workflow rules (orbit_server/domain/workflows.py): the graph a request makes
(unique keys, parents that exist, no cycle, the node limit, refused before anything else),
what a parent's end does across an edge, a node's release and cancel, the parents' JSON, the
workflow's state; and, with hypothesis, that on random graphs and random outcomes every node
ends exactly once and in the same state whatever order the parents end in."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbit_server.domain import Backoff, TaskRec
from orbit_server.domain import workflows as wf
from orbit_server.domain.states import IllegalTransition
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.limits import MAX_WORKFLOW_NODES
from orbit_wire.model import Idempotency, TaskState

NOW = 80_000_000
SPEC = {"handler": "h", "handler_version": "v1", "payload_version": "v1", "payload": {}}


def _body(edges: dict[str, list[Any]]) -> dict[str, Any]:
    return {"nodes": [{"key": k, "task": SPEC, "parents": p} for k, p in edges.items()]}


def _refused(body: object, words: str) -> None:
    with pytest.raises(OrbitError) as caught:
        wf.parse_workflow(body)
    assert caught.value.code is ErrorCode.BAD_REQUEST
    assert words in caught.value.message


def test_a_graph_is_read_in_declared_parent_order_with_its_edge_rules() -> None:
    graph = wf.parse_workflow({**_body({
        "join": ["b", {"key": "a", "on_failure": "run"}], "a": [], "b": ["a"]}),
        "name": "n", "operation_key": "k"})
    assert graph.parents["join"] == (("b", wf.OnFailure.CANCEL), ("a", wf.OnFailure.RUN))
    assert graph.keys.index("a") < graph.keys.index("b") < graph.keys.index("join")
    assert (graph.name, graph.operation_key) == ("n", "k")
    assert list(graph.tasks) == ["join", "a", "b"]  # declared order kept for the IDs


@pytest.mark.parametrize(("edges", "words"), [
    ({"a": [], "b": ["zz"]}, "no node has the key 'zz'"),
    ({"a": ["b"], "b": ["c"], "c": ["a"]}, "cycle"),
    ({"a": ["a"]}, "own parent"),
    ({"a": [], "b": ["a", "a"]}, "named twice"),
    ({"a": [], "b": [], "c": ["a", "b", {"key": "b", "on_failure": "run"}]},
     "'b' is named twice"),
    ({"a": [], "b": [{"key": "a", "on_failure": "maybe"}]}, "on_failure"),
])
def test_bad_graphs_are_refused_naming_what_is_wrong(edges: dict[str, list[Any]],
                                                      words: str) -> None:
    _refused(_body(edges), words)


def test_duplicate_keys_bad_keys_and_a_node_operation_key_are_refused() -> None:
    _refused({"nodes": [{"key": "a", "task": SPEC}, {"key": "a", "task": SPEC}]},
             "earlier node")
    _refused({"nodes": [{"key": "a b", "task": SPEC}]}, "key")
    _refused({"nodes": [{"key": "x" * 129, "task": SPEC}]}, "key")
    _refused({"nodes": [{"key": "a", "task": {**SPEC, "operation_key": "o"}}]},
             "operation_key")
    _refused({"nodes": []}, "nodes")


def test_one_node_over_the_limit_is_refused_whole_before_any_node_is_read() -> None:
    # The nodes are not even valid: the count alone refuses them.
    _refused({"nodes": [None] * (MAX_WORKFLOW_NODES + 1)}, f"at most {MAX_WORKFLOW_NODES}")
    assert len(wf.parse_workflow(
        {"nodes": [{"key": f"n{i}", "task": SPEC} for i in range(MAX_WORKFLOW_NODES)]}
    ).keys) == MAX_WORKFLOW_NODES


@pytest.mark.parametrize(("state", "on_failure", "effect"), [
    (TaskState.SUCCEEDED, "cancel", wf.EdgeEffect.DONE),
    (TaskState.SUCCEEDED, "run", wf.EdgeEffect.DONE),
    (TaskState.FAILED, "cancel", wf.EdgeEffect.CANCEL),
    (TaskState.CANCELLED, "cancel", wf.EdgeEffect.CANCEL),
    (TaskState.FAILED, "run", wf.EdgeEffect.DONE),
    (TaskState.CANCELLED, "run", wf.EdgeEffect.DONE),
    (TaskState.NEEDS_REVIEW, "cancel", wf.EdgeEffect.NONE),
    (TaskState.NEEDS_REVIEW, "run", wf.EdgeEffect.NONE),
    (TaskState.RUNNING, "cancel", wf.EdgeEffect.NONE),
    (TaskState.PENDING, "run", wf.EdgeEffect.NONE),
])
def test_what_a_parent_state_does_across_an_edge(state: TaskState, on_failure: str,
                                                 effect: wf.EdgeEffect) -> None:
    assert wf.edge_effect(state, on_failure) is effect


def _node(state: TaskState = TaskState.WAITING) -> TaskRec:
    return TaskRec(id="t" * 32, queue_id="q" * 32, state=state,
                   idempotency=Idempotency.IDEMPOTENT, max_attempts=3,
                   backoff=Backoff(1000, 60_000, 2.0, 0.0), attempt_timeout_ms=5_000,
                   lease_ttl_ms=1_000, deadline_at_ms=NOW - 1_000 + 60_000,
                   available_at_ms=NOW - 1_000, start_by_at_ms=NOW - 1_000 + 9_000,
                   workflow_id="w" * 32)


def test_a_release_starts_the_node_clock_then() -> None:
    node = _node()
    wf.release(node, "[]", NOW)
    assert node.state is TaskState.PENDING and node.parents_json == "[]"
    assert (node.available_at_ms, node.deadline_at_ms, node.start_by_at_ms) == (
        NOW, NOW + 60_000, NOW + 9_000)


def test_a_cancel_by_a_parent_names_it_and_only_a_waiting_node_moves() -> None:
    node = _node()
    wf.cancel_for_parent(node, "p", "p" * 32, "FAILED", NOW)
    assert node.state is TaskState.CANCELLED and node.failure_code == wf.PARENT_FAILED
    assert json.loads(node.failure_details or "")["parent_key"] == "p"
    for state in (TaskState.RUNNING, TaskState.SUCCEEDED):
        with pytest.raises(IllegalTransition):
            wf.release(_node(state), "[]", NOW)
    too_big = _node()
    wf.fail_parents_too_large(too_big, 2_000_000, NOW)
    assert too_big.state is TaskState.FAILED and too_big.failure_code == wf.PARENTS_TOO_LARGE


def test_the_parents_json_holds_results_and_failures_in_order() -> None:
    text, size = wf.parents_json([
        wf.ParentRow("a", "1" * 32, "SUCCEEDED", '{"x":1}', None, None),
        wf.ParentRow("b", "2" * 32, "FAILED", None, "BOOM", '{"why":"\\"q\\""}'),
        wf.ParentRow("c\"", "3" * 32, "CANCELLED", None, None, None)])
    assert json.loads(text) == [
        {"key": "a", "task_id": "1" * 32, "state": "SUCCEEDED", "result": {"x": 1}},
        {"key": "b", "task_id": "2" * 32, "state": "FAILED", "code": "BOOM",
         "details": {"why": '"q"'}},
        {"key": "c\"", "task_id": "3" * 32, "state": "CANCELLED"}]
    assert size == len('{"x":1}') + len('{"why":"\\"q\\""}')


@pytest.mark.parametrize(("states", "cancelled", "blocked", "want"), [
    (["SUCCEEDED", "RUNNING"], False, False, "RUNNING"),
    (["SUCCEEDED", "NEEDS_REVIEW", "WAITING"], False, True, "BLOCKED"),
    (["NEEDS_REVIEW", "RUNNING", "WAITING"], False, True, "RUNNING"),
    (["SUCCEEDED"], False, False, "SUCCEEDED"),
    (["SUCCEEDED", "FAILED", "CANCELLED"], False, False, "FAILED"),
    (["SUCCEEDED", "CANCELLED"], False, False, "CANCELLED"),
    (["SUCCEEDED"], True, False, "CANCELLED"),
])
def test_the_workflow_state(states: list[str], cancelled: bool, blocked: bool,
                            want: str) -> None:
    assert wf.workflow_state(states, cancelled, blocked).value == want


# --------------------------------------------------------------------------- simulation


@st.composite
def _dags(draw: st.DrawFn) -> tuple[dict[str, list[tuple[str, str]]], dict[str, str]]:
    """A random DAG (parents drawn among earlier nodes), each edge's rule, and the outcome
    each node's handler would reach if it ran."""
    n = draw(st.integers(1, 12))
    parents: dict[str, list[tuple[str, str]]] = {}
    for i in range(n):
        earlier = [f"n{j}" for j in range(i)]
        chosen = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=3)
                      ) if earlier else []
        parents[f"n{i}"] = [(p, draw(st.sampled_from(["cancel", "run"]))) for p in chosen]
    outcomes = {k: draw(st.sampled_from(["SUCCEEDED", "FAILED"])) for k in parents}
    return parents, outcomes


def _simulate(parents: dict[str, list[tuple[str, str]]], outcomes: dict[str, str],
              rng: random.Random) -> tuple[dict[str, str], dict[str, int]]:
    """Run the graph: ready nodes finish in a random order; each end is passed on with the
    rules, as the store does (a counter of parents left per child)."""
    state = {k: ("WAITING" if p else "PENDING") for k, p in parents.items()}
    left = {k: len(p) for k, p in parents.items()}
    children: dict[str, list[tuple[str, str]]] = {k: [] for k in parents}
    for child, edges in parents.items():
        for parent, rule in edges:
            children[parent].append((child, rule))
    ends = dict.fromkeys(parents, 0)

    def ended(key: str) -> None:
        ends[key] += 1
        for child, rule in children[key]:
            if state[child] != "WAITING":
                continue
            effect = wf.edge_effect(TaskState(state[key]), rule)
            if effect is wf.EdgeEffect.CANCEL:
                state[child] = "CANCELLED"
                ended(child)
            elif effect is wf.EdgeEffect.DONE:
                left[child] -= 1
                if left[child] == 0:
                    state[child] = "PENDING"

    for _ in range(4 * len(parents)):  # bounded: each pass ends at least one node
        ready = [k for k, s in state.items() if s == "PENDING"]
        if not ready:
            break
        key = rng.choice(ready)
        state[key] = outcomes[key]
        ended(key)
    return state, ends


@settings(max_examples=200, deadline=None)
@given(_dags(), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_every_node_ends_once_and_the_same_whatever_the_order(
        dag: tuple[dict[str, list[tuple[str, str]]], dict[str, str]], seed1: int,
        seed2: int) -> None:
    parents, outcomes = dag
    first, ends = _simulate(parents, outcomes, random.Random(seed1))
    second, _ = _simulate(parents, outcomes, random.Random(seed2))
    assert first == second
    assert set(ends.values()) == {1}  # ended, each exactly once
    for key, edges in parents.items():
        if first[key] == "CANCELLED":  # cancelled only by a parent that failed, on cancel
            assert any(first[p] in ("FAILED", "CANCELLED") and rule == "cancel"
                       for p, rule in edges)
        elif edges:  # it ran: every parent ended, and a failed one only on a run edge
            assert all(first[p] == "SUCCEEDED" or rule == "run" for p, rule in edges)
