"""Supervisor: the session core, the child pool and the connection, composed in one loop.

Every input (a frame, a child's outcome, the timer, stop()) is handed to the pure Session
synchronously; the actions it returns are performed at once, in order (``_apply``), and the
one timer is re-armed. Nothing awaits between a decision and its kill: ``pool.kill`` is
called inside ``_apply``.

Shutdown order (``_run``, top to bottom): the session says Finish → the timer stops →
children are killed if the run failed (a clean drain has none left) → the connection is
closed (gracefully after a drain, aborted otherwise) → connect/execution tasks are
cancelled → the pool is closed → the event stream is closed → return or raise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass, field

from orbit_host.credentials import Credentials, load_credentials
from orbit_host.logs import fields
from orbit_host.tally import Buckets
from orbit_host.tls import ca_file_from, client_ssl_context
from orbit_host.version import installed_version
from orbit_wire.frames import Report, Reservation, ServerFrame
from orbit_wire.ids import new_id, new_secret
from orbit_wire.model import Outcome, UnknownCode

from . import defaults
from .actions import (
    Action,
    CancelChild,
    CloseConnection,
    Connect,
    Emit,
    EndRun,
    Execute,
    Kill,
    SendFrame,
    SupervisorEvent,
)
from .attempts import Attempt
from .connection import ConnectFailed, Connection, worker_url
from .errors import SupervisorError, WorkerAlreadyRun
from .events import EventStream
from .options import SupervisorOptions
from .outcomes import not_run
from .pool import ChildOutcome, ChildPool, PoolClosed, PoolStats
from .session import (
    KILL_TASK_CANCELLED,
    LATE_KILL_BOUND,
    REPORT_MARGIN,
    Session,
    SessionConfig,
    SessionStats,
)

log = logging.getLogger("orbit.supervisor")

# While a child is being replaced the pool says when the new one is ready; this slow look is
# only a safety net (e.g. a replacement that never comes while the template restarts).
_REPLACING_POLL = 0.5
_EXECUTIONS_GRACE = 5.0  # after the pool is closed, executions end within this bound
# How often the loop's lateness is sampled (the lease timer's own lateness is sampled too).
_LAG_PROBE_EVERY = 0.1
_NOTHING_YET = SessionStats(running=0, started=0, renewals_confirmed=0, reports_confirmed=0,
                            evidence_confirmed=0, reconnects=0)  # before run() made a session


@dataclass(frozen=True, slots=True)
class SupervisorStats:
    """In-process counters (not a business success rate)."""

    running: int
    started: int
    renewals_confirmed: int
    reports_confirmed: int
    evidence_confirmed: int
    reconnects: int
    dropped_events: int
    children: PoolStats | None
    late_kills: int = 0  # lease timers that ran more than 20 ms past the local expiry
    margin_ms: float = 0.0  # the local-expiry margin new grants use (measured; margin.py)
    loop_lag_ms: float = 0.0  # the largest recent lateness of this process's event loop
    reap_ms: float = 0.0  # the largest recent SIGKILL -> reap latency
    loop_lag_max_ms: float = 0.0  # the largest lateness of the event loop since run()
    ended: Mapping[str, int] = field(default_factory=dict)  # executions ended, by outcome


@dataclass(frozen=True, slots=True)
class SupervisorTimings:
    """Histograms the driver fills as things happen (seconds; orbit_supervisor/metrics.py
    exports them): local expiry (or the kill decision) → the killed child's reaped outcome,
    kill → the slot's fresh child ready, and the loop's lateness every lag probe."""

    kill: Buckets
    replacement: Buckets
    loop_lag: Buckets


class Supervisor:
    """Runs handlers from ``MODULE:ATTR`` in child processes for one queue.

    ``await run()`` once; ``stop()`` drains; ``stats()`` and ``events()`` observe. The
    identity (instance ID + secret) is made here, kept across reconnects, never shown.
    ``reap_orphans=True`` (what ``orbit-supervise`` uses) makes this process a child
    subreaper that kills what a lost template's children left in other sessions
    (orphans.py); leave it off in a process that has children of its own.
    """

    def __init__(
        self,
        handlers: str,
        queue_id: str,
        credentials: Credentials | str | os.PathLike[str],
        url: str | None = None,
        workers: int = defaults.WORKERS,
        shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT,
        reconnect_min_delay: float = defaults.RECONNECT_MIN_DELAY,
        reconnect_max_delay: float = defaults.RECONNECT_MAX_DELAY,
        max_tasks_per_child: int | None = None,
        max_memory_per_child: int | None = None,
        *,
        logger: logging.Logger | None = None,
        reap_orphans: bool = False,
        ca_file: str | None = None,
        child_nice: int = defaults.CHILD_NICE,
        capture_child_output: bool = False,
        prefetch: int = 0,
    ) -> None:
        self.options = SupervisorOptions(
            queue_id=queue_id, workers=workers, shutdown_timeout=shutdown_timeout,
            reconnect_min_delay=reconnect_min_delay, reconnect_max_delay=reconnect_max_delay,
            max_tasks_per_child=max_tasks_per_child, max_memory_per_child=max_memory_per_child,
            child_nice=child_nice, prefetch=prefetch,
        )
        if not isinstance(credentials, Credentials):
            credentials = load_credentials(credentials)
        self._credentials = credentials
        self.url = worker_url(url or credentials.url)
        # --ca-file / ORBIT_CA_FILE: the trust for a wss:// server's certificate.
        ca = ca_file_from(ca_file)
        self._ssl = client_ssl_context(ca) if ca is not None and self.url.startswith("wss:") \
            else None
        self.handlers = handlers
        self.instance_id = new_id(int(time.time() * 1000))
        self._instance_secret = new_secret()
        self._log = logger or log
        self._reap_orphans = reap_orphans
        self._capture = capture_child_output
        self._events = EventStream()
        self._ran = False
        self._session: Session | None = None
        self._pool: ChildPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: Connection | None = None
        self._connect_task: asyncio.Task[None] | None = None
        self._tasks: asyncio.TaskGroup | None = None
        self._executions: set[asyncio.Task[None]] = set()  # each awaits one outcome
        self._finished: asyncio.Future[SupervisorError | None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._replacing_seen = 0
        self._replacing_poll: asyncio.TimerHandle | None = None
        self._lag_probe: asyncio.TimerHandle | None = None
        self._lag_probe_at = 0.0
        self._pending_stop: bool | None = None  # stop() before run() reached the loop
        self._connect_attempts = 0
        self._kill_latency = Buckets()
        self._loop_lag = Buckets()

    def __repr__(self) -> str:
        return f"Supervisor(instance_id={self.instance_id!r}, url={self.url!r})"

    # ------------------------------------------------------------------ public API

    async def run(self) -> None:
        """Run until drained (returns None) or failed (raises a SupervisorError).

        HandlerSpecError (bad MODULE:ATTR) is raised before any connection is made.
        """
        if self._ran:
            raise WorkerAlreadyRun("Supervisor.run() may be called once per instance")
        self._ran = True
        try:
            await self._run()
        finally:
            self._events.close()

    def stop(self, *, force: bool = False) -> None:
        """Ask to drain (idempotent). ``force=True`` takes the shutdown-timeout path now.

        Call from the loop's thread (or through ``loop.call_soon_threadsafe``).
        """
        if self._session is None or self._loop is None:
            self._pending_stop = force or bool(self._pending_stop)
            return
        self._apply(self._session.request_stop(self._loop.time(), force=force))

    def stats(self) -> SupervisorStats:
        session = self._session.stats() if self._session is not None else _NOTHING_YET
        return SupervisorStats(
            running=session.running, started=session.started,
            renewals_confirmed=session.renewals_confirmed,
            reports_confirmed=session.reports_confirmed,
            evidence_confirmed=session.evidence_confirmed, reconnects=session.reconnects,
            dropped_events=self._events.dropped,
            children=self._pool.stats() if self._pool is not None else None,
            late_kills=session.late_kills, margin_ms=session.margin_ms,
            loop_lag_ms=session.loop_lag_ms, reap_ms=session.reap_ms,
            loop_lag_max_ms=session.loop_lag_max_ms, ended=session.ended,
        )

    def timings(self) -> SupervisorTimings:
        """The latency histograms (live objects: read them on the loop's thread)."""
        replacement = self._pool.replacement_latency if self._pool is not None else Buckets()
        return SupervisorTimings(self._kill_latency, replacement, self._loop_lag)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop run() runs on (None before it started)."""
        return self._loop

    def child_pids(self) -> list[int]:
        """The pids of the children alive now."""
        return list(self._pool.child_pids().values()) if self._pool is not None else []

    @property
    def connected(self) -> bool:
        """Whether a connection to the server is open now."""
        return self._conn is not None

    def events(self) -> AsyncIterator[SupervisorEvent]:
        """The local event stream: 128 buffered, drops counted, ends when run() returns."""
        return self._events.__aiter__()

    # ------------------------------------------------------------------ the run

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        opts = self.options
        pool = ChildPool(self.handlers, opts.workers,
                         max_tasks_per_child=opts.max_tasks_per_child,
                         max_memory_bytes=opts.max_memory_per_child, logger=self._log,
                         on_child_ready=self._on_child_ready, reap_orphans=self._reap_orphans,
                         child_nice=opts.child_nice, capture_output=self._capture)
        self._pool = pool
        try:
            capabilities = await pool.start()  # HandlerSpecError: before any connection
            self._log.info("handlers ready: %s; %d children", ", ".join(map(str, capabilities)),
                           opts.workers, extra=fields(
                               "handlers_ready", instance_id=self.instance_id,
                               queue_id=opts.queue_id, workers=opts.workers,
                               capabilities=[str(c) for c in capabilities]))
            creds = self._credentials
            self._session = Session(SessionConfig(
                credential_id=creds.credential_id, credential_secret=creds.secret,
                instance_id=self.instance_id, instance_secret=self._instance_secret,
                queue_id=opts.queue_id, capabilities=capabilities, capacity=opts.workers,
                shutdown_timeout=opts.shutdown_timeout,
                reconnect_min_delay=opts.reconnect_min_delay,
                reconnect_max_delay=opts.reconnect_max_delay,
                report_margin=REPORT_MARGIN, cpus=len(os.sched_getaffinity(0)),
                agent=_agent(), prefetch=opts.prefetch,
            ), random.random)
            self._finished = loop.create_future()
            # Every task (connection, executions) is owned by this group; the shutdown below
            # ends them all before the group exits.
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                self._apply(self._session.start(loop.time()))
                self._probe_lag()
                if self._pending_stop is not None:
                    self.stop(force=self._pending_stop)
                error = await self._finished
                # --- shutdown, in this order ---
                self._cancel_timers()
                if error is not None:
                    await pool.close(kill=True)  # kill what still runs
                if self._conn is not None:
                    if error is None:
                        await self._conn.close()  # drained: a clean close
                    else:
                        self._conn.abort()  # pending control requests are abandoned
                if self._connect_task is not None:
                    self._connect_task.cancel()
                await self._end_executions()
        finally:
            self._cancel_timers()
            await pool.close(kill=True)
        if error is not None:
            self._log.error("supervisor stopped: %s", error.message, extra=fields(
                "supervisor_stopped", instance_id=self.instance_id, unconfirmed=error.unconfirmed,
                running=error.running))
            raise error
        stats = self._session.stats()
        confirmed = stats.reports_confirmed + stats.evidence_confirmed
        self._log.info("drained: started=%d confirmed=%d late_kills=%d loop_lag_max_ms=%.1f "
                       "margin_ms=%.1f", stats.started, confirmed, stats.late_kills,
                       stats.loop_lag_max_ms, stats.margin_ms, extra=fields(
                           "drained", instance_id=self.instance_id, started=stats.started,
                           confirmed=confirmed, late_kills=stats.late_kills,
                           loop_lag_max_ms=round(stats.loop_lag_max_ms, 1),
                           margin_ms=round(stats.margin_ms, 1)))

    async def _end_executions(self) -> None:
        tasks = [t for t in self._executions if not t.done()]
        if not tasks:
            return
        _, still = await asyncio.wait(tasks, timeout=_EXECUTIONS_GRACE)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=_EXECUTIONS_GRACE)

    # ------------------------------------------------------------------ actions

    def _apply(self, actions: list[Action]) -> None:
        """Perform the session's actions in order, then re-arm the timer."""
        session, loop = self._session, self._loop
        assert session is not None and loop is not None
        for action in actions:
            match action:
                case SendFrame(frame=frame):
                    if self._conn is not None:
                        self._conn.send(frame)
                case Execute(attempt=att):
                    self._execute(att)
                case Kill(attempt=att, reason=reason, code=code, late_by=late):
                    self._kill(att, reason, code, late)
                case CancelChild(attempt=att):
                    assert self._pool is not None
                    # Prefetched and still waiting for a child, it ends now, without its
                    # handler starting only to be told to stop.
                    if not self._pool.stop_waiting(att, KILL_TASK_CANCELLED):
                        self._pool.cancel(att)
                case Emit(event=event):
                    self._events.publish(event)
                    if self._log.isEnabledFor(logging.DEBUG):
                        self._log.debug("event %s %s %s", event.type, event.attempt_id or "",
                                        event.classification or "", extra=fields(
                                            "supervisor_event", type=event.type,
                                            attempt_id=event.attempt_id,
                                            task_id=event.task_id,
                                            classification=event.classification))
                case Connect(delay=delay):
                    self._connect_task = self._spawn(self._connect(delay))
                case CloseConnection(reason=reason):
                    self._log.warning("dropping the connection: %s", reason, extra=fields(
                        "connection_dropped", reason=reason, instance_id=self.instance_id))
                    if self._conn is not None:
                        self._conn.abort()
                case EndRun(error=error):
                    if self._finished is not None and not self._finished.done():
                        self._finished.set_result(error)
        self._watch_replacing()
        self._rearm()

    def _spawn(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None]:
        assert self._tasks is not None
        return self._tasks.create_task(coro)

    def _kill(self, att: Attempt, reason: str, code: str, late_by: float) -> None:
        assert self._pool is not None and self._session is not None
        attempt_id = att.attempt_id
        facts = self._pool.kill(att, reason, code=code)
        if facts is not None:
            # The kill latency runs from the local expiry (the timer ran late_by after it).
            att.kill_timed_from = facts.at - late_by
            # The report goes out now, before anything else: the reap's facts follow.
            self._apply(self._session.child_killed(attempt_id, Report(
                child_pid=facts.pid, signal=int(signal.SIGKILL), cpu_ms=facts.cpu_ms,
                peak_rss_bytes=facts.peak_rss_bytes), facts.at))
            late = late_by > LATE_KILL_BOUND
            extra = fields("child_killed", attempt_id=attempt_id,
                           task_id=att.task_id, reason=reason, code=code,
                           pid=facts.pid, late_ms=round(late_by * 1000) if late else None)
            if late:
                self._log.warning("killed the child of attempt %s: %s, %.0f ms after the "
                                  "local expiry (a late kill: the event loop was late)",
                                  attempt_id, reason, late_by * 1000, extra=extra)
            else:
                self._log.warning("killed the child of attempt %s: %s", attempt_id, reason,
                                  extra=extra)
            return
        # No child runs it yet (still waiting for a free child) or it just finished: a
        # waiting execution must never start, so it ends before it gets a child.
        self._pool.stop_waiting(att, reason)

    def _rearm(self) -> None:
        session, loop = self._session, self._loop
        assert session is not None and loop is not None
        when = session.next_timer()
        if when == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = when
        if when is not None:
            self._timer = loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        assert self._session is not None and self._loop is not None
        now = self._loop.time()
        if self._timer_at is not None:
            self._session.loop_lag(now - self._timer_at)
        self._timer = None
        self._timer_at = None
        try:
            self._apply(self._session.handle_timer(now))
        except Exception as exc:
            self._internal_error("the timer", exc)

    def _timers_first(self) -> None:
        """Run a due timer before other work: a lease expiry never waits behind a frame or
        a child's outcome that the loop happened to pick first."""
        if (self._timer is not None and self._timer_at is not None and self._loop is not None
                and self._loop.time() >= self._timer_at):
            self._timer.cancel()
            self._on_timer()

    def _probe_lag(self) -> None:
        """Sample the loop's lateness every _LAG_PROBE_EVERY (margin.py uses it)."""
        loop, session = self._loop, self._session
        if loop is None or session is None or session.done:
            return
        now = loop.time()
        if self._lag_probe is not None:
            lag = now - self._lag_probe_at
            session.loop_lag(lag)
            self._loop_lag.observe(max(0.0, lag))
        self._lag_probe_at = now + _LAG_PROBE_EVERY
        self._lag_probe = loop.call_at(self._lag_probe_at, self._probe_lag)

    def _watch_replacing(self) -> None:
        """Tell the session how many slots are being replaced; look again while any are."""
        pool, session, loop = self._pool, self._session, self._loop
        if pool is None or session is None or loop is None or session.done:
            return
        replacing = pool.being_replaced
        if replacing != self._replacing_seen:
            self._replacing_seen = replacing
            actions = session.slots_being_replaced(replacing, loop.time())
            if actions:
                self._apply(actions)
                return
        if replacing and self._replacing_poll is None:
            self._replacing_poll = loop.call_later(_REPLACING_POLL, self._replacing_tick)

    def _on_child_ready(self) -> None:
        """A replacement child is ready: offer its slot now rather than at the next look.
        Deferred to its own callback, so the pool finishes its bookkeeping first."""
        if self._loop is not None and self._session is not None and not self._session.done:
            self._loop.call_soon(self._replacing_ready)

    def _replacing_ready(self) -> None:
        try:
            self._watch_replacing()
            self._rearm()
        except Exception as exc:
            self._internal_error("the pool watch", exc)

    def _replacing_tick(self) -> None:
        self._replacing_poll = None
        self._replacing_ready()

    def _cancel_timers(self) -> None:
        for handle in (self._timer, self._replacing_poll, self._lag_probe):
            if handle is not None:
                handle.cancel()
        self._timer = self._replacing_poll = self._lag_probe = None
        self._timer_at = None

    # ------------------------------------------------------------------ tasks

    def _internal_error(self, where: str, exc: BaseException) -> None:
        """A bug must end the run with an error, never hang it or leave children running."""
        self._log.error("internal error in %s", where, exc_info=exc,
                        extra=fields("internal_error", where=where))
        if self._finished is not None and not self._finished.done():
            session = self._session
            self._finished.set_result(SupervisorError(
                f"internal error in {where}: {type(exc).__name__}",
                unconfirmed=session.unconfirmed if session else 0,
                running=session.executing if session else 0))

    async def _connect(self, delay: float) -> None:
        try:
            await self._connect_and_read(delay)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._internal_error("the connection task", exc)

    async def _connect_and_read(self, delay: float) -> None:
        session, loop = self._session, self._loop
        assert session is not None and loop is not None
        if delay > 0:
            await asyncio.sleep(delay)
        self._connect_attempts += 1
        try:
            conn = await Connection.open(self.url, ssl_context=self._ssl)
        except ConnectFailed as exc:
            self._log.warning("cannot reach %s (attempt %d): %s", self.url,
                              self._connect_attempts, exc, extra=fields(
                                  "connect_failed", url=self.url,
                                  attempt=self._connect_attempts, reason=exc.reason))
            self._apply(session.connect_failed(loop.time(), exc.reason))
            return
        self._log.info("connected to %s", self.url, extra=fields(
            "connected", url=self.url, instance_id=self.instance_id,
            queue_id=self.options.queue_id))
        self._conn = conn
        self._apply(session.connected(loop.time()))
        reason = await conn.run(self._on_frame)
        if self._conn is conn:
            self._conn = None
        if not session.done:
            self._log.warning("connection lost: %s", reason, extra=fields(
                "connection_lost", url=self.url, reason=reason))
        self._apply(session.connection_lost(loop.time(), reason))

    def _on_frame(self, frame: ServerFrame) -> None:
        assert self._session is not None and self._loop is not None
        self._timers_first()
        self._apply(self._session.frame_received(frame, self._loop.time()))

    def _execute(self, att: Attempt) -> None:
        """Hand ``att`` to the pool now (so a Kill or a cancel that follows reaches it),
        and report its outcome from a task of the run."""
        assert self._pool is not None and self._loop is not None
        res = att.reservation
        # Per task: DEBUG, so that at the default level a success costs two level checks.
        self._log_attempt(logging.DEBUG, res, "attempt_started", "attempt %s of task %s "
                          "started (%s)", res.attempt_id, res.task_id, res.capability)
        started_at = self._loop.time()
        self._pool.submit(att)
        task = self._spawn(self._report(att, started_at))
        self._executions.add(task)
        task.add_done_callback(self._executions.discard)

    async def _report(self, att: Attempt, started_at: float) -> None:
        try:
            await self._outcome_reported(att, started_at)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._internal_error(f"the execution of attempt {att.attempt_id}", exc)

    async def _outcome_reported(self, att: Attempt, started_at: float) -> None:
        pool, session, loop = self._pool, self._session, self._loop
        assert pool is not None and session is not None and loop is not None
        res = att.reservation
        outcome: ChildOutcome
        try:
            outcome = await pool.outcome(att)
        except PoolClosed:
            outcome = not_run("SHUTDOWN")
        except Exception:  # never let one execution take the run down
            self._log_attempt(logging.ERROR, res, "attempt_execute_failed",
                              "attempt %s could not be executed", res.attempt_id,
                              exc_info=True)
            outcome = ChildOutcome(Outcome.UNKNOWN, UnknownCode.HANDLER_CRASHED.value, False,
                                   None, None, Report())
        finally:
            if att.kill_timed_from is not None:
                self._kill_latency.observe(max(0.0, loop.time() - att.kill_timed_from))
        self._log_attempt(logging.DEBUG if outcome.outcome is Outcome.SUCCEEDED
                          else logging.INFO, res, "attempt_ended", "attempt %s ended %s%s",
                          res.attempt_id, outcome.outcome.value,
                          f"/{outcome.code}" if outcome.code else "",
                          outcome=outcome.outcome.value, code=outcome.code,
                          kill_reason=outcome.report.kill_reason,
                          duration_ms=round((loop.time() - started_at) * 1000, 1))
        self._timers_first()
        self._apply(session.execution_finished(res.attempt_id, outcome, loop.time()))

    def _log_attempt(self, level: int, res: Reservation, event: str, message: str,
                     *args: object, exc_info: bool = False, **values: object) -> None:
        """One record about an attempt, with its IDs; nothing is built below the level
        (these run for every task)."""
        if self._log.isEnabledFor(level):
            self._log.log(level, message, *args, exc_info=exc_info, extra=fields(
                event, attempt_id=res.attempt_id, task_id=res.task_id,
                capability=str(res.capability), attempt_number=res.attempt_number, **values))


def _agent() -> str:
    """``orbit-supervise/<version>``: what hello tells operators this runtime is."""
    return f"orbit-supervise/{installed_version()}"
