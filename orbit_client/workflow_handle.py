"""Workflow handles and the clients' workflow methods (docs/workflows.md).

``client.submit(canvas)`` (or ``submit_workflow``) answers a ``Workflow``: ``wait(timeout)``,
``result(timeout)`` (the sinks' results: one sink → its result, else ``{key: result}``; a
typed error otherwise), ``cancel()``, ``nodes()``, ``refresh()``. ``AsyncWorkflow`` is the
asyncio twin. The mixins give OrbitClient and AsyncOrbitClient the workflow endpoints.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from orbit_wire.tasktype import Signature

from . import workflow_calls
from .calls import MAX_WAIT_MS
from .canvas import Canvas, workflow_body
from .client_base import MAX_WAIT_ROUNDS
from .errors import OrbitApiError
from .tasks import Task
from .workflows import (
    WorkflowFailed,
    WorkflowNode,
    WorkflowView,
    check_outcome,
    failed_node,
    sink_results,
)

if TYPE_CHECKING:
    from .calls import Call

__all__ = ["AsyncWorkflow", "AsyncWorkflowMethods", "Workflow", "WorkflowMethods"]


def _body(canvas: Any, name: str | None, operation_key: str | None) -> Mapping[str, Any]:
    """The POST body of a canvas (or a body dict given as is)."""
    if isinstance(canvas, Signature | Canvas):
        return workflow_body(canvas, name=name, operation_key=operation_key)
    if isinstance(canvas, Mapping):
        if name is not None or operation_key is not None:
            raise OrbitApiError("BAD_REQUEST", "a body dict carries its own name and "
                                "operation_key")
        return canvas
    raise OrbitApiError("BAD_REQUEST", "submit_workflow takes a canvas (chain, group, chord, "
                        "Graph, a signature) or a workflow body dict")


# The sinks have ended when their results are read: the wait returns at once.
SINK_READ_S = 30.0


def _wait_ms(deadline: float) -> int:
    return max(0, min(int((deadline - time.monotonic()) * 1000), MAX_WAIT_MS))


_C = TypeVar("_C")


class _WorkflowHandle(Generic[_C]):
    """What Workflow and AsyncWorkflow share: the client, the workflow as last read
    (``view``) and what is read from it."""

    def __init__(self, client: _C, view: Mapping[str, Any]) -> None:
        self._client = client
        self.view = WorkflowView.from_view(view)

    @property
    def id(self) -> str:
        return self.view.id

    @property
    def state(self) -> str:
        return self.view.state

    def nodes(self) -> tuple[WorkflowNode, ...]:
        """The nodes with their states, as last read (``refresh()`` reads again)."""
        return self.view.nodes

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id}, {self.state})"


class Workflow(_WorkflowHandle["WorkflowMethods"]):
    """A submitted workflow, as last read (``view``)."""

    def refresh(self) -> Workflow:
        self.view = WorkflowView.from_view(self._client.get_workflow(self.id))
        return self

    def wait(self, timeout: float) -> WorkflowView:
        """Until the workflow ended or is BLOCKED (waiting for a review), or ``timeout``
        seconds passed: the workflow as it is then."""
        deadline = time.monotonic() + timeout
        for _ in range(MAX_WAIT_ROUNDS):  # the first read waits too: the server reads once
            self.view = WorkflowView.from_view(
                self._client.get_workflow(self.id, _wait_ms(deadline)))
            if self.view.settled or _wait_ms(deadline) <= 0:
                break
        return self.view

    def result(self, timeout: float) -> Any:
        """The sinks' results once SUCCEEDED; else WorkflowFailed (the failed node, its
        failure), WorkflowCancelled, WorkflowBlocked or WorkflowTimeout."""
        view = self.wait(timeout)
        check_outcome(view, timeout)
        node = failed_node(view)
        if node is not None:
            raise WorkflowFailed(view, node, self._client.task(node.task_id))
        sinks = view.sinks()
        # Ended tasks: one wait reads them all (over the channel, one round for many).
        views = self._client.wait([n.task_id for n in sinks], SINK_READ_S)
        return sink_results(sinks, [Task.from_view(v) for v in views])

    def cancel(self, reason: str | None = None) -> WorkflowView:
        """Cancel every node not yet ended (running ones cooperatively, then killed)."""
        self.view = WorkflowView.from_view(self._client.cancel_workflow(self.id, reason))
        return self.view


class AsyncWorkflow(_WorkflowHandle["AsyncWorkflowMethods"]):
    """The asyncio twin of Workflow."""

    async def refresh(self) -> AsyncWorkflow:
        self.view = WorkflowView.from_view(await self._client.get_workflow(self.id))
        return self

    async def wait(self, timeout: float) -> WorkflowView:
        deadline = time.monotonic() + timeout
        for _ in range(MAX_WAIT_ROUNDS):
            self.view = WorkflowView.from_view(
                await self._client.get_workflow(self.id, _wait_ms(deadline)))
            if self.view.settled or _wait_ms(deadline) <= 0:
                break
        return self.view

    async def result(self, timeout: float) -> Any:
        view = await self.wait(timeout)
        check_outcome(view, timeout)
        node = failed_node(view)
        if node is not None:
            raise WorkflowFailed(view, node, await self._client.task(node.task_id))
        sinks = view.sinks()
        views = await self._client.wait([n.task_id for n in sinks], SINK_READ_S)
        return sink_results(sinks, [Task.from_view(v) for v in views])

    async def cancel(self, reason: str | None = None) -> WorkflowView:
        self.view = WorkflowView.from_view(await self._client.cancel_workflow(self.id, reason))
        return self.view


class WorkflowMethods:
    """OrbitClient's workflow endpoints."""

    if TYPE_CHECKING:  # OrbitClient's own
        def _send(self, call: Call) -> dict[str, Any]: ...
        def _queue_for(self, queue: str | None) -> str: ...
        def task(self, task_id: str) -> Task[Any]: ...
        def wait(self, tasks: Iterable[str], timeout: float) -> list[dict[str, Any]]: ...

    def submit_workflow(self, canvas: Any, *, queue: str | None = None,
                        name: str | None = None, operation_key: str | None = None
                        ) -> Workflow:
        """Submit a canvas (or a body dict) as one workflow, all or nothing (an existing
        one when ``operation_key`` matched)."""
        body = _body(canvas, name, operation_key)
        call = workflow_calls.submit_workflow(self._queue_for(queue), body)
        return Workflow(self, self._send(call))

    def workflow(self, workflow_id: str) -> Workflow:
        """A handle on a workflow submitted before (by anyone)."""
        return Workflow(self, self.get_workflow(workflow_id))

    def get_workflow(self, workflow_id: str, wait_ms: int | None = None
                     ) -> dict[str, Any]:
        """The workflow now, or (with ``wait_ms``) once ended or BLOCKED."""
        return self._send(workflow_calls.get_workflow(workflow_id, wait_ms))

    def list_workflows(self, queue_id: str, **filters: Any) -> dict[str, Any]:
        """One page: ``{"workflows": [...], "next_cursor"}``; filters state, limit, cursor."""
        return self._send(workflow_calls.list_workflows(queue_id, **filters))

    def cancel_workflow(self, workflow_id: str, reason: str | None = None
                        ) -> dict[str, Any]:
        return self._send(workflow_calls.cancel_workflow(workflow_id, reason))


class AsyncWorkflowMethods:
    """AsyncOrbitClient's workflow endpoints."""

    if TYPE_CHECKING:  # AsyncOrbitClient's own
        async def _send(self, call: Call) -> dict[str, Any]: ...
        def _queue_for(self, queue: str | None) -> str: ...
        async def task(self, task_id: str) -> Task[Any]: ...
        async def wait(self, tasks: Iterable[str], timeout: float
                       ) -> list[dict[str, Any]]: ...

    async def submit_workflow(self, canvas: Any, *,
                              queue: str | None = None, name: str | None = None,
                              operation_key: str | None = None) -> AsyncWorkflow:
        body = _body(canvas, name, operation_key)
        call = workflow_calls.submit_workflow(self._queue_for(queue), body)
        return AsyncWorkflow(self, await self._send(call))

    async def workflow(self, workflow_id: str) -> AsyncWorkflow:
        return AsyncWorkflow(self, await self.get_workflow(workflow_id))

    async def get_workflow(self, workflow_id: str,
                           wait_ms: int | None = None) -> dict[str, Any]:
        return await self._send(workflow_calls.get_workflow(workflow_id, wait_ms))

    async def list_workflows(self, queue_id: str, **filters: Any
                             ) -> dict[str, Any]:
        return await self._send(workflow_calls.list_workflows(queue_id, **filters))

    async def cancel_workflow(self, workflow_id: str,
                              reason: str | None = None) -> dict[str, Any]:
        return await self._send(workflow_calls.cancel_workflow(workflow_id, reason))


def with_workflow_body(schedule: Mapping[str, Any]) -> Mapping[str, Any]:
    """A schedule whose ``workflow`` is a canvas, with the canvas compiled to its body."""
    flow = schedule.get("workflow") if isinstance(schedule, Mapping) else None
    if isinstance(flow, Signature | Canvas):
        return {**schedule, "workflow": workflow_body(flow)}
    return schedule


def is_canvas(target: object) -> bool:
    """Whether ``submit``'s first argument is a workflow (a canvas, not a lone signature)."""
    return isinstance(target, Canvas)
