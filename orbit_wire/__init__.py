"""Pure pieces shared by the Orbit server, supervisor, child and client: frames, limits,
value rules, IDs and the error tree. Nothing here performs I/O or reads a clock."""

from .errors import (
    AuthError,
    ErrorCode,
    HandlerSpecError,
    OrbitError,
    ProtocolError,
    ValueRejected,
)
from .fails_on import Retryable
from .model import (
    AttemptState,
    Capability,
    Disposition,
    Idempotency,
    Outcome,
    Role,
    TaskState,
    UnknownCode,
)
from .tasktype import TaskType

__all__ = [
    "AttemptState",
    "AuthError",
    "Capability",
    "Disposition",
    "ErrorCode",
    "HandlerSpecError",
    "Idempotency",
    "OrbitError",
    "Outcome",
    "ProtocolError",
    "Retryable",
    "Role",
    "TaskState",
    "TaskType",
    "UnknownCode",
    "ValueRejected",
]
