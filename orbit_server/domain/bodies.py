"""The request bodies of the HTTP API (docs/http-api.md) as msgspec Structs: the routes and
the task-spec parser load with them (``fields.Body``), and the OpenAPI document shows them
under these very class names, so the two cannot drift. The schedule request lives beside its
parser (schedules.py); the TaskSpec's defaults live here, beside its fields.

Rules no JSON Schema can say are the services' (a future ``expires_at_ms``, a queue that
exists) and answer 400 or 404 as docs/http-api.md says. Pure.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.flow import MAX_RATE_COUNT, MAX_RATE_INTERVAL_MS, MAX_RUNNING, LimitKeys
from orbit_wire.labels import Requires
from orbit_wire.limits import (
    DEFAULT_CANCEL_GRACE_MS,
    DEFAULT_PRIORITY,
    MAX_DELAY_MS,
    MAX_SUBMIT_BATCH,
)
from orbit_wire.model import Idempotency, Role
from orbit_wire.names import Name, whole
from orbit_wire.policy import (
    DAY_MS,
    DEFAULT_ATTEMPT_TIMEOUT_MS,
    DEFAULT_DEADLINE_MS,
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_MAX_ATTEMPTS,
    AttemptTimeoutMs,
    Backoff,
    CancelGraceMs,
    DeadlineMs,
    LeaseTtlMs,
    MaxAttempts,
    Priority,
    ProgressTimeoutMs,
    ScheduleToStartMs,
)

from .fields import Body, IdList, Instant, Label, Reason

MAX_OPERATION_KEY_LEN: Final = 255
MAX_GRACE_MS: Final = 30 * DAY_MS


class _Body(Struct, frozen=True, forbid_unknown_fields=True):
    pass


# --------------------------------------------------------------------------- task specs


class ScheduledTask(_Body, frozen=True):
    """A task as a schedule submits it at each tick: a TaskSpec without operation_key,
    delay_ms and not_before_at_ms, which each firing sets itself. A policy field left out
    gets the policy registered for the capability in the queue (docs/handlers.md, "Declared
    policies"), else the default shown here."""

    handler: Name
    handler_version: Name
    payload_version: Name
    payload: Annotated[Any, Meta(
        description="any non-null JSON value: at most 256 KiB encoded, nested at most 32 "
        "deep, integers in signed 64-bit", extra_json_schema={"not": {"type": "null"}})]
    idempotency: Idempotency = Idempotency.NON_IDEMPOTENT
    max_attempts: MaxAttempts = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = msgspec.field(default_factory=Backoff)
    attempt_timeout_ms: AttemptTimeoutMs = DEFAULT_ATTEMPT_TIMEOUT_MS
    deadline_ms: DeadlineMs = DEFAULT_DEADLINE_MS
    lease_ttl_ms: LeaseTtlMs = DEFAULT_LEASE_TTL_MS
    schedule_to_start_ms: ScheduleToStartMs | None = None
    priority: Priority = DEFAULT_PRIORITY
    cancel_grace_ms: CancelGraceMs = DEFAULT_CANCEL_GRACE_MS
    progress_timeout_ms: ProgressTimeoutMs | None = None
    requires: Requires | None = None
    limits: LimitKeys = msgspec.field(default_factory=list)


DelayMs = Annotated[int, Meta(ge=0, le=MAX_DELAY_MS, description="not with not_before_at_ms")]
NotBeforeAtMs = Annotated[int, Meta(
    ge=0, le=2**53, description=f"instant (ms since the epoch), at most {MAX_DELAY_MS} ms "
    "ahead; not with delay_ms")]


class TaskSpec(ScheduledTask, frozen=True):
    """A task to submit. Only the capability triple and the payload are required."""

    operation_key: Annotated[str, Meta(
        min_length=1, max_length=MAX_OPERATION_KEY_LEN, pattern=whole(r"[\x21-\x7e]+"),
        extra={"message": f"must be 1-{MAX_OPERATION_KEY_LEN} printable ASCII characters "
               "without spaces"})] | UnsetType = UNSET
    delay_ms: DelayMs | UnsetType = UNSET
    not_before_at_ms: NotBeforeAtMs | UnsetType = UNSET


class Batch(_Body, frozen=True):
    """All or nothing."""

    tasks: Annotated[list[TaskSpec], Meta(min_length=1, max_length=MAX_SUBMIT_BATCH)]


class _BatchShape(_Body, frozen=True):
    # What the route checks before the submit parses each spec (once, not twice per task).
    tasks: Annotated[list[dict[str, Any]], Meta(min_length=1, max_length=MAX_SUBMIT_BATCH)]


TASK_SPEC: Final = Body(TaskSpec, {"not": {"required": ["delay_ms", "not_before_at_ms"]}})
BATCH: Final = Body(Batch)
BATCH_SHAPE: Final = Body(_BatchShape)


# --------------------------------------------------------------------------- small bodies


class ReviewAction(StrEnum):
    RETRY = "retry"
    SUCCEED = "succeed"
    FAIL = "fail"


class QueueRequest(_Body, frozen=True):
    name: Label | UnsetType = UNSET


class CredentialRequest(_Body, frozen=True):
    role: Role
    queues: IdList | UnsetType = UNSET
    name: Label | UnsetType = UNSET
    expires_at_ms: Instant | UnsetType = UNSET


class RotateRequest(_Body, frozen=True):
    grace_ms: Annotated[int, Meta(ge=0, le=MAX_GRACE_MS,
                                  description="the old secret still works this long")] = 0
    expires_at_ms: Instant | UnsetType = UNSET


class CancelRequest(_Body, frozen=True):
    reason: Reason | UnsetType = UNSET


class ReviewRequest(_Body, frozen=True):
    action: ReviewAction
    result: Annotated[Any, Meta(description="with succeed (required, not null): the result "
                                "to store, under the value rules")] = UNSET
    reason: Reason | UnsetType = UNSET


class RetryRequest(_Body, frozen=True):
    reason: Reason | UnsetType = UNSET


class BulkRetryRequest(_Body, frozen=True):
    """The tasks are those the query parameters select (FAILED and CANCELLED by default)."""

    reason: Reason | UnsetType = UNSET
    dry_run: Annotated[bool, Meta(description="count the matching tasks, change nothing")
                       ] = False


class Rate(_Body, frozen=True):
    """At most ``count`` starts in any window of ``interval_ms``."""

    count: Annotated[int, Meta(ge=1, le=MAX_RATE_COUNT)]
    interval_ms: Annotated[int, Meta(ge=1, le=MAX_RATE_INTERVAL_MS)]


class LimitRequest(_Body, frozen=True):
    """A flow-control limit (docs/flow-control.md): at least one of the two bounds; one left
    out is no bound."""

    max_running: Annotated[int, Meta(ge=1, le=MAX_RUNNING, description=(
        "open (reserved or running) attempts per key at most"))] | None = None
    rate: Rate | None = None


QUEUE_REQUEST: Final = Body(QueueRequest)
# At least one bound given and not null (each of the two absent or null is refused).
LIMIT_REQUEST: Final = Body(LimitRequest, {"not": {"properties": {
    "max_running": {"type": "null"}, "rate": {"type": "null"}}}})
# A producer or worker credential is scoped to at least one queue.
CREDENTIAL_REQUEST: Final = Body(CredentialRequest, {
    "if": {"properties": {"role": {"enum": [Role.PRODUCER.value, Role.WORKER.value]}}},
    "then": {"required": ["queues"], "properties": {"queues": {"minItems": 1}}}})
ROTATE_REQUEST: Final = Body(RotateRequest)
CANCEL_REQUEST: Final = Body(CancelRequest)
RETRY_REQUEST: Final = Body(RetryRequest)
BULK_RETRY_REQUEST: Final = Body(BulkRetryRequest)
REVIEW_REQUEST: Final = Body(ReviewRequest, {
    "if": {"properties": {"action": {"const": ReviewAction.SUCCEED.value}}},
    "then": {"required": ["result"], "properties": {"result": {"not": {"type": "null"}}}}})


def parse_credential_request(value: object) -> dict[str, Any]:
    """CREDENTIAL_REQUEST with its ``if``/``then`` rule (the admin service checks it too)."""
    body = CREDENTIAL_REQUEST.parse(value, "request body")
    if body["role"] != Role.ADMIN and not body.get("queues"):
        raise OrbitError(ErrorCode.BAD_REQUEST, f"a {body['role']} credential needs a queue")
    return body


def parse_review_request(value: object) -> dict[str, Any]:
    """REVIEW_REQUEST with its ``if``/``then`` rule (the task service checks it too)."""
    body = REVIEW_REQUEST.parse(value, "request body")
    if body["action"] == ReviewAction.SUCCEED and body.get("result") is None:
        raise OrbitError(ErrorCode.BAD_REQUEST, "succeed needs a non-null result")
    return body


def parse_limit_request(value: object) -> LimitRequest:
    """LIMIT_REQUEST with its ``anyOf`` rule: at least one bound (the limit service checks
    it too)."""
    body = LIMIT_REQUEST.load(value, "request body")
    if body.max_running is None and body.rate is None:
        raise OrbitError(ErrorCode.BAD_REQUEST, "request body: give max_running, rate or both")
    return body
