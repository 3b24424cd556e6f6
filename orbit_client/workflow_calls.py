"""The workflow endpoints as data (docs/http-api.md "Workflows"), as calls.py does for the
rest: one function per endpoint builds a Call. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orbit_wire.errors import OrbitError

from .calls import MAX_WAIT_MS, Call, _checked_spec, _dumps, _id, _local
from .errors import OrbitApiError
from .workflows import WORKFLOW_STATES

MAX_WORKFLOW_LIST = 500


def submit_workflow(queue_id: str, body: Mapping[str, Any]) -> Call:
    """``body``: {"nodes": [{"key", "task": TaskSpec, "parents"}], "name"?,
    "operation_key"?} (canvas.workflow_body builds it); each task's values checked first."""
    nodes = body.get("nodes") if isinstance(body, Mapping) else None
    if not isinstance(nodes, list) or not nodes:
        raise _local("a workflow body needs a non-empty 'nodes' list")
    checked = []
    for index, node in enumerate(nodes):
        if not isinstance(node, Mapping):
            raise _local(f"nodes[{index}] must be a JSON object")
        try:
            task = _checked_spec(node.get("task"))  # type: ignore[arg-type]
        except OrbitError as exc:
            raise OrbitApiError(exc.code, f"nodes[{index}].task: {exc.message}") from None
        checked.append({**node, "task": task})
    return Call("POST", f"/v1/queues/{_id(queue_id, 'queue')}/workflows",
                body=_dumps({**body, "nodes": checked}), expected=(200, 201))


def get_workflow(workflow_id: str, wait_ms: int | None = None) -> Call:
    path = f"/v1/workflows/{_id(workflow_id, 'workflow')}"
    if wait_ms is None:
        return Call("GET", path)
    if not 0 <= wait_ms <= MAX_WAIT_MS:
        raise _local(f"wait_ms must be 0 to {MAX_WAIT_MS}, not {wait_ms}")
    return Call("GET", path, params={"wait_ms": str(wait_ms)}, wait_ms=wait_ms)


def list_workflows(queue_id: str, *, state: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> Call:
    params: dict[str, str] = {}
    if state is not None:
        if state.upper() not in WORKFLOW_STATES:
            raise _local(f"state {state!r} is not one of {', '.join(WORKFLOW_STATES)}")
        params["state"] = state.upper()
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or \
                not 1 <= limit <= MAX_WORKFLOW_LIST:
            raise _local(f"limit must be 1 to {MAX_WORKFLOW_LIST}, not {limit!r}")
        params["limit"] = str(limit)
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", f"/v1/queues/{_id(queue_id, 'queue')}/workflows", params=params)


def cancel_workflow(workflow_id: str, reason: str | None = None) -> Call:
    body: dict[str, Any] = {} if reason is None else {"reason": reason}
    return Call("POST", f"/v1/workflows/{_id(workflow_id, 'workflow')}/cancel",
                body=_dumps(body))
