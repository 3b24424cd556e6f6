"""What the session is given and what it gives back (pure).

The session's configuration (``SessionConfig``), its counters (``SessionStats``), what the
child pool reports of an execution (``ExecutionOutcome``), and the reasons a child is
killed (``report.kill_reason``; each is also the code the killed attempt is reported with).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from orbit_wire.frames import Report
from orbit_wire.model import Capability, Outcome, UnknownCode
from orbit_wire.policy import CapabilityPolicy

from . import defaults

__all__ = [
    "KILL_ATTEMPT_TIMEOUT", "KILL_LEASE_LOST", "KILL_PROGRESS_TIMEOUT", "KILL_SHUTDOWN",
    "KILL_TASK_CANCELLED", "LATE_KILL_BOUND", "REPORT_MARGIN", "ExecutionOutcome",
    "SessionConfig", "SessionStats",
]

# Reasons the session kills a child (report.kill_reason), each the finish's code as well
# (orbit_wire.model.KILL_CAUSES).
KILL_LEASE_LOST = UnknownCode.LEASE_LOST.value
KILL_ATTEMPT_TIMEOUT = UnknownCode.ATTEMPT_TIMEOUT.value
KILL_PROGRESS_TIMEOUT = UnknownCode.PROGRESS_TIMEOUT.value  # no progress within its timeout
KILL_TASK_CANCELLED = UnknownCode.TASK_CANCELLED.value
KILL_SHUTDOWN = UnknownCode.SHUTDOWN.value

REPORT_MARGIN = 0.050  # seconds: the margin's floor (margin.py measures what it must cover)
LATE_KILL_BOUND = 0.020  # seconds past the local expiry: a lease timer this late is counted


class ExecutionOutcome(Protocol):
    """What the child pool reports (pool.ChildOutcome satisfies this)."""

    @property
    def outcome(self) -> Outcome: ...
    @property
    def code(self) -> str | None: ...
    @property
    def retryable(self) -> bool: ...
    @property
    def result_json(self) -> str | None: ...
    @property
    def details_json(self) -> str | None: ...
    @property
    def report(self) -> Report: ...


@dataclass(frozen=True, slots=True)
class SessionConfig:
    credential_id: str
    credential_secret: str = field(repr=False)
    instance_id: str
    instance_secret: str = field(repr=False)
    queue_id: str
    capabilities: tuple[Capability, ...]
    capacity: int
    # The policies the handlers declare, sent in hello (docs/protocol.md).
    policies: tuple[CapabilityPolicy, ...] = ()
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT
    reconnect_min_delay: float = defaults.RECONNECT_MIN_DELAY
    reconnect_max_delay: float = defaults.RECONNECT_MAX_DELAY
    # Kill this long before a lease's granted expiry, so the kill's report arrives while the
    # lease still holds (lease.py). The supervisor uses REPORT_MARGIN; 0 keeps exact times.
    report_margin: float = 0.0
    # CPUs the children share. With more handlers running than that, a held finish idles no
    # CPU, so it may wait for the next handlers' finishes (batching.py); None: never.
    cpus: int | None = None
    # What hello announces of this runtime (e.g. "orbit-supervise/0.1.0"), for operators.
    agent: str | None = None
    # Attempts started ahead of a free child (0 to capacity): a finished child gets its next
    # handler without waiting for a round trip, at the price of a lease (and of the attempt
    # timeout) ticking while it waits behind a running handler (docs/supervisor.md).
    prefetch: int = 0
    # Ask for leases granted with the dispatch (protocol feature "grant"): a reservation
    # arrives started, with its lease counted from a frame this side sent, and no separate
    # start round trip precedes its handler (docs/protocol.md, "Grants").
    grants: bool = True
    # The host's labels (``--label``), sent in hello: a task that requires labels is given
    # only to a worker that has them all.
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SessionStats:
    running: int
    started: int
    renewals_confirmed: int
    reports_confirmed: int
    evidence_confirmed: int
    reconnects: int
    late_kills: int = 0  # lease timers that ran more than LATE_KILL_BOUND late
    margin_ms: float = 0.0  # the local-expiry margin new grants use now
    loop_lag_ms: float = 0.0  # the largest recent lateness of the driver's loop
    reap_ms: float = 0.0  # the largest recent SIGKILL → reap latency
    loop_lag_max_ms: float = 0.0  # the largest lateness of the driver's loop since start
    # Executions ended, by outcome (a copy): the handler's answer, or UNKNOWN for a kill.
    ended: Mapping[str, int] = field(default_factory=dict)
    frames_sent: int = 0  # protocol frames sent to the server, every connection
    frames_received: int = 0
    grants_declined: int = 0  # grants given back unstarted (docs/protocol.md, Grants)
