"""The Supervisor's clocks: the session's one timer, the loop-lag probe, the pool watch.

- One ``loop.call_at`` at ``Session.next_timer()``, re-armed after every input
  (``rearm``); when it fires, ``Session.handle_timer`` runs. ``due_first`` runs a due timer
  before other work, so a lease expiry never waits behind a frame or a child's outcome
  that the loop happened to pick first. How late the timer ran is a loop-lag sample.
- The loop's lateness is also sampled every ``LAG_PROBE_EVERY`` (margin.py uses both).
- The session hears how many slots are being replaced (their next child still to come)
  whenever that changes: after every pass of the Supervisor's loop, when a fresh child is
  ready, and every ``REPLACING_POLL`` while any are.

What the session answers is given to ``perform`` (the Supervisor's one loop of actions).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from orbit_host.tally import Histogram

from .actions import Action
from .pool import ChildPool
from .session import Session

__all__ = ["LAG_PROBE_EVERY", "REPLACING_POLL", "SessionTimers"]

# How often the loop's lateness is sampled (the lease timer's own lateness is sampled too).
LAG_PROBE_EVERY = 0.1
# While a child is being replaced the pool says when the new one is ready; this slow look is
# only a safety net (e.g. a replacement that never comes while the template restarts).
REPLACING_POLL = 0.5


class SessionTimers:
    """``perform(actions)`` performs the session's actions (and re-arms); ``on_error(where,
    exc)`` ends the run on a bug in a callback."""

    def __init__(self, loop: asyncio.AbstractEventLoop, session: Session, pool: ChildPool, *,
                 perform: Callable[[list[Action]], None],
                 on_error: Callable[[str, BaseException], None], loop_lag: Histogram) -> None:
        self._loop, self._session, self._pool = loop, session, pool
        self._perform, self._on_error = perform, on_error
        self._loop_lag = loop_lag
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._probe: asyncio.TimerHandle | None = None
        self._probe_at = 0.0
        self._replacing_seen = 0
        self._replacing_poll: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ the session's timer

    def rearm(self) -> None:
        when = self._session.next_timer()
        if when == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = when
        if when is not None:
            self._timer = self._loop.call_at(when, self._fire)

    def due_first(self) -> None:
        """Run a due timer now, before the work that called this."""
        if (self._timer is not None and self._timer_at is not None
                and self._loop.time() >= self._timer_at):
            self._timer.cancel()
            self._fire()

    def _fire(self) -> None:
        now = self._loop.time()
        if self._timer_at is not None:
            self._session.loop_lag(now - self._timer_at)
        self._timer = None
        self._timer_at = None
        try:
            self._perform(self._session.handle_timer(now))
        except Exception as exc:
            self._on_error("the timer", exc)

    # ------------------------------------------------------------------ the lag probe

    def probe_lag(self) -> None:
        """Sample the loop's lateness every LAG_PROBE_EVERY, until the session is done."""
        if self._session.done:
            return
        now = self._loop.time()
        if self._probe is not None:
            lag = now - self._probe_at
            self._session.loop_lag(lag)
            self._loop_lag.observe(max(0.0, lag))
        self._probe_at = now + LAG_PROBE_EVERY
        self._probe = self._loop.call_at(self._probe_at, self.probe_lag)

    # ------------------------------------------------------------------ replacements

    def replacing(self) -> list[Action]:
        """Tell the session how many slots are being replaced, if that changed, and return
        its actions; while any are, look again in REPLACING_POLL."""
        if self._session.done:
            return []
        replacing = self._pool.being_replaced
        if replacing != self._replacing_seen:
            self._replacing_seen = replacing
            actions = self._session.slots_being_replaced(replacing, self._loop.time())
            if actions:
                return actions
        if replacing and self._replacing_poll is None:
            self._replacing_poll = self._loop.call_later(REPLACING_POLL, self._replacing_tick)
        return []

    def child_ready(self) -> None:
        """A fresh child is ready: offer its slot now rather than at the next look.
        Deferred to its own callback, so the pool finishes its bookkeeping first."""
        if not self._session.done:
            self._loop.call_soon(self._look_again)

    def _replacing_tick(self) -> None:
        self._replacing_poll = None
        self._look_again()

    def _look_again(self) -> None:
        try:
            self._perform([])  # the pass ends with a look at the replacements
        except Exception as exc:
            self._on_error("the pool watch", exc)

    def cancel(self) -> None:
        for handle in (self._timer, self._replacing_poll, self._probe):
            if handle is not None:
                handle.cancel()
        self._timer = self._replacing_poll = self._probe = None
        self._timer_at = None
