"""The request bodies of pause and resume, of the bulk actions by filter and of fair dispatch
(docs/flow-control.md), as msgspec Structs the routes load with and the OpenAPI document
shows. Pure."""

from __future__ import annotations

from typing import Annotated, Any, Final

from msgspec import UNSET, Meta, UnsetType

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.flow import KEY_NAME_RE, MAX_KEY_NAME_LEN
from orbit_wire.names import Name, whole

from .bodies import ReviewAction, _Body
from .fields import Body, Reason

_Handler = Annotated[Name, Meta(description="only this handler's tasks (all versions "
                                "unless handler_version names one)")]
_Version = Annotated[Name, Meta(description="with handler: only this handler version")]
_DryRun = Annotated[bool, Meta(description="count the matching tasks, change nothing")]


class PauseRequest(_Body, frozen=True):
    """Pause the queue, or one capability (handler), or one capability version."""

    reason: Annotated[str, Meta(min_length=1, max_length=1024,
                                description="why (kept with who paused, in the log)")]
    handler: _Handler | UnsetType = UNSET
    handler_version: _Version | UnsetType = UNSET


class ResumeRequest(_Body, frozen=True):
    """Lift the pause of exactly this key (the queue's, a capability's or a version's)."""

    handler: _Handler | UnsetType = UNSET
    handler_version: _Version | UnsetType = UNSET
    reason: Reason | UnsetType = UNSET


class BulkCancelRequest(_Body, frozen=True):
    """The tasks are those the query parameters select (PENDING, RUNNING and NEEDS_REVIEW by
    default)."""

    reason: Reason | UnsetType = UNSET
    dry_run: _DryRun = False


class BulkReviewRequest(_Body, frozen=True):
    """The NEEDS_REVIEW tasks the query parameters select, each resolved alike."""

    action: ReviewAction
    result: Annotated[Any, Meta(description="with succeed (required, not null): the result "
                                "every task stores, under the value rules")] = UNSET
    reason: Reason | UnsetType = UNSET
    dry_run: _DryRun = False


class FairRequest(_Body, frozen=True):
    """Make the queue's dispatch take turns between the values of one key name."""

    key: Annotated[str, Meta(
        pattern=whole(KEY_NAME_RE.pattern),
        description=f"the key name (1-{MAX_KEY_NAME_LEN} of [a-z0-9_.-], starting with a "
        "letter) whose values take turns: customer for the tasks' customer:<value> keys",
        extra={"message": "must be a key name: 1-32 of [a-z0-9_.-] starting with a letter"})]


_VERSION_NEEDS_HANDLER: Final = {
    "dependentRequired": {"handler_version": ["handler"]}}
PAUSE_REQUEST: Final = Body(PauseRequest, _VERSION_NEEDS_HANDLER)
RESUME_REQUEST: Final = Body(ResumeRequest, _VERSION_NEEDS_HANDLER)
BULK_CANCEL_REQUEST: Final = Body(BulkCancelRequest)
FAIR_REQUEST: Final = Body(FairRequest)
BULK_REVIEW_REQUEST: Final = Body(BulkReviewRequest, {
    "if": {"properties": {"action": {"const": ReviewAction.SUCCEED.value}}},
    "then": {"required": ["result"], "properties": {"result": {"not": {"type": "null"}}}}})


def _version_needs_handler(body: dict[str, Any]) -> dict[str, Any]:
    if "handler_version" in body and "handler" not in body:
        raise OrbitError(ErrorCode.BAD_REQUEST, "handler_version needs a handler")
    return body


def parse_pause_request(value: object) -> dict[str, Any]:
    """PAUSE_REQUEST with its rule across fields (the pause service checks it too)."""
    return _version_needs_handler(PAUSE_REQUEST.parse(value, "request body"))


def parse_resume_request(value: object) -> dict[str, Any]:
    return _version_needs_handler(RESUME_REQUEST.parse(value, "request body"))


def parse_bulk_review_request(value: object) -> dict[str, Any]:
    """BULK_REVIEW_REQUEST with its ``if``/``then`` rule."""
    body = BULK_REVIEW_REQUEST.parse(value, "request body")
    if body["action"] == ReviewAction.SUCCEED and body.get("result") is None:
        raise OrbitError(ErrorCode.BAD_REQUEST, "succeed needs a non-null result")
    return body
