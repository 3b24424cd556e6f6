"""The workflows' part of the OpenAPI document (docs/workflows.md): a workflow's view, its
summary in a list, the list. openapi.py merges it in; the request body's schema comes from
``domain.workflows.WORKFLOW_REQUEST``."""

from __future__ import annotations

from typing import Any

from orbit_wire.model import TaskState

from .domain.workflows import WorkflowState
from .openapi_shapes import ID as _ID
from .openapi_shapes import MS as _MS
from .openapi_shapes import NULLABLE_STR as _NULLABLE_STR
from .openapi_shapes import obj as _obj
from .openapi_shapes import ref as _ref

_STATES = [state.value for state in TaskState]
_SCHEMAS: dict[str, Any] = {}
_WORKFLOW_STATE = {"type": "string", "enum": [s.value for s in WorkflowState]}
_WORKFLOW_FIELDS: dict[str, Any] = {
    "workflow_id": _ID, "queue_id": _ID, "name": _NULLABLE_STR,
    "operation_key": _NULLABLE_STR, "state": _WORKFLOW_STATE, "created_at_ms": _MS,
    "ended_at_ms": {"type": ["integer", "null"], "description": (
        "when its last node ended (null while it runs)")},
    "node_count": {"type": "integer"},
    "counts": {"type": "object", "additionalProperties": {"type": "integer"},
               "description": "nodes by task state"},
}
_SCHEMAS["WorkflowSummary"] = _obj(_WORKFLOW_FIELDS, list(_WORKFLOW_FIELDS))
_SCHEMAS["Workflow"] = _obj({**_WORKFLOW_FIELDS, "nodes": {"type": "array", "items": _obj({
    "key": {"type": "string"}, "task_id": _ID,
    "state": {"type": "string", "enum": _STATES},
    "parents": {"type": "array", "items": _obj({
        "key": {"type": "string"}, "on_failure": {"type": "string", "enum": ["cancel", "run"]},
    }, ["key", "on_failure"])},
    "blocked_by": {"type": "string", "description": (
        "WAITING behind this parent in NEEDS_REVIEW (directly or through another node)")},
    "cause": _obj({"code": {"type": "string", "enum": ["PARENT_FAILED"]},
                   "parent_key": {"type": "string"}}, ["code", "parent_key"]),
}, ["key", "task_id", "state", "parents"])}}, [*_WORKFLOW_FIELDS, "nodes"])
_SCHEMAS["WorkflowList"] = _obj({
    "workflows": {"type": "array", "items": _ref("WorkflowSummary")},
    "next_cursor": _NULLABLE_STR}, ["workflows", "next_cursor"])

WORKFLOW_SCHEMAS = _SCHEMAS
