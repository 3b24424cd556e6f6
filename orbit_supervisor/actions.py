"""What the session core asks its driver to do, and the public event record (pure).

The driver (app.py) performs each action in order, then re-arms one timer at
``Session.next_timer()``. An action about an attempt carries its record (attempts.py): the
driver and the pool act on the same object the session moves, never on a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from orbit_wire.frames import ClientFrame, Reservation
from orbit_wire.model import UnknownCode, kill_cause

from .attempts import Attempt
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
    queue_id: str | None = None  # the queue of the session it comes from


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
    """The server confirmed the start: run the attempt's handler in a child and report with
    ``Session.execution_finished``."""

    attempt: Attempt

    @property
    def reservation(self) -> Reservation:
        return self.attempt.reservation


@dataclass(frozen=True, slots=True)
class Kill:
    """SIGKILL the child running the attempt now (synchronously, no await first); if a
    child was signalled, tell ``Session.child_killed`` what was known of it at once. An
    execution still waiting for a child is stopped before any child gets it."""

    attempt: Attempt
    reason: str  # LEASE_LOST, ATTEMPT_TIMEOUT, TASK_CANCELLED, SHUTDOWN
    # Seconds past the local expiry at which the lease timer ran (0: not a timer's kill);
    # above Session.LATE_KILL_BOUND the kill is late and counted.
    late_by: float = 0.0

    @property
    def attempt_id(self) -> str:
        return self.attempt.attempt_id

    @property
    def code(self) -> str:
        """The code the killed attempt is reported with: its reason (a kill cause)."""
        return kill_cause(self.reason, UnknownCode.LEASE_LOST.value)


@dataclass(frozen=True, slots=True)
class CancelChild:
    """Tell the child running the attempt that its task was cancelled (its handler's
    ``execution.cancelled()`` turns true; an async handler's task is cancelled). The Kill
    follows at the end of the cancel grace unless the child ends first. An execution still
    waiting for a child ends at once instead, without its handler starting."""

    attempt: Attempt

    @property
    def attempt_id(self) -> str:
        return self.attempt.attempt_id


@dataclass(frozen=True, slots=True)
class Emit:
    event: SupervisorEvent


@dataclass(frozen=True, slots=True)
class EndRun:
    """The run is over: ``error`` None means drained cleanly. Kill what still runs, close."""

    error: SupervisorError | None


Action = Connect | SendFrame | CloseConnection | Execute | CancelChild | Kill | Emit | EndRun
