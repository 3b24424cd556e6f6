"""The small request bodies of the HTTP API (docs/http-api.md), as ``fields`` objects: the
routes parse with them and the OpenAPI document shows them, so the two cannot drift. The
TaskSpec and the schedule request live beside their parsers (spec.py, schedules.py). Pure.

Rules no JSON Schema can say are the services' (a future ``expires_at_ms``, a queue that
exists) and answer 400 or 404 as docs/http-api.md says.
"""

from __future__ import annotations

from typing import Any, Final

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.limits import MAX_NAME_LEN, MAX_SUBMIT_BATCH

from .fields import Enum, IdList, Int, Items, Obj, Str, Value
from .spec import TASK_SPEC

MAX_REASON_LEN: Final = 1024
MAX_GRACE_MS: Final = 30 * 86_400_000
MAX_INSTANT_MS: Final = 2**62 - 1
ROLES: Final = ("admin", "producer", "worker")

_NAME = Str(MAX_NAME_LEN)
_REASON = Str(MAX_REASON_LEN, min_len=0)
_EXPIRES = Int(0, MAX_INSTANT_MS, description="a future instant (ms since the epoch): "
               "refused from then on")

QUEUE_REQUEST = Obj({"name": _NAME})
CREDENTIAL_REQUEST = Obj(
    {"role": Enum(ROLES), "queues": IdList(), "name": _NAME, "expires_at_ms": _EXPIRES},
    ("role",),
    # A producer or worker credential is scoped to at least one queue.
    extra={"if": {"properties": {"role": {"enum": ["producer", "worker"]}}},
           "then": {"required": ["queues"], "properties": {"queues": {"minItems": 1}}}})
ROTATE_REQUEST = Obj({
    "grace_ms": Int(0, MAX_GRACE_MS, 0, description="the old secret still works this long"),
    "expires_at_ms": _EXPIRES,
})
CANCEL_REQUEST = Obj({"reason": _REASON})
REVIEW_REQUEST = Obj(
    {"action": Enum(("retry", "succeed", "fail")),
     "result": Value(nullable=True, description="with succeed (required, not null): the "
                     "result to store, under the value rules"),
     "reason": _REASON},
    ("action",),
    extra={"if": {"properties": {"action": {"const": "succeed"}}},
           "then": {"required": ["result"],
                    "properties": {"result": {"not": {"type": "null"}}}}})
BATCH = Obj({"tasks": Items(TASK_SPEC, 1, MAX_SUBMIT_BATCH)}, ("tasks",),
            description="all or nothing")
# What the route checks before the submit parses each spec (once, not twice per task).
BATCH_SHAPE = Obj({"tasks": Items(Value(), 1, MAX_SUBMIT_BATCH)}, ("tasks",))


def parse_credential_request(value: object) -> dict[str, Any]:
    """CREDENTIAL_REQUEST with its ``if``/``then`` rule (the admin service checks it too)."""
    body = CREDENTIAL_REQUEST.parse(value, "request body")
    if body["role"] != "admin" and not body.get("queues"):
        raise OrbitError(ErrorCode.BAD_REQUEST, f"a {body['role']} credential needs a queue")
    return body


def parse_review_request(value: object) -> dict[str, Any]:
    """REVIEW_REQUEST with its ``if``/``then`` rule (the task service checks it too)."""
    body = REVIEW_REQUEST.parse(value, "request body")
    if body["action"] == "succeed" and body.get("result") is None:
        raise OrbitError(ErrorCode.BAD_REQUEST, "succeed needs a non-null result")
    return body
