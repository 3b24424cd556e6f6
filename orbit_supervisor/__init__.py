"""orbit_supervisor: the worker runtime (``orbit-supervise``).

A parent asyncio process holds the protocol session and the leases; handlers run in child
processes that are hard-killed the moment their lease is lost. See docs/supervisor.md.
"""

from .actions import SupervisorEvent
from .app import Supervisor, SupervisorStats, SupervisorTimings
from .errors import FatalSessionError, ShutdownTimeoutError, SupervisorError, WorkerAlreadyRun
from .options import OptionError, QueueOutOfScope

__all__ = [
    "FatalSessionError",
    "OptionError",
    "QueueOutOfScope",
    "ShutdownTimeoutError",
    "Supervisor",
    "SupervisorError",
    "SupervisorEvent",
    "SupervisorStats",
    "SupervisorTimings",
    "WorkerAlreadyRun",
]
