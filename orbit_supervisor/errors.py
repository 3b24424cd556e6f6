"""Errors the supervisor raises to its caller (where they sit in the one error tree:
orbit_wire/errors.py). ``unconfirmed`` and ``running`` say what work the end of the run may
have left unreported.

This module is pure (no I/O), so the sans-I/O session core may build these errors itself.
"""

from __future__ import annotations

from orbit_wire.errors import ErrorCode, OrbitError


class SupervisorError(OrbitError):
    """The run ended with work possibly unreported (INTERNAL: a bug ended it, unless a
    subclass says otherwise). Running the supervisor again is the operator's decision, so
    none of these is ``retryable``.

    ``unconfirmed``: attempts whose result the server had not confirmed when the run ended.
    ``running``: handlers that were still executing (and were killed) when the run ended.
    """

    def __init__(self, message: str, *, unconfirmed: int = 0, running: int = 0,
                 code: ErrorCode = ErrorCode.INTERNAL) -> None:
        super().__init__(code, message, retryable=False)
        self.unconfirmed = unconfirmed
        self.running = running


class FatalSessionError(SupervisorError):
    """Authentication, permission or protocol error: reconnecting would not help. ``code``
    is the server's (one of orbit_wire.errors.FATAL_CODES)."""

    def __init__(self, code: ErrorCode | str, message: str, *, unconfirmed: int = 0,
                 running: int = 0) -> None:
        code = ErrorCode(code)
        super().__init__(f"{code}: {message}", unconfirmed=unconfirmed, running=running,
                         code=code)


class ShutdownTimeoutError(SupervisorError):
    """The wind-down budget ran out; children were killed and control requests cancelled
    (UNAVAILABLE: the worker went away before its work was confirmed)."""

    def __init__(self, message: str, *, unconfirmed: int = 0, running: int = 0) -> None:
        super().__init__(message, unconfirmed=unconfirmed, running=running,
                         code=ErrorCode.UNAVAILABLE)
        self.why = message

    @classmethod
    def of(cls, why: str, *, unconfirmed: int, running: int) -> ShutdownTimeoutError:
        """``why`` ("forced stop", "shutdown timeout (8 s) ran out") with the counts."""
        error = cls(f"{why} with {unconfirmed} unconfirmed result(s) and {running} running "
                    f"handler(s)", unconfirmed=unconfirmed, running=running)
        error.why = why
        return error


class WorkerAlreadyRun(OrbitError, RuntimeError):
    """A Supervisor runs once: its identity must never be reused by a second run
    (CONFLICT; a RuntimeError too, which callers may catch it as)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.CONFLICT, message, retryable=False)
