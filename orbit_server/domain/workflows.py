"""Workflows (docs/http-api.md "Workflows"): a graph of task nodes submitted at once, and the
rules that move a node when one of its parents ends. Pure: no I/O, time is ``now_ms``.

A node with parents is WAITING until released. When a parent ends, each edge to a WAITING
child is judged on its own (``edge_effect``): a SUCCEEDED parent counts as done; a FAILED or
CANCELLED one cancels the child (cause PARENT_FAILED naming the parent) unless the edge says
``on_failure: "run"``, when it counts as done too. A child whose parents are all done is
released (``release``): PENDING, its clock (available instant, deadline, start-by bound)
starting then. A parent in NEEDS_REVIEW changes nothing: its children wait, blocked, until
the review ends it. The store counts done parents atomically per child, so a child is
released once even when two replicas end two of its parents at the same instant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.jsonvalue import encode_value
from orbit_wire.limits import MAX_NODE_KEY_LEN, MAX_PARENTS_BYTES, MAX_WORKFLOW_NODES
from orbit_wire.model import TaskState
from orbit_wire.names import whole

from .bodies import MAX_OPERATION_KEY_LEN, DelayMs, NotBeforeAtMs, ScheduledTask
from .fields import Body, Label
from .records import TaskRec
from .states import TaskEvent, next_task_state

PARENT_FAILED: Final = "PARENT_FAILED"
PARENTS_TOO_LARGE: Final = "PARENTS_TOO_LARGE"
BLOCKED_BY_REVIEW: Final = "BLOCKED_BY_REVIEW"


class OnFailure(StrEnum):
    CANCEL = "cancel"  # a FAILED or CANCELLED parent cancels the child (the default)
    RUN = "run"  # the child runs anyway, once all its parents ended, and gets the failure


NodeKey = Annotated[str, Meta(
    min_length=1, max_length=MAX_NODE_KEY_LEN, pattern=whole(r"[A-Za-z0-9_.:-]+"),
    extra={"message": f"must be 1-{MAX_NODE_KEY_LEN} characters of A-Z a-z 0-9 _ . : -"})]


class _Body(Struct, frozen=True, forbid_unknown_fields=True):
    pass


class ParentEdge(_Body, frozen=True):
    """An edge from a parent node, with what its failure does to this node."""

    key: NodeKey
    on_failure: OnFailure = OnFailure.CANCEL


class NodeTask(ScheduledTask, frozen=True):
    """A node's task: a TaskSpec without operation_key (the workflow's makes the whole
    submit idempotent). Its delay counts from the node's release."""

    delay_ms: DelayMs | UnsetType = UNSET
    not_before_at_ms: NotBeforeAtMs | UnsetType = UNSET


class WorkflowNode(_Body, frozen=True):
    """A node: its task and the keys of its parents, in the order its handler receives
    their results."""

    key: NodeKey
    task: NodeTask
    parents: list[NodeKey | ParentEdge] = msgspec.field(default_factory=list)


class WorkflowRequest(_Body, frozen=True):
    """All nodes or none; at most MAX_WORKFLOW_NODES."""

    nodes: Annotated[list[WorkflowNode], Meta(min_length=1, max_length=MAX_WORKFLOW_NODES)]
    name: Label | UnsetType = UNSET
    operation_key: Annotated[str, Meta(
        min_length=1, max_length=MAX_OPERATION_KEY_LEN, pattern=whole(r"[\x21-\x7e]+"),
        extra={"message": f"must be 1-{MAX_OPERATION_KEY_LEN} printable ASCII characters "
               "without spaces"})] | UnsetType = UNSET


WORKFLOW_REQUEST: Final = Body(WorkflowRequest)


class ScheduledWorkflow(_Body, frozen=True):
    """A workflow as a schedule submits it at each tick: a WorkflowRequest without
    operation_key, which each firing sets itself."""

    nodes: Annotated[list[WorkflowNode], Meta(min_length=1, max_length=MAX_WORKFLOW_NODES)]
    name: Label | UnsetType = UNSET


@dataclass(frozen=True, slots=True)
class Graph:
    """A checked workflow: nodes in a topological order, each with its parents' keys and
    edge rules in declared order."""

    name: str | None
    operation_key: str | None
    keys: tuple[str, ...]  # topological order
    tasks: Mapping[str, dict[str, Any]]
    parents: Mapping[str, tuple[tuple[str, OnFailure], ...]]


def _bad(message: str) -> OrbitError:
    return OrbitError(ErrorCode.BAD_REQUEST, message)


def _first_repeat(keys: Iterable[str]) -> str | None:
    """The first key seen before, by a set: a callback of 10,000 parents stays linear."""
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return None


def parse_workflow(obj: object, where: str = "request body") -> Graph:
    """The graph of a workflow request: unique keys, parents that exist, no duplicate parent,
    no cycle, at most MAX_WORKFLOW_NODES nodes (a bigger one is refused whole, before any
    node is read). BAD_REQUEST naming the node otherwise. The node's TaskSpec is checked by
    the caller (``parse_task_spec``), which refuses ``operation_key`` there."""
    if isinstance(obj, Mapping):
        nodes = obj.get("nodes")
        if isinstance(nodes, list) and len(nodes) > MAX_WORKFLOW_NODES:
            raise _bad(f"a workflow has at most {MAX_WORKFLOW_NODES} nodes, this one has "
                       f"{len(nodes)}: nothing was submitted")
    body = WORKFLOW_REQUEST.load(obj, where)
    assert isinstance(obj, Mapping)  # load refused anything else
    raw_nodes = obj["nodes"]
    tasks: dict[str, dict[str, Any]] = {}
    parents: dict[str, tuple[tuple[str, OnFailure], ...]] = {}
    for i, node in enumerate(body.nodes):
        if node.key in tasks:
            raise _bad(f"nodes[{i}].key: {node.key!r} is the key of an earlier node")
        tasks[node.key] = raw_nodes[i]["task"]  # parse_task_spec reads it again, whole
        edges = tuple((parent, OnFailure.CANCEL) if isinstance(parent, str)
                      else (parent.key, parent.on_failure) for parent in node.parents)
        twice = _first_repeat(key for key, _ in edges)
        if twice is not None:
            raise _bad(f"nodes[{i}].parents: {twice!r} is named twice")
        parents[node.key] = edges
    for i, node in enumerate(body.nodes):
        for parent_key, _ in parents[node.key]:
            if parent_key not in tasks:
                raise _bad(f"nodes[{i}].parents: no node has the key {parent_key!r}")
            if parent_key == node.key:
                raise _bad(f"nodes[{i}].parents: a node cannot be its own parent")
    order = topological_order([n.key for n in body.nodes], parents)
    return Graph(name=None if body.name is UNSET else body.name,
                 operation_key=None if body.operation_key is UNSET else body.operation_key,
                 keys=tuple(order), tasks=tasks, parents=parents)


def topological_order(keys: Sequence[str],
                      parents: Mapping[str, Sequence[tuple[str, Any]]]) -> list[str]:
    """``keys`` with every node after its parents (declared order among equals);
    BAD_REQUEST naming a node on a cycle."""
    children: dict[str, list[str]] = {k: [] for k in keys}
    left = {k: len(parents[k]) for k in keys}
    for k in keys:
        for p, _ in parents[k]:
            children[p].append(k)
    ready = [k for k in keys if left[k] == 0]
    order: list[str] = []
    while ready:
        k = ready.pop()
        order.append(k)
        for c in children[k]:
            left[c] -= 1
            if left[c] == 0:
                ready.append(c)
    if len(order) != len(keys):
        stuck = next(k for k in keys if left[k] > 0)
        raise _bad(f"the graph has a cycle through node {stuck!r}")
    return order


MAX_CURSOR_LEN: Final = 128


def encode_cursor(created_at_ms: int, workflow_id: str) -> str:
    """The opaque cursor of a workflow list page: the last row's position."""
    return f"{created_at_ms}.{workflow_id}"


def decode_cursor(cursor: str) -> tuple[int, str]:
    """A list cursor's position; BAD_REQUEST for one this server did not give."""
    at, _, workflow_id = cursor.partition(".")
    if (len(cursor) > MAX_CURSOR_LEN or not at.isascii() or not at.isdigit() or len(at) > 18
            or len(workflow_id) != 32 or not all(c in "0123456789abcdef" for c in workflow_id)):
        raise _bad("cursor is not one this list returned")
    return int(at), workflow_id


class EdgeEffect(StrEnum):
    DONE = "DONE"  # the parent counts as done for the child
    CANCEL = "CANCEL"  # the child ends CANCELLED (PARENT_FAILED)
    NONE = "NONE"  # nothing yet (the parent is not ended)


_FAILED_ENDS = frozenset({TaskState.FAILED, TaskState.CANCELLED})


def edge_effect(parent_state: TaskState, on_failure: str) -> EdgeEffect:
    """What a parent's new state does to a WAITING child across one edge."""
    if parent_state is TaskState.SUCCEEDED:
        return EdgeEffect.DONE
    if parent_state in _FAILED_ENDS:
        return EdgeEffect.DONE if on_failure == OnFailure.RUN else EdgeEffect.CANCEL
    return EdgeEffect.NONE


def release(task: TaskRec, parents_json: str, now_ms: int) -> None:
    """WAITING → PENDING with its parents' results: the node's own clock starts now (its
    delay, deadline and start-by bound counted from the release, not the submit)."""
    task.state = next_task_state(task.state, TaskEvent.PARENTS_DONE)
    shift = max(0, now_ms - task.available_at_ms)
    task.available_at_ms += shift
    task.deadline_at_ms += shift
    if task.start_by_at_ms is not None:
        task.start_by_at_ms += shift
    task.parents_json = parents_json
    task.updated_at_ms = now_ms


def cancel_for_parent(task: TaskRec, parent_key: str, parent_task_id: str,
                      parent_state: str, now_ms: int) -> None:
    """WAITING → CANCELLED because a parent FAILED or was CANCELLED."""
    task.state = next_task_state(task.state, TaskEvent.CANCEL)
    task.failure_code = PARENT_FAILED
    task.failure_details = encode_value({
        "reason": f"parent {parent_key} ended {parent_state}", "parent_key": parent_key,
        "parent_task_id": parent_task_id, "parent_state": parent_state}).decode()
    task.updated_at_ms = now_ms


def fail_parents_too_large(task: TaskRec, size: int, now_ms: int) -> None:
    """WAITING → FAILED: its parents' results together are over MAX_PARENTS_BYTES."""
    task.state = next_task_state(task.state, TaskEvent.FAIL)
    task.failure_code = PARENTS_TOO_LARGE
    task.failure_details = encode_value({
        "reason": f"the parents' results take {size} bytes, over {MAX_PARENTS_BYTES}: pass "
                  "references to bigger results", "bytes": size,
        "limit": MAX_PARENTS_BYTES}).decode()
    task.updated_at_ms = now_ms


@dataclass(frozen=True, slots=True)
class ParentRow:
    """A parent as a released child receives it."""

    key: str
    task_id: str
    state: str
    result: str | None  # JSON text
    code: str | None
    details: str | None  # JSON text


def parents_json(parents: Iterable[ParentRow]) -> tuple[str, int]:
    """The JSON array a node's handler receives (``execution.parents``), and the bytes its
    values take: results for SUCCEEDED parents, code and details for failed ones."""
    parts: list[str] = []
    size = 0
    for p in parents:
        head = (f'{{"key":{_quote(p.key)},"task_id":{_quote(p.task_id)},'
                f'"state":{_quote(p.state)}')
        if p.state == TaskState.SUCCEEDED.value and p.result is not None:
            head += f',"result":{p.result}'
            size += len(p.result.encode())
        elif p.state != TaskState.SUCCEEDED.value:
            if p.code is not None:
                head += f',"code":{_quote(p.code)}'
            if p.details is not None:
                head += f',"details":{p.details}'
                size += len(p.details.encode())
        parts.append(head + "}")
    return "[" + ",".join(parts) + "]", size


def _quote(text: str) -> str:
    return encode_value(text).decode()


class WorkflowState(StrEnum):
    RUNNING = "RUNNING"
    BLOCKED = "BLOCKED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


def workflow_state(states: Iterable[str], cancelled: bool, blocked: bool) -> WorkflowState:
    """A workflow's state from its nodes' states: RUNNING while a node can still progress;
    BLOCKED when none can but one is in NEEDS_REVIEW or waits on one (``blocked``); once
    every node ended, SUCCEEDED, FAILED (a node FAILED) or CANCELLED (cancelled, or a node
    CANCELLED and none FAILED)."""
    seen = set(states)
    open_states = seen - {s.value for s in (TaskState.SUCCEEDED, TaskState.FAILED,
                                            TaskState.CANCELLED)}
    if open_states:
        moving = open_states - {TaskState.NEEDS_REVIEW.value, TaskState.WAITING.value}
        if not moving and (TaskState.NEEDS_REVIEW.value in open_states or blocked):
            return WorkflowState.BLOCKED
        return WorkflowState.RUNNING
    if TaskState.FAILED.value in seen:
        return WorkflowState.FAILED
    if cancelled or TaskState.CANCELLED.value in seen:
        return WorkflowState.CANCELLED
    return WorkflowState.SUCCEEDED


def blocked_by(parent_keys: Sequence[str], states_by_key: Mapping[str, str],
               blocked: Mapping[str, str]) -> str | None:
    """The key of the parent in NEEDS_REVIEW a WAITING node waits on, directly or through a
    WAITING parent blocked by one (``blocked``: what is known for other nodes), or None."""
    for key in parent_keys:
        if states_by_key.get(key) == TaskState.NEEDS_REVIEW.value:
            return key
    for key in parent_keys:
        if key in blocked:
            return blocked[key]
    return None
