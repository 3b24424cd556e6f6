"""The OpenAPI 3.1 document served at ``GET /openapi.json`` (docs/http-api.md, as data).

Request bodies are not written here: their schemas are generated from the field definitions
the routes parse with (``domain.spec.TASK_SPEC``, ``domain.schedules.SCHEDULE``,
``domain.bodies``), so the document cannot admit what the server refuses or the other way
round; tests/unit/server/test_openapi_schemas.py property-checks both directions. Query
parameters are checked against their parsers there too. A test checks that every route of
the app appears here with its methods.
"""

from __future__ import annotations

from typing import Any

from orbit_wire.errors import ErrorCode
from orbit_wire.model import TaskState

from .domain import bodies
from .domain.listing import MAX_LIMIT
from .domain.schedules import SCHEDULE
from .domain.spec import BACKOFF, TASK_SPEC

_ID = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
_MS = {"type": "integer", "minimum": 0}
_STATES = [state.value for state in TaskState]
_NULLABLE_INT = {"type": ["integer", "null"]}
_NULLABLE_STR = {"type": ["string", "null"]}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


_SCHEMAS: dict[str, Any] = {
    "Error": _obj({"error": _obj({
        "code": {"type": "string", "enum": [c.value for c in ErrorCode]},
        "message": {"type": "string"},
        "retryable": {"type": "boolean"},
    }, ["code", "message", "retryable"])}, ["error"]),
    "Capability": _obj({
        "handler": {"type": "string"}, "handler_version": {"type": "string"},
        "payload_version": {"type": "string"},
    }, ["handler", "handler_version", "payload_version"]),
    "Policy": _obj({
        "idempotency": {"type": "string", "enum": ["IDEMPOTENT", "NON_IDEMPOTENT"]},
        "max_attempts": {"type": "integer"}, "backoff": _ref("Backoff"),
        "attempt_timeout_ms": _MS, "lease_ttl_ms": _MS, "schedule_to_start_ms": _NULLABLE_INT,
        "cancel_grace_ms": {"type": "integer"},
    }),
    "Waiting": {"oneOf": [{"type": "null"}, _obj({
        "reason": {"type": "string", "enum": ["NO_LIVE_WORKER"]},
        "capability": _ref("Capability"), "since": _MS,
    }, ["reason", "capability", "since"])]},
    "Task": _obj({
        "id": _ID, "queue_id": _ID, "state": {"type": "string", "enum": _STATES},
        "capability": _ref("Capability"), "payload": {}, "policy": _ref("Policy"),
        "operation_key": _NULLABLE_STR, "priority": {"type": "integer"},
        "created_at_ms": _MS, "updated_at_ms": _MS,
        "deadline_at_ms": _MS, "next_attempt_at_ms": _NULLABLE_INT,
        "attempts": {"type": "integer", "description": "started attempts"},
        "epoch": {"type": "integer"},
        "result": {"description": "the handler's JSON exactly as produced, or null"},
        "failure": {"oneOf": [{"type": "null"}, _obj({"code": {"type": "string"}, "details": {}})]},
        "cancel_requested": {"type": "boolean"}, "finished_at_ms": _NULLABLE_INT,
        "waiting": _ref("Waiting"),
        "attempt_outcome_pending": {
            "type": "boolean",
            "description": "CANCELLED while its running attempt has no outcome yet"},
    }, ["id", "queue_id", "state", "capability", "payload", "policy", "created_at_ms",
        "updated_at_ms", "deadline_at_ms", "attempts", "epoch", "result", "failure",
        "cancel_requested"]),
    "Attempt": _obj({
        "id": _ID, "task_id": _ID, "attempt_number": {"type": "integer"},
        "epoch": {"type": "integer"},
        "state": {"type": "string", "enum": ["RESERVED", "RUNNING", "RELEASED", "FINISHED"]},
        "instance_id": _NULLABLE_STR, "child_pid": _NULLABLE_INT,
        "reserved_at_ms": _NULLABLE_INT, "started_at_ms": _NULLABLE_INT,
        "finished_at_ms": _NULLABLE_INT, "lease_expires_at_ms": _NULLABLE_INT,
        "renewals": {"type": "integer"}, "outcome": _NULLABLE_STR, "code": _NULLABLE_STR,
        "retryable": {"type": ["boolean", "null"]}, "details": {},
        "exit_code": _NULLABLE_INT, "signal": _NULLABLE_INT, "cpu_ms": _NULLABLE_INT,
        "peak_rss_bytes": _NULLABLE_INT, "kill_reason": _NULLABLE_STR,
        "killed_at_ms": _NULLABLE_INT,
        "kill_after_lease_end_ms": {"type": ["integer", "null"],
                                    "description": "the SIGKILL's instant less the lease end"},
        "reap_ms": _NULLABLE_INT,
        "ended_by": {"type": ["string", "null"], "enum": ["COOPERATIVE", "KILLED", None],
                     "description": "after a cancel reached the running attempt: its handler "
                                    "stopped by itself (COOPERATIVE) or its child was "
                                    "SIGKILLed (KILLED)"},
        "decision": _NULLABLE_STR, "decision_rule": _NULLABLE_STR,
    }, ["id", "task_id", "attempt_number", "epoch", "state"]),
    "Evidence": _obj({
        "id": {"type": "string"}, "task_id": _ID, "attempt_id": _ID,
        "epoch": {"type": "integer"}, "instance_id": _NULLABLE_STR,
        "received_at_ms": _MS, "outcome": _NULLABLE_STR, "code": _NULLABLE_STR,
        "reason": _NULLABLE_STR, "result": {}, "details": {},
    }, ["id", "task_id", "attempt_id", "epoch", "received_at_ms"]),
    "AuditEvent": _obj({
        "id": {"type": ["string", "integer"]}, "task_id": _ID, "attempt_id": _NULLABLE_STR,
        "at_ms": _MS, "actor": {"type": "string"}, "kind": {"type": "string"},
        "from_state": _NULLABLE_STR, "to_state": _NULLABLE_STR, "detail": {},
    }, ["id", "task_id", "at_ms", "actor", "kind"]),
    "Queue": _obj({"id": _ID, "name": _NULLABLE_STR, "created_at_ms": _MS},
                  ["id", "created_at_ms"]),
    "QueueStats": _obj({
        "queue_id": _ID,
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "running_attempts": {"type": "integer"}, "oldest_pending_age_ms": _NULLABLE_INT,
        "capabilities": {"type": "array", "items": _obj({
            "capability": _ref("Capability"), "pending": {"type": "integer"},
            "live_workers": {"type": "integer"}, "waiting": _ref("Waiting")})},
        "pending_by_priority": {"type": "object", "additionalProperties": {"type": "integer"}},
        "pending_delayed": {"type": "integer"},
    }, ["queue_id", "counts"]),
    "Schedule": _obj({
        "id": _ID, "queue_id": _ID, "name": _NULLABLE_STR, "cron": {"type": "string"},
        "timezone": {"type": "string"}, "task": _ref("TaskSpec"),
        "missed_ticks": {"type": "string"},
        "state": {"type": "string", "enum": ["ACTIVE", "PAUSED"]},
        "next_fire_at_ms": _MS, "last_tick_at_ms": _NULLABLE_INT,
        "last_task_id": _NULLABLE_STR, "fired": {"type": "integer"},
        "created_by": {"type": "string"}, "created_at_ms": _MS, "updated_at_ms": _MS,
        "firings": {"type": "array", "items": _obj({
            "tick_at_ms": _MS, "task_id": _NULLABLE_STR, "fired_at_ms": _MS,
            "missed": {"type": "boolean"}})},
    }, ["id", "queue_id", "cron", "timezone", "task", "state", "next_fire_at_ms"]),
    "ScheduleList": _obj({"schedules": {"type": "array", "items": _ref("Schedule")}},
                         ["schedules"]),
    "ScheduleDeleted": _obj({"schedule_id": _ID, "deleted": {"type": "boolean"}}),
    "TaskPage": _obj({
        "tasks": {"type": "array", "items": _ref("TaskSummary"),
                  "description": "task views without payload and result"},
        "next_cursor": {**_NULLABLE_STR, "description": "null: the list ends here"},
    }, ["tasks", "next_cursor"]),
    "QueueList": _obj({"queues": {"type": "array", "items": _obj({
        "queue_id": _ID, "id": _ID, "name": _NULLABLE_STR, "created_at": _MS,
        "created_at_ms": _MS,
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    }, ["queue_id", "name", "created_at", "counts"])}}, ["queues"]),
    "Throughput": _obj({
        "queue_id": _ID, "window_ms": _MS, "until_at_ms": _MS,
        "windows": {"type": "array", "items": _obj({
            "from_at_ms": _MS,
            "counts": _obj({s: {"type": "integer"} for s in ("SUCCEEDED", "FAILED",
                                                             "CANCELLED")}),
        }, ["from_at_ms", "counts"])},
    }, ["queue_id", "window_ms", "until_at_ms", "windows"]),
    "Me": _obj({"credential_id": _ID, "role": {"type": "string", "enum": ["admin", "producer"]},
                "queues": {"type": "array", "items": _ID}},
               ["credential_id", "role", "queues"]),
    "WorkerList": _obj({"workers": {"type": "array", "items": _obj({
        "instance_id": _ID, "queue_id": _ID, "replica": _NULLABLE_STR,
        "version": _NULLABLE_STR, "capabilities": {"type": "array", "items": _ref("Capability")},
        "slots": {"type": "integer"}, "credit": {"type": "integer"},
        "connected_at": _MS, "connected_at_ms": _MS, "last_heartbeat_at": _MS,
        "last_heartbeat_at_ms": _MS, "last_seen_at_ms": _MS,
        "running": {"type": "array", "items": _obj({
            "task_id": _ID, "attempt_id": _ID, "child_pid": _NULLABLE_INT,
            "running_ms": _MS})},
    }, ["instance_id", "queue_id", "capabilities", "slots", "credit", "running"])}},
        ["workers"]),
    "Credential": _obj({
        "credential_id": _ID, "secret": {"type": "string", "description": "shown once"},
        "role": {"type": "string"}, "queues": {"type": "array", "items": _ID},
        "name": _NULLABLE_STR, "expires_at_ms": _NULLABLE_INT,
    }, ["credential_id", "secret", "role", "queues"]),
    "CredentialInfo": _obj({
        "credential_id": _ID, "name": _NULLABLE_STR, "role": {"type": "string"},
        "queues": {"type": "array", "items": _ID}, "created_at_ms": _MS,
        "last_used_at_ms": _NULLABLE_INT, "expires_at_ms": _NULLABLE_INT,
        "revoked_at_ms": _NULLABLE_INT, "previous_secret_until_ms": _NULLABLE_INT,
    }, ["credential_id", "role", "queues", "created_at_ms"]),
    "CredentialList": _obj({"credentials": {"type": "array", "items": _ref("CredentialInfo")}},
                           ["credentials"]),
    "Rotated": _obj({
        "credential_id": _ID, "secret": {"type": "string", "description": "shown once"},
        "role": {"type": "string"}, "queues": {"type": "array", "items": _ID},
        "previous_secret_until_ms": _NULLABLE_INT,
    }, ["credential_id", "secret", "role", "queues"]),
    "Revoked": _obj({"credential_id": _ID, "revoked": {"type": "boolean"}},
                    ["credential_id", "revoked"]),
    "TaskList": _obj({"tasks": {"type": "array", "items": _ref("Task")}}, ["tasks"]),
    "AttemptHistory": _obj({
        "attempts": {"type": "array", "items": _ref("Attempt")},
        "evidence": {"type": "array", "items": _ref("Evidence")},
    }, ["attempts", "evidence"]),
    "AuditTrail": _obj({"events": {"type": "array", "items": _ref("AuditEvent")}}, ["events"]),
    "Health": _obj({"status": {"type": "string"}}, ["status"]),
}

# Request bodies, generated from the definitions the routes parse with. Where one of them
# appears inside another (a batch's tasks, a spec's backoff) it becomes a $ref.
_BODIES: dict[str, Any] = {
    "Backoff": BACKOFF.schema(),
    "TaskSpec": TASK_SPEC.schema(),
    "ScheduleRequest": SCHEDULE.schema(),
    "QueueRequest": bodies.QUEUE_REQUEST.schema(),
    "CredentialRequest": bodies.CREDENTIAL_REQUEST.schema(),
    "RotateRequest": bodies.ROTATE_REQUEST.schema(),
    "CancelRequest": bodies.CANCEL_REQUEST.schema(),
    "ReviewRequest": bodies.REVIEW_REQUEST.schema(),
    "Batch": bodies.BATCH.schema(),
}


def _with_refs(schema: Any, top: str | None = None) -> Any:
    """``schema`` with every embedded copy of another named body replaced by its $ref."""
    if isinstance(schema, dict):
        for name, body in _BODIES.items():
            if name != top and schema == body:
                return _ref(name)
        return {key: _with_refs(value) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_with_refs(item) for item in schema]
    return schema


_SCHEMAS.update({name: _with_refs(body, name) for name, body in _BODIES.items()})
# A listed task: the task view without its payload and result.
_SCHEMAS["TaskSummary"] = {**_SCHEMAS["Task"], "required": [
    key for key in _SCHEMAS["Task"]["required"] if key not in ("payload", "result")]}

_ERRORS = {
    "400": "bad request (BAD_REQUEST, INVALID_JSON, NESTING_TOO_DEEP, NUMBER_OUT_OF_RANGE)",
    "401": "UNAUTHENTICATED", "403": "PERMISSION_DENIED", "404": "NOT_FOUND",
    "409": "CONFLICT", "413": "PAYLOAD_TOO_LARGE",
    "429": "RATE_LIMITED (failed authentications, submits), with Retry-After",
    "503": "UNAVAILABLE (retryable)",
    "500": "INTERNAL",
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(summary: str, ok: str, schema: str, *, body: str | None = None,
        params: tuple[str, ...] | list[str] = (), auth: bool = True, status: str = "200",
        extra: dict[str, Any] | None = None,
        query: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    responses: dict[str, Any] = {status: _json(_ref(schema), ok)}
    if extra:
        responses.update(extra)
    if auth:
        responses.update({code: _json(_ref("Error"), text) for code, text in _ERRORS.items()})
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    parameters = [{"name": p, "in": "path", "required": True, "schema": _ID} for p in params]
    parameters.extend(query or [])
    if parameters:
        op["parameters"] = parameters
    if body:
        # Required where the body has a required field (an empty body is ``{}``).
        op["requestBody"] = {"required": bool(_SCHEMAS[body].get("required")),
                             "content": {"application/json": {"schema": _ref(body)}}}
    if not auth:
        op["security"] = []
    return op


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def _any_case(word: str) -> str:
    return "".join(f"[{c}{c.lower()}]" if c.isalpha() else c for c in word)


# domain.listing.parse_filter's rules: comma-separated state names in any case, blanks
# skipped; integers as ASCII digits; a cursor is opaque (only one this list returned).
_STATE_LIST = (r"^\s*(?:" + "|".join(_any_case(s) for s in _STATES) + r")?\s*"
               r"(?:,\s*(?:" + "|".join(_any_case(s) for s in _STATES) + r")?\s*)*$")
_TEXT = {"type": "string", "maxLength": 256}
_INSTANT = {"type": "integer", "minimum": 0, "maximum": 2**53}
_LIST_QUERY = [
    _query("state", {"type": "string", "pattern": _STATE_LIST},
           "states, comma-separated (any case)"),
    _query("handler", _TEXT, "capability handler"),
    _query("handler_version", _TEXT, "capability handler version"),
    _query("payload_version", _TEXT, "capability payload version"),
    *(_query(name, _INSTANT, "epoch ms, inclusive") for name in (
        "created_after", "created_before", "finished_after", "finished_before")),
    _query("order", {"type": "string", "enum": ["newest", "oldest"], "default": "newest"},
           "by creation"),
    _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 50},
           "tasks per page at most"),
    _query("cursor", {"type": "string", "maxLength": 128},
           "opaque: the next_cursor of the previous page of this list, same order"),
]


def openapi_document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document (a fresh dict each call)."""
    wait = {"name": "wait_ms", "in": "query", "required": False,
            "schema": {"type": "integer", "minimum": 0, "maximum": 60000},
            "description": "wait until the task is terminal or NEEDS_REVIEW, at most this long"}
    paths: dict[str, Any] = {
        "/healthz": {"get": _op("Health check", "server is up", "Health", auth=False)},
        "/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {
            "200": {"description": "OpenAPI 3.1 document",
                    "content": {"application/json": {"schema": {"type": "object"}}}}}}},
        "/metrics": {"get": {
            "summary": "Prometheus metrics (docs/observability.md); open unless the server "
                       "has a metrics token, then that token as the bearer",
            "security": [], "responses": {
                "200": {"description": "Prometheus text exposition (or OpenMetrics, by Accept)",
                        "content": {"text/plain": {"schema": {"type": "string"}}}},
                "401": {"description": "the server's metrics token is required"}}}},
        "/v1/queues": {"post": _op("Create a queue (admin)", "created", "Queue",
                                   body="QueueRequest", status="201"),
                       "get": _op("Queues with task counts (admin: all; producer: its own)",
                                  "queues", "QueueList")},
        "/v1/workers": {"get": _op(
            "Live worker instances on every replica (admin: all; producer: its queues)",
            "workers", "WorkerList", query=[_query("queue_id", _ID, "only this queue")])},
        "/v1/queues/{queue_id}/stats": {"get": _op("Queue statistics (admin, producer)",
                                                   "statistics", "QueueStats",
                                                   params=["queue_id"])},
        "/v1/queues/{queue_id}/throughput": {"get": _op(
            "Tasks finished per recent window, by end state (admin, producer)", "counts",
            "Throughput", params=["queue_id"], query=[
                _query("window_ms", {"type": "integer", "minimum": 1000,
                                     "maximum": 86_400_000, "default": 60_000},
                       "width of one window"),
                _query("windows", {"type": "integer", "minimum": 1, "maximum": 120,
                                   "default": 30}, "windows up to now, oldest first")])},
        "/v1/me": {"get": _op("The calling credential: its ID, role and queues (no secret)",
                              "the credential", "Me")},
        "/v1/credentials": {
            "post": _op("Create a credential (admin); the secret is shown once",
                        "created", "Credential", body="CredentialRequest", status="201"),
            "get": _op("List credentials without secrets (admin)", "credentials",
                       "CredentialList")},
        "/v1/credentials/{credential_id}/rotate": {"post": _op(
            "A new secret (admin); the old one works for grace_ms more", "rotated", "Rotated",
            body="RotateRequest", params=["credential_id"])},
        "/v1/credentials/{credential_id}": {"delete": _op("Revoke a credential (admin)",
                                                          "revoked", "Revoked",
                                                          params=["credential_id"])},
        "/v1/queues/{queue_id}/tasks": {"post": _op(
            "Submit a task (producer); 200 with the existing task when operation_key matched",
            "created", "Task", body="TaskSpec", params=["queue_id"], status="201",
            extra={"200": _json(_ref("Task"), "existing task with this operation_key")}),
            "get": _op("A page of the queue's tasks, filtered, newest or oldest first",
                       "a page", "TaskPage", params=["queue_id"], query=_LIST_QUERY)},
        "/v1/queues/{queue_id}/tasks/batch": {"post": _op(
            "Submit up to 1000 tasks, all or nothing (producer)", "created", "TaskList",
            body="Batch", params=["queue_id"], status="201")},
        "/v1/tasks/{task_id}": {"get": _op("Read a task, optionally waiting for its end",
                                           "the task", "Task", params=["task_id"],
                                           query=[wait])},
        "/v1/tasks/{task_id}/cancel": {"post": _op("Cancel a task (producer)", "the task",
                                                   "Task", body="CancelRequest",
                                                   params=["task_id"])},
        "/v1/tasks/{task_id}/attempts": {"get": _op("Attempt history with evidence",
                                                    "history", "AttemptHistory",
                                                    params=["task_id"])},
        "/v1/tasks/{task_id}/audit": {"get": _op("Audit trail", "events", "AuditTrail",
                                                 params=["task_id"])},
        "/v1/tasks/{task_id}/review": {"post": _op(
            "Resolve a NEEDS_REVIEW task (retry, succeed, fail)", "the task", "Task",
            body="ReviewRequest", params=["task_id"])},
        "/v1/queues/{queue_id}/schedules": {
            "post": _op("Create a periodic schedule (producer)", "created", "Schedule",
                        body="ScheduleRequest", params=["queue_id"], status="201"),
            "get": _op("A queue's schedules", "schedules", "ScheduleList",
                       params=["queue_id"])},
        "/v1/schedules/{schedule_id}": {
            "get": _op("A schedule with its recent firings", "the schedule", "Schedule",
                       params=["schedule_id"]),
            "delete": _op("Delete a schedule", "deleted", "ScheduleDeleted",
                          params=["schedule_id"])},
        "/v1/schedules/{schedule_id}/pause": {"post": _op(
            "Pause a schedule", "the schedule", "Schedule", params=["schedule_id"])},
        "/v1/schedules/{schedule_id}/resume": {"post": _op(
            "Resume a schedule from its next tick", "the schedule", "Schedule",
            params=["schedule_id"])},
        "/v1/worker": {"get": {
            "summary": "Worker WebSocket endpoint (docs/protocol.md)",
            "description": "With Upgrade: websocket, 101 and the worker protocol; a plain "
                           "GET is answered 426 with an Error saying so.",
            "security": [],
            "responses": {
                "101": {"description": "switching protocols (a WebSocket upgrade)"},
                "426": _json(_ref("Error"), "not a WebSocket upgrade")}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Orbit HTTP API", "version": "1",
                 "description": "Durable tasks: queues, credentials, tasks, attempts, audit."},
        "paths": paths,
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "<credential_id>.<secret>"}},
        },
        "security": [{"bearer": []}],
    }
