"""Processes a handler started that outlived both their child and the template.

Children and the template are child subreapers, so a process a handler started (even one
that double-forked into its own session) stays below them and dies with its attempt. If the
template itself dies (the OOM killer, an operator's kill -9), its children die by their
parent-death signal, and what they started in other sessions would be re-parented to init and
keep running. ``OrphanReaper`` makes this process the subreaper above the template instead:
such processes are re-parented here, and ``sweep`` SIGKILLs and reaps every child of this
process that is not one of the templates (``own()``).

Only for a process that starts no children of its own besides the templates:
``orbit-supervise`` turns it on; an application embedding ``Supervisor`` keeps it off unless
it asks (``reap_orphans=True``), because its own children would be swept too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable

from orbit_host import procutil
from orbit_host.logs import fields
from orbit_host.task_owner import TaskOwner

# After a template loss, sweep at these delays (seconds): the children die by their death
# signal within milliseconds, and what they started is re-parented as they die. Then again
# every SWEEP_AGAIN_S while a sweep still found something, at most SWEEP_AGAIN_MAX times.
SWEEP_DELAYS_S = (0.0, 0.05, 0.2, 1.0)
SWEEP_AGAIN_S = 0.1
SWEEP_AGAIN_MAX = 50


class OrphanReaper:
    def __init__(self, own: Callable[[], set[int] | None], logger: logging.Logger) -> None:
        """``own()`` gives the pids of the templates (this process's own children), or None
        while one is being started (its pid is not known yet: no sweep then)."""
        self._own = own
        self._log = logger
        self._enabled = False
        self._sweeping = TaskOwner()  # at most one sweep for a while at a time

    def enable(self) -> None:
        """Become the child subreaper above the templates (Linux; from now on)."""
        procutil.set_child_subreaper()
        self._enabled = True

    def sweep(self) -> int:
        """SIGKILL every child that is not a template and reap the dead ones (one killed
        just now is reaped by a later sweep); the number of such children found."""
        own = self._own() if self._enabled else None
        if own is None:
            return 0
        found = killed = 0
        for pid in procutil.child_pids(os.getpid()):
            if pid in own:
                continue
            found += 1
            if procutil.kill_pid(pid):
                killed += 1
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if killed:
            self._log.warning("killed %d process(es) left behind by a lost template", killed,
                              extra=fields("orphans_killed", count=killed))
        return found

    def after_template_loss(self) -> None:
        """Sweep now and over the next second, and on while something is still found."""
        if not self._enabled or self._sweeping:
            return
        self._sweeping.start(self._sweep_for_a_while())

    async def _sweep_for_a_while(self) -> None:
        elapsed = 0.0
        found = 0
        for delay in SWEEP_DELAYS_S:
            await asyncio.sleep(delay - elapsed)
            elapsed = delay
            found = self.sweep()
        for _ in range(SWEEP_AGAIN_MAX):
            if not found:
                return
            await asyncio.sleep(SWEEP_AGAIN_S)
            found = self.sweep()

    async def close(self) -> None:
        await self._sweeping.stop()
        self.sweep()
