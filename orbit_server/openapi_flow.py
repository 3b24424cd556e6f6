"""The flow-control part of the OpenAPI document (docs/flow-control.md): pause and resume,
the queue's pauses, the bulk cancel and review by filter, fair dispatch. openapi.py merges
it in; the request bodies' schemas come from the Structs of ``domain.flow_bodies``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .domain import flow_bodies
from .openapi_shapes import ID as _ID
from .openapi_shapes import MS as _MS
from .openapi_shapes import NULLABLE_STR as _NULLABLE_STR
from .openapi_shapes import obj as _obj
from .openapi_shapes import ref as _ref

_PAUSE = _obj({
    "queue_id": _ID, "scope": {"type": "string",
                               "enum": ["queue", "capability", "capability_version"]},
    "handler": _NULLABLE_STR, "handler_version": _NULLABLE_STR,
    "reason": {"type": "string"}, "paused_by": {"type": "string"}, "paused_at_ms": _MS,
}, ["queue_id", "scope", "handler", "handler_version", "reason", "paused_by", "paused_at_ms"])

FLOW_SCHEMAS: dict[str, Any] = {
    "Pause": _PAUSE,
    "QueuePauses": _obj({
        "queue_id": _ID,
        "paused": {"type": "array", "items": _ref("Pause"),
                   "description": "the pauses in force"},
        "log": {"type": "array", "description": "the last pauses and resumes, newest first",
                "items": _obj({
                    "action": {"type": "string", "enum": ["paused", "resumed"]},
                    "scope": {"type": "string"}, "handler": _NULLABLE_STR,
                    "handler_version": _NULLABLE_STR, "actor": {"type": "string"},
                    "reason": _NULLABLE_STR, "at_ms": _MS},
                    ["action", "scope", "actor", "at_ms"])},
        "resumed": {"type": "boolean", "description": "(resume) a pause of this key was "
                    "in force"},
    }, ["queue_id", "paused", "log"]),
    "BulkResult": _obj({
        "action": {"type": "string", "enum": ["retry", "cancel", "review_retry",
                                              "review_succeed", "review_fail"]},
        "matched": {"type": "integer", "description": "tasks the filter selected"},
        "changed": {"type": "integer", "description": "of those, changed (0 on a dry run)"},
        "cancelled": {"type": "integer", "description": "(cancel) as changed"},
        "skipped": {"type": "integer",
                    "description": "of those, left: moved on meanwhile"},
        "dry_run": {"type": "boolean"},
        "complete": {"type": "boolean", "description": "false: the request stopped at its "
                     "page bound; ask again for the rest"},
    }, ["action", "matched", "changed", "skipped", "dry_run", "complete"]),
    "Fair": _obj({
        "queue_id": _ID,
        "key": {**_NULLABLE_STR, "description": "the fair key name; null: not fair"},
        "updated_at_ms": {"type": ["integer", "null"], "minimum": 0},
        "updated_by": _NULLABLE_STR,
        "changes": {"type": "array", "description": "(GET) the last changes, newest first",
                    "items": _obj({"at_ms": _MS, "actor": {"type": "string"},
                                   "action": {"type": "string",
                                              "enum": ["fair_on", "fair_off"]},
                                   "key": {"type": "string"}},
                                  ["at_ms", "actor", "action", "key"])},
    }, ["queue_id", "key", "updated_at_ms", "updated_by"]),
}
# The request bodies, whose schemas openapi.py generates from their Structs.
FLOW_BODIES = (flow_bodies.PAUSE_REQUEST, flow_bodies.RESUME_REQUEST,
               flow_bodies.BULK_CANCEL_REQUEST, flow_bodies.BULK_REVIEW_REQUEST,
               flow_bodies.FAIR_REQUEST)


def flow_paths(_op: Callable[..., dict[str, Any]], _query: Callable[..., dict[str, Any]],
               _state_list: Callable[[list[str]], str],
               list_query: list[dict[str, Any]]) -> dict[str, Any]:
    """The paths, built with openapi.py's operation, parameter and state-pattern helpers
    and the task list's query parameters."""
    _FILTERS = [q for q in list_query
                if q["name"] not in ("state", "order", "limit", "cursor")]
    return {
        "/v1/queues/{queue_id}/pause": {"post": _op(
            "Pause the queue, a capability (handler) or a capability version: no new "
            "starts, running attempts finish, logged with who and why (producer)",
            "the queue's pauses", "QueuePauses", body="PauseRequest", params=["queue_id"])},
        "/v1/queues/{queue_id}/resume": {"post": _op(
            "Lift the pause of exactly this key; dispatch restarts at once (producer)",
            "the queue's pauses", "QueuePauses", body="ResumeRequest",
            params=["queue_id"])},
        "/v1/queues/{queue_id}/pauses": {"get": _op(
            "The queue's pauses in force and its last pauses and resumes", "the pauses",
            "QueuePauses", params=["queue_id"])},
        "/v1/queues/{queue_id}/fair": {
            "put": _op("Make the queue's dispatch take turns between the values of a key "
                       "(admin; docs/flow-control.md \"Fair dispatch\")", "the setting",
                       "Fair", body="FairRequest", params=["queue_id"]),
            "get": _op("The queue's fair dispatch setting and its recent changes",
                       "the setting", "Fair", params=["queue_id"]),
            "delete": _op("Plain priority dispatch again (admin); 404 when not fair",
                          "the setting", "Fair", params=["queue_id"])},
        "/v1/queues/{queue_id}/tasks/cancel": {"post": _op(
            "Cancel the queue's PENDING, RUNNING and NEEDS_REVIEW tasks the query selects, "
            "page by page, each audited (producer); with dry_run only count them",
            "counts", "BulkResult", body="BulkCancelRequest", params=["queue_id"],
            query=[_query("state", {"type": "string", "pattern": _state_list(
                ["PENDING", "RUNNING", "NEEDS_REVIEW"])},
                "PENDING, RUNNING, NEEDS_REVIEW or some (all three by default)"),
                *_FILTERS])},
        "/v1/queues/{queue_id}/tasks/review": {"post": _op(
            "Resolve the queue's NEEDS_REVIEW tasks the query selects alike (retry, succeed "
            "with a result, fail), page by page, each audited (producer); with dry_run only "
            "count them", "counts", "BulkResult", body="BulkReviewRequest",
            params=["queue_id"],
            query=[_query("state", {"type": "string", "pattern": _state_list(
                ["NEEDS_REVIEW"])}, "NEEDS_REVIEW (the default)"), *_FILTERS])},
    }
