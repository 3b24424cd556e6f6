"""A task's policy as its declaration says it: every field a submit may set, each bounded
once here (the server's TaskSpec body reads the same field types), each optional.

``DeclaredPolicy`` is what a ``TaskType`` declares and what a worker registers for each of
its capabilities in ``hello`` (docs/protocol.md, "Declared policies"); a field left out
(None) is not declared: a submit that leaves it out too gets the server's default. The server
keeps the first declaration of each (queue, capability) and refuses a worker that declares a
different one (POLICY_CONFLICT). ``PolicySource`` is where a task's policy came from. Pure.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from .errors import ErrorCode, OrbitError
from .explain import explain
from .flow import MAX_LIMIT_KEYS, LimitKey
from .labels import Requires
from .limits import (
    MAX_CANCEL_GRACE_MS,
    MAX_CAPABILITIES,
    MAX_PRIORITY,
    MIN_CANCEL_GRACE_MS,
    MIN_PRIORITY,
)
from .model import Capability, Idempotency

__all__ = [
    "POLICY_FIELDS",
    "Backoff",
    "CapabilityPolicy",
    "DeclaredPolicy",
    "PolicySource",
    "declared_policy",
]

DAY_MS: Final = 86_400_000
# The server's defaults, for a field neither the submit nor a registered policy sets.
DEFAULT_MAX_ATTEMPTS: Final = 3
DEFAULT_BACKOFF_INITIAL_MS: Final = 1_000
DEFAULT_BACKOFF_MAX_MS: Final = 60_000
DEFAULT_BACKOFF_MULTIPLIER: Final = 2.0
DEFAULT_BACKOFF_JITTER: Final = 0.2
DEFAULT_ATTEMPT_TIMEOUT_MS: Final = 300_000
DEFAULT_DEADLINE_MS: Final = DAY_MS
DEFAULT_LEASE_TTL_MS: Final = 30_000

# The field types, with their bounds (and what the OpenAPI document says of them).
MaxAttempts = Annotated[int, Meta(ge=1, le=100)]
AttemptTimeoutMs = Annotated[int, Meta(
    ge=100, le=DAY_MS, description="one attempt's time limit: its child is killed when it "
    "runs longer")]
DeadlineMs = Annotated[int, Meta(ge=100, le=31 * DAY_MS)]
LeaseTtlMs = Annotated[int, Meta(ge=100, le=600_000)]
ScheduleToStartMs = Annotated[int, Meta(
    ge=100, le=31 * DAY_MS, description="unstarted this long after submit: "
    "FAILED/NOT_STARTED_IN_TIME; null or absent: no bound")]
Priority = Annotated[int, Meta(ge=MIN_PRIORITY, le=MAX_PRIORITY,
                               description="higher is dispatched first within the queue")]
CancelGraceMs = Annotated[int, Meta(
    ge=MIN_CANCEL_GRACE_MS, le=MAX_CANCEL_GRACE_MS,
    description="a cancel of a running attempt asks its handler to stop, then SIGKILLs "
    "its child after this long (0: at once)")]
ProgressTimeoutMs = Annotated[int, Meta(
    ge=100, le=DAY_MS, description="an attempt that reports no progress for this long is "
    "killed (PROGRESS_TIMEOUT); null or absent: no bound")]

# The policy fields of a TaskSpec, by their TaskSpec names.
POLICY_FIELDS: Final = ("idempotency", "max_attempts", "backoff", "attempt_timeout_ms",
                        "deadline_ms", "lease_ttl_ms", "schedule_to_start_ms",
                        "cancel_grace_ms", "priority", "progress_timeout_ms", "requires",
                        "limits")
# A task's flow-control keys as a policy declares them (docs/flow-control.md).
LimitKeyTuple = Annotated[tuple[LimitKey, ...], Meta(max_length=MAX_LIMIT_KEYS)]


class Backoff(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The delay before each retry: ``initial_ms * multiplier**(n-1)``, at most ``max_ms``,
    spread by ±``jitter`` of itself."""

    initial_ms: Annotated[int, Meta(ge=0, le=DAY_MS)] = DEFAULT_BACKOFF_INITIAL_MS
    max_ms: Annotated[int, Meta(ge=0, le=2**53, description="every delay is at most this; "
                                f"default max({DEFAULT_BACKOFF_MAX_MS}, initial_ms)")
                      ] | UnsetType = UNSET
    multiplier: Annotated[float, Meta(ge=1.0, le=10.0)] = DEFAULT_BACKOFF_MULTIPLIER
    jitter: Annotated[float, Meta(ge=0.0, le=1.0)] = DEFAULT_BACKOFF_JITTER

    def resolved_max_ms(self) -> int:
        """``max_ms``, or its default when left out."""
        return (max(DEFAULT_BACKOFF_MAX_MS, self.initial_ms) if self.max_ms is UNSET
                else self.max_ms)

    def to_dict(self) -> dict[str, Any]:
        """Every field, ``max_ms`` resolved."""
        return {"initial_ms": self.initial_ms, "max_ms": self.resolved_max_ms(),
                "multiplier": self.multiplier, "jitter": self.jitter}


class DeclaredPolicy(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A capability's declared policy; None: not declared. ``schedule_to_start_ms`` and
    ``progress_timeout_ms`` cannot declare "no bound" (that is what leaving them out
    gives)."""

    idempotency: Idempotency | None = None
    max_attempts: MaxAttempts | None = None
    backoff: Backoff | None = None
    attempt_timeout_ms: AttemptTimeoutMs | None = None
    deadline_ms: DeadlineMs | None = None
    lease_ttl_ms: LeaseTtlMs | None = None
    schedule_to_start_ms: ScheduleToStartMs | None = None
    cancel_grace_ms: CancelGraceMs | None = None
    priority: Priority | None = None
    progress_timeout_ms: ProgressTimeoutMs | None = None
    # Label pairs a worker must have to be given the task (orbit_wire/labels.py).
    requires: Requires | None = None
    limits: LimitKeyTuple | None = None

    def declared(self) -> dict[str, Any]:
        """The declared fields (TaskSpec names and JSON values), backoff in full."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        if self.backoff is not None:
            out["backoff"] = self.backoff.to_dict()
        return out

    def same_as(self, other: DeclaredPolicy) -> bool:
        """The two declare the same fields with the same values (a backoff's left-out
        ``max_ms`` is its default)."""
        return self.declared() == other.declared()

    @property
    def empty(self) -> bool:
        return self == _NOTHING


_NOTHING: Final = DeclaredPolicy()


class CapabilityPolicy(Struct, frozen=True, forbid_unknown_fields=True):
    """A capability and the policy its worker declares for it (``hello.policies``)."""

    capability: Capability
    policy: DeclaredPolicy


CapabilityPolicies = Annotated[tuple[CapabilityPolicy, ...], Meta(max_length=MAX_CAPABILITIES)]


class PolicySource(StrEnum):
    """Where a task's policy came from (the Task view's ``policy_source``)."""

    SUBMIT = "submit"  # the submit set every field it was given; nothing was registered
    REGISTERED = "registered"  # a registered policy set at least one field the submit left out
    DEFAULT = "default"  # the submit set no policy field and nothing was registered


def declared_policy(fields: dict[str, Any], where: str = "TaskType") -> DeclaredPolicy:
    """The DeclaredPolicy of ``fields`` (TaskSpec names, None for not declared); OrbitError
    BAD_REQUEST naming the field and its rule when one breaks it."""
    try:
        given = msgspec.to_builtins({k: v for k, v in fields.items() if v is not None})
    except TypeError as exc:
        raise OrbitError(ErrorCode.BAD_REQUEST, f"{where}: {exc}") from None
    try:
        return msgspec.convert(given, DeclaredPolicy)
    except msgspec.ValidationError as exc:
        message = explain(exc, DeclaredPolicy, given, where).message
        raise OrbitError(ErrorCode.BAD_REQUEST, message) from None

