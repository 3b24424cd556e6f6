"""Supervisor: the child pool and one lane per queue (lane.py: a session, its connection,
its timers and executions), composed in one loop.

Each lane feeds its pure Session and performs its actions (lane.py). With several queues
the sessions share the pool's slots (credit.SlotShare): after a pass of one lane the others
look again at what they may offer. The run ends when every lane's session ended it; the
first lane that fails ends the others at once (the shutdown-timeout path).

Shutdown order (``_run``, top to bottom): every session says EndRun → the timers stop →
children are killed if the run failed (a clean drain has none left) → each connection is
closed (gracefully after a drain, aborted otherwise) and its connect task cancelled, its
executions still running get a bounded wait, then are abandoned → the pool is closed → the
event stream is closed → return or raise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields

from orbit_host.credentials import Credentials, load_credentials
from orbit_host.logs import fields
from orbit_host.tally import Histogram
from orbit_host.tls import ca_file_from, client_ssl_context
from orbit_host.version import installed_version
from orbit_wire.ids import new_id, new_secret
from orbit_wire.model import Capability

from . import defaults
from .actions import SupervisorEvent
from .connection import ServerUrls
from .credit import SlotShare
from .errors import ShutdownTimeoutError, SupervisorError, WorkerAlreadyRun
from .events import EventStream
from .lane import Lane, LaneParts
from .options import SupervisorOptions, check_queue_scope
from .pool import ChildPool, PoolStats
from .session import REPORT_MARGIN, Phase, Session, SessionConfig, SessionStats

log = logging.getLogger("orbit.supervisor")

_NOTHING_YET = SessionStats(running=0, started=0, renewals_confirmed=0, reports_confirmed=0,
                            evidence_confirmed=0, reconnects=0)  # before run() made a session


@dataclass(frozen=True, slots=True)
class SupervisorStats(SessionStats):
    """In-process counters (not a business success rate): the sessions' (SessionStats,
    summed over the queues; each queue's own in ``queues``), the events dropped from the
    stream, and the child pool's."""

    dropped_events: int = 0
    children: PoolStats | None = None
    queues: Mapping[str, SessionStats] = field(default_factory=dict)

    @classmethod
    def of(cls, sessions: Mapping[str, SessionStats], *, dropped_events: int,
           children: PoolStats | None) -> SupervisorStats:
        total = _summed(list(sessions.values()))
        shared = {f.name: getattr(total, f.name) for f in dataclass_fields(SessionStats)}
        return cls(**shared, dropped_events=dropped_events, children=children,
                   queues=dict(sessions))


# Figures of the one loop (or the measured margin) that every session samples alike: the
# largest stands for all; every other figure is summed.
_LARGEST = frozenset({"margin_ms", "loop_lag_ms", "reap_ms", "loop_lag_max_ms"})


def _summed(stats: list[SessionStats]) -> SessionStats:
    if len(stats) == 1:
        return stats[0]
    values: dict[str, object] = {}
    for f in dataclass_fields(SessionStats):
        got = [getattr(s, f.name) for s in stats]
        if f.name == "ended":
            ended: dict[str, int] = {}
            for by in got:
                for key, n in by.items():
                    ended[key] = ended.get(key, 0) + n
            values[f.name] = ended
        else:
            values[f.name] = max(got) if f.name in _LARGEST else sum(got)
    return SessionStats(**values)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class SupervisorTimings:
    """Histograms the driver fills as things happen (seconds; orbit_supervisor/metrics.py
    exports them): local expiry (or the kill decision) → the killed child's reaped outcome,
    kill → the slot's fresh child ready, and the loop's lateness every lag probe."""

    kill: Histogram
    replacement: Histogram
    loop_lag: Histogram


class Supervisor:
    """Runs handlers from ``MODULE:ATTR`` in child processes for one queue, or several.

    ``queue_id`` is one queue ID or a sequence of them: each queue gets a session of its
    own (its own instance ID and connection) over the same children (docs/supervisor.md,
    "Several queues"). ``await run()`` once; ``stop()`` drains; ``stats()`` and
    ``events()`` observe. The identities (instance ID + secret) are made here, kept across
    reconnects, never shown. ``reap_orphans=True`` (what ``orbit-supervise`` uses) makes
    this process a child subreaper that kills what a lost template's children left in other
    sessions (orphans.py); leave it off in a process that has children of its own.
    """

    def __init__(
        self,
        handlers: str,
        queue_id: str | Sequence[str],
        credentials: Credentials | str | os.PathLike[str],
        url: str | Sequence[str] | None = None,
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
        report_exception_messages: bool = False,
        child_memory_max: int | None = None,
        child_cpu_max: float | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        queue_ids = (queue_id,) if isinstance(queue_id, str) else tuple(queue_id)
        self.options = SupervisorOptions(
            queue_ids=queue_ids, workers=workers, shutdown_timeout=shutdown_timeout,
            reconnect_min_delay=reconnect_min_delay, reconnect_max_delay=reconnect_max_delay,
            max_tasks_per_child=max_tasks_per_child, max_memory_per_child=max_memory_per_child,
            child_nice=child_nice, prefetch=prefetch, grants=grants,
            report_exception_messages=report_exception_messages,
            child_memory_max=child_memory_max, child_cpu_max=child_cpu_max,
            labels=tuple(sorted((labels or {}).items())),
        )
        if not isinstance(credentials, Credentials):
            credentials = load_credentials(credentials)
        check_queue_scope(queue_ids, credentials.credential_id, credentials.queues)
        self._credentials = credentials
        # --url, repeated: the servers in failover order; else the credentials file's.
        given = [url] if isinstance(url, str) else list(url or ())
        self.urls = ServerUrls(given or [credentials.url])
        # --ca-file / ORBIT_CA_FILE: the trust for a wss:// server's certificate.
        ca = ca_file_from(ca_file)
        self._ssl = client_ssl_context(ca) if ca is not None and any(
            u.startswith("wss:") for u in self.urls.all) else None
        self.handlers = handlers
        # One instance per queue: the server binds an instance to one queue.
        now_ms = int(time.time() * 1000)
        self.instance_ids = {q: new_id(now_ms) for q in queue_ids}
        self.instance_id = self.instance_ids[queue_ids[0]]
        self._instance_secrets = {q: new_secret() for q in queue_ids}
        self._log = logger or log
        self._reap_orphans = reap_orphans
        self._capture = capture_child_output
        self._events = EventStream()
        self._ran = False
        self._lanes: list[Lane] = []
        self._pool: ChildPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending_stop: bool | None = None  # stop() before run() reached the lanes
        self._nudging = False
        self._kill_latency = Histogram()
        self._loop_lag = Histogram()

    def __repr__(self) -> str:
        return f"Supervisor(instance_id={self.instance_id!r}, url={self.url!r})"

    @property
    def url(self) -> str:
        """The worker URL this supervisor connects to now (the next after a failed connect,
        when several were given)."""
        return self.urls.current

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
        if not self._lanes:
            self._pending_stop = force or bool(self._pending_stop)
            return
        for lane in self._lanes:
            lane.stop(force=force)

    def running_by_queue(self) -> dict[str, int]:
        """Handlers running (or being killed) now, by queue."""
        return {lane.queue_id: lane.session.executing for lane in self._lanes}

    def running_attempts(self) -> list[tuple[str, str]]:
        """(task ID, attempt ID) of every handler running (or being killed) now."""
        return [(att.task_id, att.attempt_id) for lane in self._lanes
                for att in lane.session.attempts.values()
                if att.phase in (Phase.RUNNING, Phase.KILLING)]

    def stats(self) -> SupervisorStats:
        sessions = {lane.queue_id: lane.session.stats() for lane in self._lanes} or {
            self.options.queue_id: _NOTHING_YET}
        return SupervisorStats.of(
            sessions, dropped_events=self._events.dropped,
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
        """Whether a connection to the server is open now (every queue's, with several)."""
        return bool(self._lanes) and all(lane.conn is not None for lane in self._lanes)

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
                         child_nice=opts.child_nice, capture_output=self._capture,
                         exception_messages=opts.report_exception_messages,
                         child_memory_max=opts.child_memory_max,
                         child_cpu_max=opts.child_cpu_max)
        self._pool = pool
        errors: list[SupervisorError | None] = []
        try:
            capabilities = await pool.start()  # HandlerSpecError: before any connection
            self._log.info("handlers ready: %s; %d children; queue%s %s",
                           ", ".join(map(str, capabilities)), opts.workers,
                           "s" if len(opts.queue_ids) > 1 else "", ", ".join(opts.queue_ids),
                           extra=fields(
                               "handlers_ready", instance_id=self.instance_id,
                               queue_id=opts.queue_id, queue_ids=list(opts.queue_ids),
                               workers=opts.workers,
                               capabilities=[str(c) for c in capabilities]))
            # Every task (connections, executions) is owned by this group; the shutdown
            # below ends them all before the group exits.
            async with asyncio.TaskGroup() as tasks:
                parts = LaneParts(loop, pool, self._events, self.urls, self._ssl,
                                  tasks.create_task, self._kill_latency, self._after_pass)
                self._lanes = self._make_lanes(parts, capabilities)
                for lane in self._lanes:
                    lane.begin()
                if self._pending_stop is not None:
                    self.stop(force=self._pending_stop)
                errors = await self._ended()
                # --- shutdown, in this order ---
                for lane in self._lanes:
                    lane.timers.cancel()
                if any(e is not None for e in errors):
                    await pool.close(kill=True)  # kill what still runs
                for lane, error in zip(self._lanes, errors, strict=True):
                    await lane.close(error)
        finally:
            for lane in self._lanes:
                lane.timers.cancel()
            await pool.close(kill=True)
        error = _first_error(errors)
        if error is not None:
            self._log.error("supervisor stopped: %s", error.message, extra=fields(
                "supervisor_stopped", instance_id=self.instance_id, unconfirmed=error.unconfirmed,
                running=error.running))
            raise error
        stats = self.stats()
        confirmed = stats.reports_confirmed + stats.evidence_confirmed
        self._log.info("drained: started=%d confirmed=%d late_kills=%d loop_lag_max_ms=%.1f "
                       "margin_ms=%.1f", stats.started, confirmed, stats.late_kills,
                       stats.loop_lag_max_ms, stats.margin_ms, extra=fields(
                           "drained", instance_id=self.instance_id, started=stats.started,
                           confirmed=confirmed, late_kills=stats.late_kills,
                           loop_lag_max_ms=round(stats.loop_lag_max_ms, 1),
                           margin_ms=round(stats.margin_ms, 1)))

    def _make_lanes(self, parts: LaneParts, capabilities: tuple[Capability, ...]
                    ) -> list[Lane]:
        opts, creds = self.options, self._credentials
        several = len(opts.queue_ids) > 1
        share = SlotShare(opts.workers + opts.prefetch) if several else None
        lanes = []
        for index, queue_id in enumerate(opts.queue_ids):
            session = Session(SessionConfig(
                credential_id=creds.credential_id, credential_secret=creds.secret,
                instance_id=self.instance_ids[queue_id],
                instance_secret=self._instance_secrets[queue_id],
                queue_id=queue_id, capabilities=capabilities, capacity=opts.workers,
                policies=parts.pool.policies, shutdown_timeout=opts.shutdown_timeout,
                reconnect_min_delay=opts.reconnect_min_delay,
                reconnect_max_delay=opts.reconnect_max_delay,
                report_margin=REPORT_MARGIN, cpus=len(os.sched_getaffinity(0)),
                agent=_agent(), prefetch=opts.prefetch, grants=opts.grants, labels=opts.labels,
            ), random.random, share=share)
            # With several queues each lane's records name its queue (logger and field).
            lane_log = _queue_logger(self._log, queue_id) if several else self._log
            # The first lane's lag probe fills the histogram (one loop, sampled once).
            loop_lag = self._loop_lag if index == 0 else Histogram()
            lanes.append(Lane(session, parts, lane_log, loop_lag))
        return lanes

    async def _ended(self) -> list[SupervisorError | None]:
        """Wait until every lane's session ended the run; the first that ends with an error
        takes the others down the shutdown-timeout path at once (their children are killed
        and reported). Returns each lane's end, in order."""
        pending = {lane.finished for lane in self._lanes}
        forced = False
        while pending:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            failed = any(lane.finished.done() and lane.finished.result() is not None
                         for lane in self._lanes)
            if failed and not forced and pending:
                forced = True
                for lane in self._lanes:
                    if not lane.finished.done():
                        lane.stop(force=True)
        return [lane.finished.result() for lane in self._lanes]

    def _after_pass(self, lane: Lane) -> None:
        """A lane performed a pass: with several queues the others look again at what the
        shared slots let them offer (not again from inside one of their own passes)."""
        if self._nudging or len(self._lanes) < 2:
            return
        self._nudging = True
        try:
            for other in self._lanes:
                if other is not lane:
                    other.nudge()
        finally:
            self._nudging = False

    def _on_child_ready(self) -> None:
        """A replacement child is ready (the pool's callback): offer its slot now."""
        for lane in self._lanes:
            lane.timers.child_ready()


def _queue_logger(base: logging.Logger, queue_id: str) -> logging.Logger:
    """``base``'s child for one queue: its name ends with the queue ID, and every record
    carries ``queue_id`` (a field of the JSON log)."""
    logger = base.getChild(queue_id)
    if not any(isinstance(f, _QueueField) for f in logger.filters):
        logger.addFilter(_QueueField(queue_id))
    return logger


class _QueueField(logging.Filter):
    def __init__(self, queue_id: str) -> None:
        super().__init__()
        self.queue_id = queue_id

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "queue_id", None) is None:
            record.queue_id = self.queue_id
        return True


def _first_error(errors: list[SupervisorError | None]) -> SupervisorError | None:
    """The run's error: the first lane's that is not the shutdown timeout (a fatal session
    error, a bug), else the shutdown timeout with every lane's counts together."""
    failed = [e for e in errors if e is not None]
    if not failed:
        return None
    for error in failed:
        if not isinstance(error, ShutdownTimeoutError):
            return error
    if len(failed) == 1:
        return failed[0]
    first = failed[0]
    assert isinstance(first, ShutdownTimeoutError)
    return ShutdownTimeoutError.of(first.why, unconfirmed=sum(e.unconfirmed for e in failed),
                                   running=sum(e.running for e in failed))


def _agent() -> str:
    """``orbit-supervise/<version>``: what hello tells operators this runtime is."""
    return f"orbit-supervise/{installed_version()}"
