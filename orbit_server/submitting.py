"""Submitting tasks, the same way for every adapter: ``POST .../tasks`` and ``.../tasks/batch``
over HTTP and the producer channel's ``submit`` (orbit_server/producer_ws.py).

One submit budget per credential (``ServerParts.submits``) whichever way it comes; a lone
task that a connected worker waits for is reserved for it (granted, for a worker that asks
for grants) in the submit's own transaction, through the dispatcher's claim routine; the
transaction's effects are acted on before the caller answers. Waiting for tasks to settle
after a submit is ``settle``: a watch registered right after the submit returned, on the
event loop, misses no wake-up (the work that ends a task is applied later, on the same
loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from orbit_wire.model import Capability, TaskState

from .auth import Principal
from .http_plumbing import RateLimited
from .parts import ServerParts
from .services import Effects, Reservations, Submitted, WorkerBinding
from .store.db import is_sqlite

# A task settled through another replica of a shared database wakes nobody on this one: a
# wait re-reads it this often, the period of the dispatch poll, so a producer and a worker
# on different replicas see at most 0.5 s added each way (docs/deployment.md). On a SQLite
# file every end is this server's own, and the re-read is only a safety net.
SHARED_RECHECK_S = 0.5
WAIT_SLICE_S = SHARED_RECHECK_S
WAIT_SLICE_SQLITE_S = 1.0


class Submitter:
    """The submit use cases of every adapter, over one server's parts."""

    def __init__(self, parts: ServerParts) -> None:
        self._parts = parts
        self._tasks = parts.services.tasks
        self._slice_s = WAIT_SLICE_SQLITE_S if is_sqlite(parts.config.db_url) else WAIT_SLICE_S

    def check_rate(self, principal: Principal, count: int) -> None:
        """Spend ``count`` from the credential's submit budget; RateLimited past it."""
        budget = self._parts.submits
        wait = budget.take(principal.credential_id, time.monotonic(), count)
        if wait > 0:
            raise RateLimited(f"credential submits more than {budget.rate:g} tasks/s", wait)

    async def submit(self, principal: Principal, queue_id: str, specs: Sequence[Any]
                     ) -> Submitted:
        """Create the tasks of ``specs`` in one transaction (rate already checked): their
        views, each with whether it was created (False: its operation key named an
        existing task)."""
        parts = self._parts
        if len(specs) != 1:
            made, effects = await parts.store.call(self._tasks.submit, principal, queue_id,
                                                   list(specs))
            parts.act_on(effects)
            return made
        submit = self._tasks.submit_and_reserve

        def submitting(binding: WorkerBinding | None, count: int
                       ) -> tuple[tuple[Submitted, Effects], Reservations]:
            made, effects, reserved = submit(principal, queue_id, list(specs), binding, count)
            return (made, effects), reserved

        # A worker of the queue waiting with credit for the task's capability gets it in
        # the submit's own transaction: one store hop and one commit less to its dispatch.
        made, effects = await parts.dispatcher.with_claim(queue_id, capability_of(specs[0]),
                                                          submitting, requires_of(specs[0]))
        parts.act_on(effects)
        return made

    async def settle(self, principal: Principal, task_id: str, wait_ms: int,
                     known: dict[str, Any] | None = None) -> dict[str, Any]:
        """The task's view once settled (terminal or NEEDS_REVIEW), or its latest view when
        ``wait_ms`` has passed. ``known``: its view as a submit just answered it (called
        right after the submit returned, with no await in between, no wake-up is missed
        and no first read is needed); else it is read after the watch is registered."""
        parts = self._parts
        event = parts.waiters.register(task_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        try:
            task = known if known is not None else await parts.store.call(
                self._tasks.get_task, principal, task_id)
            while not TaskState(task["state"]).settled:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(remaining, self._slice_s))
                view, event.view = event.view, None
                event.clear()
                if view is not None and TaskState(view["state"]).settled:
                    return view  # read in the transaction that ended it
                task = await parts.store.call(self._tasks.get_task, principal, task_id)
            return task
        finally:
            parts.waiters.unregister(task_id, event)


def requires_of(spec: Any) -> dict[str, str] | None:
    """The labels a task spec requires, when it says so in a usable form (else None: the
    use case checks the spec)."""
    requires = spec.get("requires") if isinstance(spec, dict) else None
    if isinstance(requires, dict) and all(isinstance(v, str) for v in requires.values()):
        return requires
    return None


def capability_of(spec: Any) -> Capability | None:
    """The capability a task spec names, if it names one (the use case checks the spec)."""
    if not isinstance(spec, dict):
        return None
    handler, version, payload_version = (spec.get("handler"), spec.get("handler_version"),
                                         spec.get("payload_version"))
    if (isinstance(handler, str) and isinstance(version, str)
            and isinstance(payload_version, str)):
        return Capability(handler, version, payload_version)
    return None
