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
    # A workflow node whose parents have not all ended yet: never dispatched, neither
    # terminal nor settled (docs/http-api.md "Workflows").
    WAITING = "WAITING"

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
    """Codes of UNKNOWN outcomes, each the cause that ended the attempt (docs/handlers.md
    "Failures"). A kill the worker decided reports its reason as its code (``KILL_CAUSES``)."""

    HANDLER_ERROR = "HANDLER_ERROR"  # the handler raised
    HANDLER_CRASHED = "HANDLER_CRASHED"  # the child died on its own (signal, exit, OOM killer)
    INVALID_HANDLER_RESULT = "INVALID_HANDLER_RESULT"
    LEASE_LOST = "LEASE_LOST"  # killed: the lease could not be kept (renewal refused, expired)
    LEASE_EXPIRED = "LEASE_EXPIRED"  # the server's reaper: no report before the lease expiry
    ATTEMPT_TIMEOUT = "ATTEMPT_TIMEOUT"  # killed at the policy's attempt timeout
    PROGRESS_TIMEOUT = "PROGRESS_TIMEOUT"  # killed: no progress within progress_timeout_ms
    TASK_CANCELLED = "TASK_CANCELLED"  # killed (or never run) because the task was cancelled
    MEMORY_LIMIT = "MEMORY_LIMIT"  # killed over the worker's memory limit per child
    SHUTDOWN = "SHUTDOWN"  # killed (or never run) when the worker stopped


# The kills whose reason is the attempt's code. Any other reason a worker kills a child for
# (a broken frame, a lost template) keeps the code it came with, HANDLER_CRASHED.
KILL_CAUSES = frozenset({UnknownCode.LEASE_LOST.value, UnknownCode.ATTEMPT_TIMEOUT.value,
                         UnknownCode.PROGRESS_TIMEOUT.value,
                         UnknownCode.TASK_CANCELLED.value, UnknownCode.MEMORY_LIMIT.value,
                         UnknownCode.SHUTDOWN.value})


def kill_cause(kill_reason: str | None, code: str) -> str:
    """The code of an attempt ended by a kill for ``kill_reason``: the reason itself when
    it names a cause (``KILL_CAUSES``), else ``code``. A protocol-1 worker reports every
    kill as LEASE_LOST (or HANDLER_CRASHED over the memory limit) with the reason beside
    it; the server reads the cause from the reason the same way."""
    return kill_reason if kill_reason is not None and kill_reason in KILL_CAUSES else code


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
