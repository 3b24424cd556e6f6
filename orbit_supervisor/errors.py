"""Errors the supervisor raises to its caller.

    SupervisorError          run ended without a clean drain (``unconfirmed``, ``running``)
    ├── FatalSessionError    the server refused us for good (auth, permission, protocol): ``code``
    └── ShutdownTimeoutError the shutdown timeout ran out before every result was confirmed
    WorkerAlreadyRun         ``run()`` was called a second time on one Supervisor

This module is pure (no I/O), so the sans-I/O session core may build these errors itself.
"""

from __future__ import annotations

from orbit_wire.errors import ErrorCode


class SupervisorError(Exception):
    """The run ended with work possibly unreported.

    ``unconfirmed``: attempts whose result the server had not confirmed when the run ended.
    ``running``: handlers that were still executing (and were killed) when the run ended.
    """

    def __init__(self, message: str, *, unconfirmed: int = 0, running: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.unconfirmed = unconfirmed
        self.running = running


class FatalSessionError(SupervisorError):
    """Authentication, permission or protocol error: reconnecting would not help."""

    def __init__(self, code: ErrorCode | str, message: str, *, unconfirmed: int = 0,
                 running: int = 0) -> None:
        super().__init__(f"{code}: {message}", unconfirmed=unconfirmed, running=running)
        self.code = str(code)


class ShutdownTimeoutError(SupervisorError):
    """The wind-down budget ran out; children were killed and control requests cancelled."""


class WorkerAlreadyRun(RuntimeError):
    """A Supervisor runs once: its identity must never be reused by a second run."""
