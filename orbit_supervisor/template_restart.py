"""The pool's handler template, started once and restarted when it is lost.

A lost template (the OOM killer, an operator's kill -9) takes its children with it (their
parent-death signal). ``TemplateKeeper`` tells the pool (``on_lost``: the children's
attempts are uncertain, every slot waits for a new child), then starts a new template,
backing off (orbit_host/backoff.py) while that fails; once one reports the same
capabilities the pool refills every slot (``on_restarted``). One that serves other
capabilities closes the pool (``on_changed``): its attempts would not match. Children are
forked only while a template is connected and no restart is under way (``can_fork``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from orbit_host.backoff import delays
from orbit_host.logs import fields
from orbit_host.messages import ChildReaped, HandlersLoaded
from orbit_host.task_owner import TaskOwner
from orbit_wire.errors import HandlerSpecError
from orbit_wire.model import Capability
from orbit_wire.policy import CapabilityPolicy

from .template_link import TemplateLink

__all__ = ["TemplateKeeper"]

_START_TIMEOUT_S = 60.0
_EXIT_S = 5.0
_FIRST_RESTART_DELAY_S = 0.1  # a lost template that cannot be started again (doubling)
_MAX_RESTART_DELAY_S = 5.0


class TemplateKeeper:
    """Callbacks run on the loop and must not raise: ``on_forked(generation, pid)`` and
    ``on_reaped(report)`` as TemplateLink's, ``on_lost()``, ``on_restarted()``, and
    ``on_changed()`` (awaited). ``closing()`` tells whether the pool is closing (nothing is
    restarted then)."""

    def __init__(self, spec: str, *, on_forked: Callable[[int, int], None],
                 on_reaped: Callable[[ChildReaped], None], on_lost: Callable[[], None],
                 on_restarted: Callable[[], None], on_changed: Callable[[], Awaitable[None]],
                 closing: Callable[[], bool], tasks: TaskOwner, logger: logging.Logger,
                 child_nice: int, capture_output: bool) -> None:
        self._spec = spec
        self._on_forked, self._on_reaped = on_forked, on_reaped
        self._on_lost, self._on_restarted, self._on_changed = on_lost, on_restarted, on_changed
        self._closing = closing
        self._tasks = tasks
        self._log = logger
        self._child_nice = child_nice
        self._capture = capture_output
        self._link: TemplateLink | None = None
        self._restart: asyncio.Task[None] | None = None
        self.capabilities: tuple[Capability, ...] | None = None
        # The policies the handlers declare (HandlersLoaded.policies), with the capabilities.
        self.policies: tuple[CapabilityPolicy, ...] = ()

    @property
    def pid(self) -> int | None:
        return None if self._link is None else self._link.pid

    def pids(self) -> set[int] | None:
        """This process's own children (OrphanReaper): the template, or None while one is
        being started (its pid is not known yet). A lost template stays the current one
        until it has been reaped, and only then is the next one started."""
        link = self._link
        if link is None:
            return set()
        return None if link.pid is None else {link.pid}

    @property
    def can_fork(self) -> bool:
        return self._restart is None and self._link is not None and self._link.connected

    async def start(self) -> tuple[Capability, ...]:
        """Start the first template; its capabilities, or HandlerSpecError."""
        loaded = await self._start()
        self.capabilities, self.policies = loaded.capabilities, loaded.policies or ()
        return self.capabilities

    def fork(self, generation: int, fds: list[int]) -> None:
        assert self._link is not None  # can_fork was checked
        self._link.fork(generation, fds)

    def restart_over(self) -> None:
        """The pool closes: no restart is under way any more (its task was cancelled)."""
        self._restart = None

    async def stop(self) -> None:
        """Stop the template (the last reap reports are delivered meanwhile)."""
        if self._link is not None:
            await self._link.stop(_EXIT_S)

    async def _start(self) -> HandlersLoaded:
        self._link = TemplateLink(
            self._spec, on_forked=self._on_forked, on_reaped=self._on_reaped,
            on_lost=self._lost, logger=self._log, start_timeout=_START_TIMEOUT_S,
            child_nice=self._child_nice, capture_output=self._capture)
        return await self._link.start()

    def _lost(self) -> None:
        if self._closing() or self._restart is not None or self.capabilities is None:
            return
        # Its children die with it (PR_SET_PDEATHSIG=SIGKILL); their attempts are uncertain.
        self._log.error("the handler template exited; restarting it",
                        extra=fields("template_lost"))
        self._on_lost()
        self._restart = self._tasks.start(self._restart_template())

    async def _restart_template(self) -> None:
        """Start a new template (with backoff); the pool's waiters keep waiting."""
        old = self._link
        if old is not None:
            await old.wait_exited()
        for delay in delays(_FIRST_RESTART_DELAY_S, _MAX_RESTART_DELAY_S):
            if self._closing():
                return
            try:
                loaded = await self._start()
            except HandlerSpecError as exc:
                self._log.error("restarting the handler template failed: %s", exc.message,
                                extra=fields("template_restart_failed"))
            else:
                self._restart = None
                if (loaded.capabilities != self.capabilities
                        or (loaded.policies or ()) != self.policies):
                    self._log.error("the restarted template serves other capabilities or "
                                    "declares other policies; the pool closes",
                                    extra=fields("template_changed"))
                    await self._on_changed()
                    return
                self._on_restarted()
                return
            await asyncio.sleep(delay)
