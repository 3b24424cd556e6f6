"""The one error tree of Orbit, shared by server, supervisor, child and client.

Every exception Orbit raises on purpose is an ``OrbitError``, so one ``except OrbitError``
catches them all. Each carries ``code``, ``message`` (for people; never a secret) and
``retryable`` (whether the same call may succeed if tried again). ``code`` is an
``ErrorCode`` everywhere but in the outcome branch, whose code is the task's own
(``OutcomeError``): that is how ``WorkerFailure`` joins, the handler's way to report a
failure it is sure of. A handler still raises ``WorkerFailure(code, details=...,
retryable=...)``; its code stays the handler's own, checked by the child that reports it.
A built-in second base is kept where callers catch the exception by it. What each class
means is its docstring; the tree says where it is and which code it carries.

    class [second base]                     module                          code
    OrbitError                              orbit_wire/errors.py            any ErrorCode
    ├── ProtocolError                       orbit_wire/errors.py            the broken rule's
    │   ├── FrameError                      orbit_host/framing.py           the broken rule's
    │   └── MalformedMessage                orbit_host/messages.py          BAD_FRAME
    ├── AuthError                           orbit_wire/errors.py            UNAUTHENTICATED, ...
    ├── ValueRejected                       orbit_wire/errors.py            the value rule's
    ├── HandlerSpecError                    orbit_wire/errors.py            BAD_REQUEST
    ├── CredentialsFileError                orbit_host/credentials.py       BAD_REQUEST
    ├── CaFileError                         orbit_host/tls.py               BAD_REQUEST
    ├── IllegalTransition                   orbit_server/domain/states.py   CONFLICT
    ├── RateLimited                         orbit_server/http_plumbing.py   RATE_LIMITED
    ├── SupervisorError                     orbit_supervisor/errors.py      INTERNAL
    │   ├── FatalSessionError               orbit_supervisor/errors.py      the server's
    │   └── ShutdownTimeoutError            orbit_supervisor/errors.py      UNAVAILABLE
    ├── WorkerAlreadyRun [RuntimeError]     orbit_supervisor/errors.py      CONFLICT
    ├── OptionError [ValueError]            orbit_supervisor/options.py     BAD_REQUEST
    ├── QueueOutOfScope [ValueError]        orbit_supervisor/options.py     PERMISSION_DENIED
    ├── ConnectFailed                       orbit_supervisor/connection.py  UNAVAILABLE
    ├── PoolClosed                          orbit_supervisor/pool.py        UNAVAILABLE
    ├── IllegalEvent                        orbit_supervisor/machine.py     INTERNAL
    ├── OrbitApiError                       orbit_client/errors.py          the answer's
    │   ├── ServerUnreachable               orbit_client/errors.py          UNAVAILABLE
    │   │   └── NoAnswer                    orbit_client/transport.py       UNAVAILABLE
    │   ├── CertificateError                orbit_client/errors.py          UNAVAILABLE
    │   │   └── CertificateRefused          orbit_client/transport.py       UNAVAILABLE
    │   └── ChannelRefused                  orbit_client/channel_link.py    UNAVAILABLE
    └── OutcomeError                        orbit_wire/errors.py            the outcome's (text)
        ├── WorkerFailure                   orbit_child/api.py              the handler's own
        ├── TaskError                       orbit_client/tasks.py           the task's state
        │   ├── TaskFailed                  orbit_client/tasks.py           the failure's
        │   ├── TaskNeedsReview             orbit_client/tasks.py           NEEDS_REVIEW
        │   ├── TaskCancelled               orbit_client/tasks.py           CANCELLED
        │   └── TaskTimeout [TimeoutError]  orbit_client/tasks.py           PENDING or RUNNING
        └── WorkflowError                   orbit_client/workflows.py       the workflow's state
            ├── WorkflowFailed              orbit_client/workflows.py       the node's failure's
            ├── WorkflowCancelled           orbit_client/workflows.py       CANCELLED
            ├── WorkflowBlocked             orbit_client/workflows.py       BLOCKED
            └── WorkflowTimeout [TimeoutError]  orbit_client/workflows.py   RUNNING

tests/unit/test_error_tree.py fails on an exception class of any ``orbit_*`` module outside
this tree, and on a tree that does not say every class, its module and its parent.
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
    # A worker declares a policy for a capability version other than the one registered.
    POLICY_CONFLICT = "POLICY_CONFLICT"
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
        ErrorCode.POLICY_CONFLICT,
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

    code: ErrorCode
    message: str
    retryable: bool

    def __init__(self, code: ErrorCode | str, message: str, *, retryable: bool | None = None):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.retryable = self.code in RETRYABLE_CODES if retryable is None else retryable

    def to_dict(self) -> dict[str, object]:
        return {"code": str(self.code), "message": self.message, "retryable": self.retryable}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}: {self.message})"


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


class OutcomeError(OrbitError):
    """A task's outcome other than success, said as an exception: a handler's own failure
    (``WorkerFailure``) or what a producer's wait found (``TaskError``).

    Its ``code`` is the outcome's, not an ``ErrorCode``: a handler's own code
    (``[A-Z][A-Z0-9_]{0,63}``, e.g. OBJECT_REJECTED), one of Orbit's failure codes
    (LEASE_LOST, DEADLINE_EXCEEDED, ...) or a task's state. Code that catches every
    OrbitError reads ``code`` as text.
    """

    # The one branch whose codes are open-ended: a handler names its own.
    code: str  # type: ignore[assignment]

    def __init__(self, code: str, message: str, *, retryable: bool = False) -> None:
        super(OrbitError, self).__init__(message)  # OrbitError's would read it as an ErrorCode
        self.code = code
        self.message = message
        self.retryable = retryable
