"""The typed view of a workflow (``WorkflowView``, ``WorkflowNode``) and what its end means
for the producer: the sinks' results, or a typed error (``WorkflowFailed`` naming the failed
node and its cause, ``WorkflowCancelled``, ``WorkflowBlocked``, ``WorkflowTimeout``).

Pure: no I/O, no clock. The handles that read the server live in workflow_handle.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orbit_wire.errors import OutcomeError

from .tasks import Task, failure_words

__all__ = [
    "WORKFLOW_ENDED",
    "WORKFLOW_STATES",
    "WorkflowBlocked",
    "WorkflowCancelled",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowNode",
    "WorkflowTimeout",
    "WorkflowView",
]

WORKFLOW_STATES = ("RUNNING", "BLOCKED", "SUCCEEDED", "FAILED", "CANCELLED")
WORKFLOW_ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
# A wait ends there too: nothing moves until an operator reviews.
WORKFLOW_SETTLED = WORKFLOW_ENDED | {"BLOCKED"}


@dataclass(frozen=True, slots=True)
class WorkflowNode:
    """One node: its key, task, state, parents ``(key, on_failure)`` in declared order, the
    parent in NEEDS_REVIEW holding it (``blocked_by``), and why it was cancelled
    (``cause_code``, ``cause_parent``: PARENT_FAILED and the parent's key)."""

    key: str
    task_id: str
    state: str
    parents: tuple[tuple[str, str], ...]
    blocked_by: str | None = None
    cause_code: str | None = None
    cause_parent: str | None = None

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> WorkflowNode:
        parents = []
        for parent in view.get("parents") or ():
            if isinstance(parent, str):
                parents.append((parent, "cancel"))
            else:
                parents.append((str(parent.get("key")), str(parent.get("on_failure",
                                                                        "cancel"))))
        cause = view.get("cause") or {}
        return cls(key=str(view["key"]), task_id=str(view["task_id"]),
                   state=str(view["state"]), parents=tuple(parents),
                   blocked_by=view.get("blocked_by"), cause_code=cause.get("code"),
                   cause_parent=cause.get("parent_key"))


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """A workflow as the server answered it (docs/http-api.md "Workflows"); ``view`` is the
    whole answer. ``nodes`` is empty in a list's rows (they carry no nodes)."""

    id: str
    queue_id: str
    name: str | None
    state: str
    created_at_ms: int
    ended_at_ms: int | None
    counts: Mapping[str, int]
    nodes: tuple[WorkflowNode, ...]
    view: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> WorkflowView:
        return cls(id=str(view["workflow_id"]), queue_id=str(view["queue_id"]),
                   name=view.get("name"), state=str(view["state"]),
                   created_at_ms=int(view.get("created_at_ms") or 0),
                   ended_at_ms=view.get("ended_at_ms"), counts=dict(view.get("counts") or {}),
                   nodes=tuple(WorkflowNode.from_view(n) for n in view.get("nodes") or ()),
                   view=dict(view))

    @property
    def ended(self) -> bool:
        return self.state in WORKFLOW_ENDED

    @property
    def settled(self) -> bool:
        """Ended, or BLOCKED (only a review moves it on)."""
        return self.state in WORKFLOW_SETTLED

    def node(self, key: str) -> WorkflowNode:
        for node in self.nodes:
            if node.key == key:
                return node
        raise KeyError(key)

    def sinks(self) -> list[WorkflowNode]:
        """The nodes no other node waits for, in declared order: the workflow's results."""
        parents = {key for node in self.nodes for key, _ in node.parents}
        return [node for node in self.nodes if node.key not in parents]

    def first_in(self, state: str) -> WorkflowNode | None:
        return next((node for node in self.nodes if node.state == state), None)


class WorkflowError(OutcomeError):
    """A workflow did not produce its results; ``workflow`` is the workflow as last read.
    ``code`` is the workflow's state (WorkflowFailed: the failed node's failure code)."""

    def __init__(self, workflow: WorkflowView, message: str, *, code: str | None = None,
                 retryable: bool = False) -> None:
        super().__init__(workflow.state if code is None else code, message,
                         retryable=retryable)
        self.workflow = workflow


class WorkflowFailed(WorkflowError):
    """A node FAILED: ``node`` (its key, task), ``task`` its Task as read (its failure's
    ``failure_code`` and ``failure_details``); ``code`` is that failure's code."""

    def __init__(self, workflow: WorkflowView, node: WorkflowNode, task: Task[Any]) -> None:
        super().__init__(workflow, f"workflow {workflow.id} failed: node {node.key!r} "
                                   f"(task {node.task_id}) failed: {failure_words(task)}",
                         code=task.failure_code or "FAILED")
        self.node = node
        self.task = task
        self.details = task.failure_details


class WorkflowCancelled(WorkflowError):
    """The workflow was cancelled (or a node was, and none failed); ``node`` is the first
    node CANCELLED, with its cause where one was recorded."""

    def __init__(self, workflow: WorkflowView) -> None:
        node = workflow.first_in("CANCELLED")
        why = "" if node is None else f": node {node.key!r} cancelled" + (
            f" ({node.cause_code} of {node.cause_parent!r})" if node.cause_code else "")
        super().__init__(workflow, f"workflow {workflow.id} was cancelled{why}")
        self.node = node


class WorkflowBlocked(WorkflowError):
    """Nothing moves until an operator reviews the NEEDS_REVIEW node(s) (``blocking``: their
    keys); ``orbit tasks review`` decides, and the workflow goes on."""

    def __init__(self, workflow: WorkflowView) -> None:
        self.blocking = tuple(n.key for n in workflow.nodes if n.state == "NEEDS_REVIEW")
        which = ", ".join(repr(k) for k in self.blocking) or "a node"
        super().__init__(workflow, f"workflow {workflow.id} is blocked: {which} needs "
                                   "review", retryable=True)


class WorkflowTimeout(WorkflowError, TimeoutError):
    """The wait ended before the workflow ended; it goes on (``retryable``)."""

    def __init__(self, workflow: WorkflowView, timeout: float) -> None:
        super().__init__(workflow, f"workflow {workflow.id} is still {workflow.state} after "
                                   f"{timeout} s", retryable=True)
        self.timeout = timeout


def check_outcome(workflow: WorkflowView, timeout: float) -> None:
    """Nothing once SUCCEEDED; else the error of its state (WorkflowFailed is raised by the
    handle, which reads the failed node's task first)."""
    if workflow.state == "SUCCEEDED":
        return
    if workflow.state == "CANCELLED":
        raise WorkflowCancelled(workflow)
    if workflow.state == "BLOCKED":
        raise WorkflowBlocked(workflow)
    if workflow.state != "FAILED":
        raise WorkflowTimeout(workflow, timeout)


def failed_node(workflow: WorkflowView) -> WorkflowNode | None:
    return workflow.first_in("FAILED")


def sink_results(sinks: Sequence[WorkflowNode], tasks: Sequence[Task[Any]]) -> Any:
    """One sink: its result; several: ``{key: result}`` in declared order."""
    if len(sinks) == 1:
        return tasks[0].result
    return {node.key: task.result for node, task in zip(sinks, tasks, strict=True)}
