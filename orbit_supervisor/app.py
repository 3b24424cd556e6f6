"""Supervisor: the session core, the child pool and the connection, composed in one loop.

Every input (a frame, a child's outcome, the timer, stop()) is handed to the pure Session
synchronously; the actions it returns are queued and one loop (``_apply``) performs them in
order, then re-arms the one timer. That loop never re-enters itself: an action whose effect
gives more actions (a kill's report, a change in the slots being replaced) queues them
behind the others. Nothing awaits between a decision and its kill: ``pool.kill`` is called
while the actions are performed (executions.py). The clocks are timers.py's.

Shutdown order (``_run``, top to bottom): the session says EndRun → the timers stop →
children are killed if the run failed (a clean drain has none left) → the connection is
closed (gracefully after a drain, aborted otherwise) → the connect task is cancelled →
executions still running get a bounded wait, then are abandoned → the pool is closed → the
event stream is closed → return or raise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields

from orbit_host.credentials import Credentials, load_credentials
from orbit_host.logs import fields
from orbit_host.tally import Histogram
from orbit_host.tls import ca_file_from, client_ssl_context
from orbit_host.version import installed_version
from orbit_wire.frames import ServerFrame
from orbit_wire.ids import new_id, new_secret

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
from .connection import ConnectFailed, Connection, worker_url
from .errors import SupervisorError, WorkerAlreadyRun
from .events import EventStream
from .executions import Executions
from .options import SupervisorOptions
from .pool import ChildPool, PoolStats
from .session import REPORT_MARGIN, Session, SessionConfig, SessionStats
from .timers import SessionTimers

log = logging.getLogger("orbit.supervisor")

_NOTHING_YET = SessionStats(running=0, started=0, renewals_confirmed=0, reports_confirmed=0,
                            evidence_confirmed=0, reconnects=0)  # before run() made a session


@dataclass(frozen=True, slots=True)
class SupervisorStats(SessionStats):
    """In-process counters (not a business success rate): the session's (SessionStats),
    the events dropped from the stream, and the child pool's."""

    dropped_events: int = 0
    children: PoolStats | None = None

    @classmethod
    def of(cls, session: SessionStats, *, dropped_events: int,
           children: PoolStats | None) -> SupervisorStats:
        shared = {f.name: getattr(session, f.name) for f in dataclass_fields(SessionStats)}
        return cls(**shared, dropped_events=dropped_events, children=children)


@dataclass(frozen=True, slots=True)
class SupervisorTimings:
    """Histograms the driver fills as things happen (seconds; orbit_supervisor/metrics.py
    exports them): local expiry (or the kill decision) → the killed child's reaped outcome,
    kill → the slot's fresh child ready, and the loop's lateness every lag probe."""

    kill: Histogram
    replacement: Histogram
    loop_lag: Histogram


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
        grants: bool = True,
    ) -> None:
        self.options = SupervisorOptions(
            queue_id=queue_id, workers=workers, shutdown_timeout=shutdown_timeout,
            reconnect_min_delay=reconnect_min_delay, reconnect_max_delay=reconnect_max_delay,
            max_tasks_per_child=max_tasks_per_child, max_memory_per_child=max_memory_per_child,
            child_nice=child_nice, prefetch=prefetch, grants=grants,
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
        self._timers: SessionTimers | None = None
        self._executions: Executions | None = None
        self._finished: asyncio.Future[SupervisorError | None] | None = None
        # The actions still to perform in this pass, and whether a pass is running.
        self._queued: deque[Action] = deque()
        self._performing = False
        self._pending_stop: bool | None = None  # stop() before run() reached the loop
        self._connect_attempts = 0
        self._kill_latency = Histogram()
        self._loop_lag = Histogram()

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
        return SupervisorStats.of(
            session, dropped_events=self._events.dropped,
            children=self._pool.stats() if self._pool is not None else None)

    def timings(self) -> SupervisorTimings:
        """The latency histograms (live objects: read them on the loop's thread)."""
        replacement = self._pool.replacement_latency if self._pool is not None else Histogram()
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
                agent=_agent(), prefetch=opts.prefetch, grants=opts.grants,
            ), random.random)
            self._timers = timers = SessionTimers(
                loop, self._session, pool, perform=self._apply, on_error=self._internal_error,
                loop_lag=self._loop_lag)
            self._finished = loop.create_future()
            # Every task (the connection's) is owned by this group; the shutdown below ends
            # them all before the group exits.
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                self._executions = executions = Executions(
                    loop, self._session, pool, log=self._log, perform=self._apply,
                    timers_first=timers.due_first, on_error=self._internal_error,
                    kill_latency=self._kill_latency)
                self._apply(self._session.start(loop.time()))
                timers.probe_lag()
                if self._pending_stop is not None:
                    self.stop(force=self._pending_stop)
                error = await self._finished
                # --- shutdown, in this order ---
                timers.cancel()
                if error is not None:
                    await pool.close(kill=True)  # kill what still runs
                if self._conn is not None:
                    if error is None:
                        await self._conn.close()  # drained: a clean close
                    else:
                        self._conn.abort()  # pending control requests are abandoned
                if self._connect_task is not None:
                    self._connect_task.cancel()
                await executions.end()
        finally:
            if self._timers is not None:
                self._timers.cancel()
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

    # ------------------------------------------------------------------ actions

    def _apply(self, actions: list[Action]) -> None:
        """Queue the session's actions; unless a pass is running already (this call comes
        from one of its actions), perform every queued action in order, tell the session
        about the slots being replaced, and re-arm the timer."""
        self._queued.extend(actions)
        if self._performing:
            return
        timers = self._timers
        assert timers is not None
        self._performing = True
        try:
            while True:
                while self._queued:
                    self._perform(self._queued.popleft())
                more = timers.replacing()
                if not more:
                    break
                self._queued.extend(more)
        except BaseException:
            self._queued.clear()  # the run ends with this error: nothing else is done
            raise
        finally:
            self._performing = False
        timers.rearm()

    def _perform(self, action: Action) -> None:
        executions = self._executions
        assert executions is not None
        match action:
            case SendFrame(frame=frame):
                if self._conn is not None:
                    self._conn.send(frame)
            case Execute(attempt=att):
                executions.start(att)
            case Kill(attempt=att, reason=reason, code=code, late_by=late):
                self._queued.extend(executions.kill(att, reason, code, late))
            case CancelChild(attempt=att):
                executions.cancel(att)
            case Emit(event=event):
                self._events.publish(event)
                if self._log.isEnabledFor(logging.DEBUG):
                    self._log.debug("event %s %s %s", event.type, event.attempt_id or "",
                                    event.classification or "", extra=fields(
                                        "supervisor_event", type=event.type,
                                        attempt_id=event.attempt_id, task_id=event.task_id,
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

    def _spawn(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None]:
        assert self._tasks is not None
        return self._tasks.create_task(coro)

    def _on_child_ready(self) -> None:
        """A replacement child is ready (the pool's callback): offer its slot now."""
        if self._timers is not None:
            self._timers.child_ready()

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
        assert self._timers is not None
        self._timers.due_first()
        self._apply(self._session.frame_received(frame, self._loop.time()))


def _agent() -> str:
    """``orbit-supervise/<version>``: what hello tells operators this runtime is."""
    return f"orbit-supervise/{installed_version()}"
