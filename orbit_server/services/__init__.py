"""The server's use cases, one group a module, each a class composed over one transaction
context (``TxContext``: engine, configuration, clock, randomness), none inheriting another:

    admin          AdminService    authenticate, queues, credentials, the bootstrap admin
    tasks          TaskService     submit (and submit-and-reserve), read, cancel, review, stats
    reaper         Reaper          lapsed leases, stale reservations, deadlines, receipt pruning
    workers        WorkerService   hello, release, reserve, a control request's ops
    pushes         PushService     cancels and revocations read by every replica
    workers        WorkerService   hello, release, reserve, a control request's ops, presence
    listing        ListingService  task pages, queues with counts, live workers, unserved work
    retries        RetryService    FAILED or CANCELLED tasks run again, by ID or by filter;
                                   every bulk action by filter (cancel, review) walks there
    pauses         PauseService    queues, capabilities and versions paused and resumed
    retention      Retention       old finished tasks and long-unseen instances deleted
    schedules      ScheduleService periodic schedules and the firing loop's pass
    limits         LimitService    a queue's flow-control limits (set, read, list, delete)
    fair           FairService     a queue's fair dispatch between keys (on, off, read)

and what they share: ``wakeups`` (retries scheduled in memory), ``reservations`` (reserving
inside a caller's transaction), ``recording`` (the audit and effects of a closed or released
attempt), ``effects`` (what the adapters do after a transaction), ``binding`` (a worker
connection's identity), ``pause_board`` (the pauses in force, in memory: every claim narrows
by them).

Every public method of a group is exactly one transaction, retried by
``store.retry.transactional`` when it lost to another writer. The adapters call every method
on ONE store thread (SQLite has one writer), so a method is plain synchronous code on a sync
SQLAlchemy engine; after a call they act on the returned ``Effects`` (wake waiters, run a
dispatch pass, push ``cancel`` frames, re-arm the reaper).
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from ..config import ServerConfig

if TYPE_CHECKING:
    from .admin import AdminService
    from .binding import NO_CLAIMS, ClaimRoom, WorkerBinding
    from .context import TxContext
    from .effects import Effects
    from .listing import ListingService
    from .offers import OfferCache
    from .pauses import PauseService
    from .pushes import PushService
    from .reaper import Reaper
    from .reservations import Reservations
    from .retention import Retention
    from .retries import RetryService
    from .schedules import ScheduleService
    from .tasks import Submitted, TaskService
    from .wakeups import Wakeups
    from .workers import WorkerService

# The names above, loaded on first use (PEP 562): ``orbit-server bootstrap-admin`` imports
# ``services.admin`` alone, and a package ``__init__`` runs before any of its modules.
_LAZY = {
    "AdminService": "admin", "NO_CLAIMS": "binding", "ClaimRoom": "binding",
    "WorkerBinding": "binding", "TxContext": "context", "Effects": "effects",
    "ListingService": "listing", "OfferCache": "offers", "PushService": "pushes",
    "Reaper": "reaper", "PauseService": "pauses",
    "Reservations": "reservations", "Retention": "retention", "RetryService": "retries",
    "ScheduleService": "schedules",
    "Submitted": "tasks", "TaskService": "tasks", "Wakeups": "wakeups",
    "WorkerService": "workers", "WorkflowService": "workflows",
}

__all__ = [
    "NO_CLAIMS",
    "AdminService",
    "ClaimRoom",
    "Effects",
    "ListingService",
    "OfferCache",
    "PauseService",
    "PushService",
    "Reaper",
    "Reservations",
    "Retention",
    "RetryService",
    "ScheduleService",
    "Services",
    "Submitted",
    "TaskService",
    "TxContext",
    "Wakeups",
    "WorkerBinding",
    "WorkerService",
    "WorkflowService",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


class Services:
    """The groups of use cases over one context, sharing one ``Wakeups``: what the app
    composes and the adapters call (``services.tasks.submit(...)``)."""

    def __init__(self, engine: Engine, config: ServerConfig, clock: Callable[[], int],
                 rng: random.Random, replica: str = "local") -> None:
        from .admin import AdminService
        from .context import TxContext
        from .fairness import FairService
        from .limits import LimitService
        from .listing import ListingService
        from .offers import OfferCache
        from .pauses import PauseService
        from .policies import PolicyCache
        from .pushes import PushService
        from .reaper import Reaper
        from .retention import Retention
        from .retries import RetryService
        from .schedules import ScheduleService
        from .tasks import TaskService
        from .wakeups import Wakeups
        from .workers import WorkerService
        from .workflows import WorkflowService

        self.tx = TxContext(engine, config, clock, rng)
        wakeups = Wakeups()
        offers = OfferCache(self.tx)  # dropped by the calls that change instance rows
        # Registered policies, learnt at hellos, read by every submit.
        self.policies = PolicyCache(self.tx)
        self.admin = AdminService(self.tx)
        self.tasks = TaskService(self.tx, wakeups, offers, self.policies)
        self.reaper = Reaper(self.tx, wakeups)
        self.pushes = PushService(self.tx)
        self.workers = WorkerService(self.tx, wakeups, replica, offers, self.policies)
        self.listing = ListingService(self.tx)
        self.retention = Retention(self.tx, offers)
        self.schedules = ScheduleService(self.tx, self.policies)
        self.retries = RetryService(self.tx, wakeups)
        self.pauses = PauseService(self.tx)
        self.limits = LimitService(self.tx)
        self.workflows = WorkflowService(self.tx, self.policies)
        self.fair = FairService(self.tx)
