"""Names shared by every party: states, outcomes, policies, capabilities."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .names import Name


class TaskState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        """No further state change: SUCCEEDED, FAILED or CANCELLED."""
        return self in _TERMINAL

    @property
    def settled(self) -> bool:
        """Nothing more happens without an operator: terminal, or NEEDS_REVIEW. A producer
        waiting for an outcome stops waiting here."""
        return self in _SETTLED


_TERMINAL = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})
_SETTLED = _TERMINAL | {TaskState.NEEDS_REVIEW}


class AttemptState(StrEnum):
    RESERVED = "RESERVED"  # dispatched to a worker, start not yet confirmed
    RUNNING = "RUNNING"  # start confirmed, lease held
    RELEASED = "RELEASED"  # reservation returned unstarted (session ended); no effect
    FINISHED = "FINISHED"  # outcome recorded


class Outcome(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"


class Idempotency(StrEnum):
    IDEMPOTENT = "IDEMPOTENT"
    NON_IDEMPOTENT = "NON_IDEMPOTENT"


# Members by value through a dict: calling the enum class costs several times more, and the
# hot paths map thousands of column values a second.
IDEMPOTENCY_OF = {m.value: m for m in Idempotency}


class Disposition(StrEnum):
    ACCEPTED = "ACCEPTED"  # the report decided the attempt
    EVIDENCE_ONLY = "EVIDENCE_ONLY"  # stored, never counted: lease gone, stale or conflicting


class UnknownCode(StrEnum):
    """Codes of UNKNOWN outcomes (docs/handlers.md "Failures")."""

    HANDLER_ERROR = "HANDLER_ERROR"
    HANDLER_CRASHED = "HANDLER_CRASHED"
    INVALID_HANDLER_RESULT = "INVALID_HANDLER_RESULT"
    LEASE_LOST = "LEASE_LOST"
    LEASE_EXPIRED = "LEASE_EXPIRED"


class Role(StrEnum):
    ADMIN = "admin"
    PRODUCER = "producer"
    WORKER = "worker"


@dataclass(frozen=True, slots=True, order=True)
class Capability:
    """The exact triple a task needs and a worker registers (each part a ``Name``, checked
    wherever a frame carrying it is decoded)."""

    handler: Name
    handler_version: Name
    payload_version: Name

    def to_dict(self) -> dict[str, str]:
        return {
            "handler": self.handler,
            "handler_version": self.handler_version,
            "payload_version": self.payload_version,
        }

    def __str__(self) -> str:
        return f"{self.handler}@{self.handler_version}/{self.payload_version}"
