"""What the Supervisor does for the session's Execute, Kill and CancelChild actions.

``start`` hands the attempt to the child pool at once (so a Kill or a cancel that follows
reaches it, waiting or on a child); its outcome's future calls back when the pool sets it,
and the outcome goes to the session then (no task per attempt). ``kill`` SIGKILLs the
attempt's child synchronously and returns what the session says to the kill's facts (its
report goes out at once); an execution still waiting for a child is stopped before any
child gets it. ``end`` waits for the executions left at the end of the run, then abandons
them. The kill latency (local expiry or kill decision -> the killed child's reaped
outcome) is measured here, on ``time.monotonic``: uvloop's loop clock is cached per pass and
counts whole milliseconds, so a kill reaped within the same millisecond would read as 0.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import time
from collections.abc import Callable

from orbit_host.logs import fields
from orbit_host.tally import Histogram
from orbit_wire.frames import Report, Reservation
from orbit_wire.model import Outcome, UnknownCode

from .actions import Action
from .attempts import Attempt
from .outcomes import ChildOutcome, not_run
from .pool import ChildPool, PoolClosed
from .session import Session
from .session_types import KILL_LEASE_LOST, KILL_TASK_CANCELLED, LATE_KILL_BOUND

__all__ = ["Executions"]

_EXECUTIONS_GRACE = 5.0  # after the pool is closed, executions end within this bound


class Executions:
    """``perform`` performs the session's actions; ``timers_first`` runs a due session
    timer; ``on_error(where, exc)`` ends the run on a bug."""

    def __init__(self, loop: asyncio.AbstractEventLoop, session: Session, pool: ChildPool, *,
                 log: logging.Logger, perform: Callable[[list[Action]], None],
                 timers_first: Callable[[], None],
                 on_error: Callable[[str, BaseException], None], kill_latency: Histogram) -> None:
        self._loop, self._session, self._pool = loop, session, pool
        self._log = log
        self._perform, self._timers_first = perform, timers_first
        self._on_error = on_error
        self._kill_latency = kill_latency
        # The executions not yet reported, each with the callback its outcome calls.
        self._running: dict[Attempt, Callable[[asyncio.Future[ChildOutcome]], None]] = {}

    def start(self, att: Attempt) -> None:
        res = att.reservation
        # Per task: DEBUG, so that at the default level a success costs two level checks.
        self._log_attempt(logging.DEBUG, res, "attempt_started", "attempt %s of task %s "
                          "started (%s)", res.attempt_id, res.task_id, res.capability)
        started_at = self._loop.time()
        self._pool.submit(att)
        # No task per attempt: the outcome's future calls back once it is set.
        outcome: asyncio.Future[ChildOutcome] = att.outcome
        ended = self._running[att] = functools.partial(self._ended, att, started_at)
        outcome.add_done_callback(ended)

    def kill(self, att: Attempt, reason: str, code: str, late_by: float) -> list[Action]:
        signalled = time.monotonic()
        facts = self._pool.kill(att, reason, code=code)
        if facts is None:
            # No child runs it yet (still waiting for a free child) or it just finished: a
            # waiting execution must never start, so it ends before it gets a child.
            self._pool.stop_waiting(att, reason)
            return []
        # The kill latency runs from the local expiry (the timer ran late_by after it).
        att.kill_timed_from = signalled - late_by
        late = late_by > LATE_KILL_BOUND
        extra = fields("child_killed", attempt_id=att.attempt_id, task_id=att.task_id,
                       reason=reason, code=code, pid=facts.pid,
                       late_ms=round(late_by * 1000) if late else None)
        # The report goes out now, before anything else: the reap's facts follow.
        actions = self._session.child_killed(att.attempt_id, Report(
            child_pid=facts.pid, signal=int(signal.SIGKILL), cpu_ms=facts.cpu_ms,
            peak_rss_bytes=facts.peak_rss_bytes), facts.at)
        if late:
            self._log.warning("killed the child of attempt %s: %s, %.0f ms after the local "
                              "expiry (a late kill: the event loop was late)",
                              att.attempt_id, reason, late_by * 1000, extra=extra)
        else:
            # The policy's own ends (timeout, cancel, shutdown) are the runtime working as
            # asked; a lease that could not be kept is worth a warning.
            level = logging.WARNING if reason == KILL_LEASE_LOST else logging.INFO
            self._log.log(level, "killed the child of attempt %s: %s", att.attempt_id,
                          reason, extra=extra)
        return actions

    def cancel(self, att: Attempt) -> None:
        # Prefetched and still waiting for a child, it ends now, without its handler
        # starting only to be told to stop.
        if not self._pool.stop_waiting(att, KILL_TASK_CANCELLED):
            self._pool.cancel(att)

    async def end(self) -> None:
        """Wait for the executions still running; those still running after the grace are
        abandoned (a waiting one stops, a running child is killed) without a report."""
        futures = {att.outcome for att in self._running if not att.outcome.done()}
        if futures:
            await asyncio.wait(futures, timeout=_EXECUTIONS_GRACE)
        for att, ended in list(self._running.items()):
            if not att.outcome.done():
                del self._running[att]
                att.outcome.remove_done_callback(ended)
                self._pool.abandon(att)

    def _ended(self, att: Attempt, started_at: float,
               future: asyncio.Future[ChildOutcome]) -> None:
        """The outcome of ``att`` is set: tell the session (a bug ends the run)."""
        self._running.pop(att, None)
        if future.cancelled():
            return
        try:
            self._report(att, started_at, future)
        except Exception as exc:
            self._on_error(f"the execution of attempt {att.attempt_id}", exc)

    def _report(self, att: Attempt, started_at: float,
                future: asyncio.Future[ChildOutcome]) -> None:
        loop, res = self._loop, att.reservation
        if att.kill_timed_from is not None:
            self._kill_latency.observe(max(0.0, time.monotonic() - att.kill_timed_from))
        error = future.exception()
        if error is None:
            outcome = future.result()
        elif isinstance(error, PoolClosed):
            outcome = not_run(UnknownCode.SHUTDOWN.value)
        else:  # never let one execution take the run down
            self._log_attempt(logging.ERROR, res, "attempt_execute_failed",
                              "attempt %s could not be executed", res.attempt_id,
                              exc_info=error)
            outcome = ChildOutcome(Outcome.UNKNOWN, UnknownCode.HANDLER_CRASHED.value, False,
                                   None, None, Report())
        level = logging.DEBUG if outcome.outcome is Outcome.SUCCEEDED else logging.INFO
        if self._log.isEnabledFor(level):  # its fields are built only when it is written
            self._log_attempt(level, res, "attempt_ended", "attempt %s ended %s%s",
                              res.attempt_id, outcome.outcome.value,
                              f"/{outcome.code}" if outcome.code else "",
                              outcome=outcome.outcome.value, code=outcome.code,
                              kill_reason=outcome.report.kill_reason,
                              duration_ms=round((loop.time() - started_at) * 1000, 1))
        self._timers_first()
        self._perform(self._session.execution_finished(res.attempt_id, outcome, loop.time()))

    def _log_attempt(self, level: int, res: Reservation, event: str, message: str,
                     *args: object, exc_info: BaseException | bool = False,
                     **values: object) -> None:
        """One record about an attempt, with its IDs; nothing is built below the level
        (these run for every task)."""
        if self._log.isEnabledFor(level):
            self._log.log(level, message, *args, exc_info=exc_info, extra=fields(
                event, attempt_id=res.attempt_id, task_id=res.task_id,
                capability=str(res.capability), attempt_number=res.attempt_number, **values))
