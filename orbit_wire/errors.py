"""The one error tree of Orbit, shared by server, supervisor, child and client.

    OrbitError                 every error Orbit raises on purpose; carries a stable ``code``
    ├── ProtocolError          the peer broke the wire contract (bad frame, order, limits)
    ├── AuthError              unauthenticated or not permitted
    ├── ValueRejected          a payload, result or detail that breaks the value rules
    └── HandlerSpecError       a handler list (MODULE:ATTR) that cannot be loaded or breaks
                               the registration rules; raised before any task runs

Codes are part of the public contract (docs/protocol.md, docs/http-api.md): never rename one.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    # Input and framing.
    BAD_REQUEST = "BAD_REQUEST"
    BAD_FRAME = "BAD_FRAME"
    UNKNOWN_FRAME_TYPE = "UNKNOWN_FRAME_TYPE"
    FRAME_TOO_LARGE = "FRAME_TOO_LARGE"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    NESTING_TOO_DEEP = "NESTING_TOO_DEEP"
    NUMBER_OUT_OF_RANGE = "NUMBER_OUT_OF_RANGE"
    INVALID_JSON = "INVALID_JSON"
    OUT_OF_ORDER = "OUT_OF_ORDER"
    CONCURRENT_REQUEST = "CONCURRENT_REQUEST"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    RATE_LIMITED = "RATE_LIMITED"  # HTTP 429 with Retry-After (retryable)
    UNSUPPORTED_PROTOCOL = "UNSUPPORTED_PROTOCOL"
    # Identity and permission.
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    INSTANCE_CONFLICT = "INSTANCE_CONFLICT"
    # State and fencing.
    NOT_FOUND = "NOT_FOUND"
    STALE_EPOCH = "STALE_EPOCH"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    CONFLICT = "CONFLICT"
    MESSAGE_ID_REUSED = "MESSAGE_ID_REUSED"
    INVALID_RESULT = "INVALID_RESULT"
    # Server side.
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"


# Codes after which a worker must stop (`run` ends) rather than back off and reconnect.
FATAL_CODES: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.UNAUTHENTICATED,
        ErrorCode.PERMISSION_DENIED,
        ErrorCode.INSTANCE_CONFLICT,
        ErrorCode.UNSUPPORTED_PROTOCOL,
        ErrorCode.BAD_FRAME,
        ErrorCode.UNKNOWN_FRAME_TYPE,
        ErrorCode.FRAME_TOO_LARGE,
        ErrorCode.OUT_OF_ORDER,
        ErrorCode.CONCURRENT_REQUEST,
        ErrorCode.LIMIT_EXCEEDED,
    }
)

RETRYABLE_CODES: frozenset[ErrorCode] = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.INTERNAL,
                                                   ErrorCode.RATE_LIMITED})


class OrbitError(Exception):
    """An error with a stable code; ``message`` is for people and never holds secrets."""

    def __init__(self, code: ErrorCode | str, message: str, *, retryable: bool | None = None):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.retryable = self.code in RETRYABLE_CODES if retryable is None else retryable

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code.value, "message": self.message, "retryable": self.retryable}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.value}: {self.message})"


class ProtocolError(OrbitError):
    """The peer sent something the wire contract forbids."""


class AuthError(OrbitError):
    """Bad, revoked or wrong-role credential, or a resource outside the credential's scope."""


class ValueRejected(OrbitError):
    """A JSON value (payload, result, details) that breaks the value rules in limits.py."""


class HandlerSpecError(OrbitError):
    """A bad MODULE:ATTR: malformed, not importable, or a handler list that breaks the rules.

    The message is one line, fit for the CLI; it never holds a traceback.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.BAD_REQUEST, message)
