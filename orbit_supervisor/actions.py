"""What the session core asks its driver to do, and the public event record (pure).

The driver (app.py) performs each action in order, then re-arms one timer at
``Session.next_timer()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from orbit_wire.frames import ClientFrame, Reservation

from .errors import SupervisorError


@dataclass(frozen=True, slots=True)
class SupervisorEvent:
    """One local notification: a type, the attempt it concerns and a stable classification.

    It never holds results, payloads, details or secrets.
    """

    type: str
    task_id: str | None = None
    attempt_id: str | None = None
    classification: str | None = None


@dataclass(frozen=True, slots=True)
class Connect:
    """Open a new connection after ``delay`` seconds, then call ``Session.connected``
    (or ``Session.connect_failed``)."""

    delay: float


@dataclass(frozen=True, slots=True)
class SendFrame:
    frame: ClientFrame


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """Drop the current connection (it went silent); then call ``Session.connection_lost``."""

    reason: str


@dataclass(frozen=True, slots=True)
class Execute:
    """The server confirmed the start: run the handler for this reservation in a child and
    report with ``Session.execution_finished``."""

    reservation: Reservation


@dataclass(frozen=True, slots=True)
class Kill:
    """SIGKILL the child running ``attempt_id`` now (synchronously, no await first); if a
    child was signalled, tell ``Session.kill_sent`` what was known of it at once."""

    attempt_id: str
    reason: str  # LEASE_LOST, ATTEMPT_TIMEOUT, TASK_CANCELLED, SHUTDOWN
    code: str = "LEASE_LOST"
    # Seconds past the local expiry at which the lease timer ran (0: not a timer's kill);
    # above Session.LATE_KILL_BOUND the kill is late and counted.
    late_by: float = 0.0


@dataclass(frozen=True, slots=True)
class CancelChild:
    """Tell the child running ``attempt_id`` that its task was cancelled (its handler's
    ``execution.cancelled()`` turns true; an async handler's task is cancelled). The Kill
    follows at the end of the cancel grace unless the child ends first."""

    attempt_id: str


@dataclass(frozen=True, slots=True)
class Emit:
    event: SupervisorEvent


@dataclass(frozen=True, slots=True)
class Finish:
    """The run is over: ``error`` None means drained cleanly. Kill what still runs, close."""

    error: SupervisorError | None


Action = Connect | SendFrame | CloseConnection | Execute | CancelChild | Kill | Emit | Finish
