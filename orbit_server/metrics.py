"""``GET /metrics``: the server's Prometheus metrics (docs/observability.md lists them).

Two kinds of series:

* **this replica's**, counted in process as things happen: what its transactions did (the
  ``Counted`` facts of each committed transaction, handed over with its ``Effects``), its
  HTTP requests (``RequestMetrics``), its store thread's transaction times, its worker
  connections and their credit. The hot paths pay one dict update or one bisect
  (orbit_host/tally.py); the collector turns the tallies into metric families at scrape time.
* **the database's**, the same for every replica: tasks by queue and state. They are counted
  at most once per ``metrics_refresh_ms`` and only when scraped (``TaskCounts``), on a thread
  of their own, so the count (an index scan, ~160 ms for a million tasks on SQLite) never
  holds up the store thread, and a scrape never waits for more than ``_REFRESH_WAIT_S``.

``prometheus_client`` is imported only here, and this module only when metrics are on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Scope

from orbit_host.exposition import counter, histogram
from orbit_host.tally import LONG_BOUNDS, Bounded, Counts, LabeledHistograms
from orbit_wire.errors import ErrorCode, OrbitError

from .services.effects import Counted
from .store.listing import task_counts_by_queue_state
from .store.queues import queue_names

if TYPE_CHECKING:
    from .dispatcher import Dispatcher
    from .store_thread import StoreThread
    from .traffic import Traffic
    from .wal_sync import CommitCounter, WalSync

log = logging.getLogger("orbit.metrics")

# A scrape waits this long for a database count in progress, then answers with the last one.
_REFRESH_WAIT_S = 2.0
UNMATCHED = "unmatched"  # the route label of a request no route matched (a 404)
# Codes and kill reasons come from handlers and workers: the first this many distinct ones
# are labels of their own, later ones count as OTHER.
MAX_CODES = 256
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


class ServerTally:
    """This replica's counters, written on the event loop's thread."""

    def __init__(self) -> None:
        self.submitted = Counts()  # (queue,)
        self.start_wait = LabeledHistograms(LONG_BOUNDS)  # (queue, attempt)
        self.ended = Counts()  # (queue, outcome, code)
        self.decisions = Counts()  # (queue, decision)
        self.kills = Counts()  # (queue, reason)
        self.evidence = Counts()  # (queue, reason)
        self.expired = Counts()  # (queue,)
        self.reviews = Counts()  # (queue, action)
        self.retries = Counts()  # (queue,)
        self.timed_out = Counts()  # (queue, code)
        self.grants = Counts()  # (queue,)
        self.grants_given_back = Counts()  # (queue, rule)
        self.grants_expired_unconfirmed = Counts()  # (queue,)
        self.progress = Counts()  # (queue, result)
        self.requests = Counts()  # (method, route, status)
        self.request_time = LabeledHistograms(LONG_BOUNDS)  # (method, route)
        self._code = Bounded(MAX_CODES)
        self._reason = Bounded(MAX_CODES)

    def count(self, counted: Counted) -> None:
        """Count what one committed transaction did."""
        for queue, n in counted.submitted:
            self.submitted.add((queue,), n)
        for queue, first, wait_ms in counted.started:
            self.start_wait.observe((queue, "first" if first else "retry"), wait_ms / 1000)
        for queue, outcome, code, decision in counted.ended:
            self.ended.add((queue, outcome, self._code(code)))
            self.decisions.add((queue, decision))
        for queue, reason in counted.kills:
            self.kills.add((queue, self._reason(reason)))
        for queue, reason in counted.evidence:
            self.evidence.add((queue, reason))
        for queue in counted.expired:
            self.expired.add((queue,))
        for queue, action in counted.reviews:
            self.reviews.add((queue, action))
        for queue in counted.retries:
            self.retries.add((queue,))
        for queue, code in counted.timed_out:
            self.timed_out.add((queue, code))
        for queue in counted.grants:
            self.grants.add((queue,))
        for queue, rule in counted.grants_given_back:
            self.grants_given_back.add((queue, rule))
        for queue in counted.grants_expired_unconfirmed:
            self.grants_expired_unconfirmed.add((queue,))
        for queue, result in counted.progress:
            self.progress.add((queue, result))


class RequestMetrics:
    """Each finished HTTP request (an ``ObservedRequests`` observer) by method, route template
    and status, and its duration. The template comes from the route that matched
    (``/v1/tasks/{task_id}``), never the raw path, so an ID never becomes a label value."""

    def __init__(self, tally: ServerTally, templates: dict[Any, str]) -> None:
        self.tally = tally
        self.templates = templates  # route endpoint -> its path template

    def __call__(self, scope: Scope, status: int, seconds: float) -> None:
        # The router wrote the matched route's endpoint into this same scope.
        route = self.templates.get(scope.get("endpoint"), UNMATCHED)
        method = scope["method"]
        if method not in _METHODS:  # another HTTP parser may pass any token on
            method = "OTHER"
        self.tally.requests.add((method, route, str(status)))
        self.tally.request_time.observe((method, route), seconds)


def route_templates(routes: Iterable[Any]) -> dict[Any, str]:
    """Each route's endpoint -> its path template."""
    return {route.endpoint: route.path for route in routes if hasattr(route, "endpoint")}


class TaskCounts:
    """Tasks by queue and state, and the queues' names, read from the database at most once
    per ``refresh_s``, when a scrape asks (``fresh``), on one thread of their own."""

    def __init__(self, engine: Engine, refresh_s: float) -> None:
        self._engine = engine
        self._refresh_s = refresh_s
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="orbit-metrics")
        self._running: asyncio.Future[None] | None = None
        self.counts: dict[tuple[str, str], int] = {}
        self.names: dict[str, str] = {}
        self.read_at: float | None = None  # time.time() of the last successful count
        self._read_mono = -float("inf")
        self.failures = 0

    async def fresh(self) -> None:
        """Count again if the last count is older than the refresh period; wait for it at
        most ``_REFRESH_WAIT_S`` (the scrape then shows the previous count and its age)."""
        if self._running is None:
            if time.monotonic() - self._read_mono < self._refresh_s:
                return
            loop = asyncio.get_running_loop()
            # A future of the pool this object owns (closed with it), kept until it ends.
            self._running = loop.run_in_executor(self._pool, self._read)
            self._running.add_done_callback(self._done)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._running), _REFRESH_WAIT_S)

    def _done(self, fut: asyncio.Future[None]) -> None:
        self._running = None
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self.failures += 1
            log.warning("counting tasks for the metrics failed: %s", type(exc).__name__)

    def _read(self) -> None:
        # A read-only transaction on a pooled connection of this thread: SQLite's WAL and
        # MySQL's MVCC let it run beside the store thread's writes.
        with self._engine.connect() as conn:
            conn.execution_options(orbit_read_only=True)
            with conn.begin():
                counts = task_counts_by_queue_state(conn)
                names = queue_names(conn)
        self.counts, self.names = counts, names
        self.read_at = time.time()
        self._read_mono = time.monotonic()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class ServerCollector(Collector):
    """Everything above as metric families, read at scrape time."""

    def __init__(self, tally: ServerTally, counts: TaskCounts, store: StoreThread,
                 dispatcher: Dispatcher, replica: str, version: str, io: ServerIO) -> None:
        self._tally = tally
        self._counts = counts
        self._store = store
        self._dispatcher = dispatcher
        self._replica = replica
        self._version = version
        self._io = io

    def collect(self) -> Iterator[Metric]:
        t = self._tally
        info = GaugeMetricFamily("orbit_server_info", "This server replica (value 1).",
                                 labels=("version", "replica"))
        info.add_metric((self._version, self._replica), 1)
        yield info
        # --- from the database (the same on every replica)
        c = self._counts
        tasks = GaugeMetricFamily("orbit_tasks", "Tasks by queue and state (the database, "
                                  "counted at most once per refresh period).",
                                  labels=("queue", "state"))
        for (queue, state), n in sorted(c.counts.items()):
            tasks.add_metric((queue, state), n)
        yield tasks
        names = GaugeMetricFamily("orbit_queue_info", "Each named queue (value 1).",
                                  labels=("queue", "name"))
        for queue, name in sorted(c.names.items()):
            names.add_metric((queue, name), 1)
        yield names
        if c.read_at is not None:
            yield GaugeMetricFamily("orbit_tasks_counted_timestamp_seconds",
                                    "When orbit_tasks was counted (Unix time).", value=c.read_at)
        yield CounterMetricFamily("orbit_tasks_count_failures_total",
                                  "Counts of orbit_tasks that failed (the last one is shown).",
                                  value=c.failures)
        # --- this replica's
        yield counter("orbit_tasks_submitted_total", "Tasks created by submits and schedules.",
                       ("queue",), t.submitted)
        yield histogram("orbit_submit_to_start_seconds",
                         "From a task's submit (or requested start; for a retry, the end of its "
                         "backoff) to its attempt's start.", ("queue", "attempt"),
                         t.start_wait.snapshot())
        yield counter("orbit_attempts_ended_total",
                       "Attempts closed, by outcome and code (reports and lease expiries).",
                       ("queue", "outcome", "code"), t.ended)
        yield counter("orbit_attempt_decisions_total",
                       "What the retry policy decided for each closed attempt.",
                       ("queue", "decision"), t.decisions)
        yield counter("orbit_kills_total", "Child kills the workers reported, by reason "
                       "(once per attempt).", ("queue", "reason"), t.kills)
        yield counter("orbit_reports_evidence_total",
                       "Finish reports stored as evidence only, by reason.",
                       ("queue", "reason"), t.evidence)
        yield counter("orbit_lease_expiries_total",
                       "Running attempts the reaper closed because their lease expired.",
                       ("queue",), t.expired)
        yield counter("orbit_reviews_total", "NEEDS_REVIEW tasks an operator resolved.",
                       ("queue", "action"), t.reviews)
        yield counter("orbit_retries_total", "FAILED or CANCELLED tasks an operator ran again.",
                       ("queue",), t.retries)
        yield counter("orbit_tasks_timed_out_total",
                       "Waiting tasks failed at their deadline or schedule_to_start_ms.",
                       ("queue", "code"), t.timed_out)
        yield counter("orbit_grants_total", "Leases granted with the dispatch (attempts "
                       "started in the reserving transaction).", ("queue",), t.grants)
        yield counter("orbit_grants_given_back_total",
                       "Granted attempts released unspent: declined by the worker, or not "
                       "listed by its resume on a newer connection.", ("queue", "rule"),
                       t.grants_given_back)
        yield counter("orbit_grants_expired_unconfirmed_total",
                       "Granted attempts whose lease the reaper ended before the worker "
                       "confirmed the grant (its process may have died with it unread).",
                       ("queue",), t.grants_expired_unconfirmed)
        yield counter("orbit_progress_reports_total",
                       "Handler progress reports received on a renew or finish: result "
                       "\"stored\", or the value rule code their refused details broke.",
                       ("queue", "result"), t.progress)
        yield counter("orbit_http_requests_total", "HTTP requests by route and status.",
                       ("method", "route", "status"), t.requests)
        yield histogram("orbit_http_request_duration_seconds",
                         "HTTP request durations (a long poll included).",
                         ("method", "route"), t.request_time.snapshot())
        yield from self._store_families()
        yield from self._worker_families()

    def _store_families(self) -> Iterator[Metric]:
        timings = self._store.timings
        if timings is not None:
            yield histogram(
                "orbit_store_transaction_seconds",
                "Time each store call held the store thread (one transaction, retries "
                "included), by lane.", ("lane",),
                {(lane, ): buckets.snapshot() for lane, buckets in timings.items()})
        queued = GaugeMetricFamily("orbit_store_queued_calls",
                                   "Store calls waiting for the store thread, by lane.",
                                   labels=("lane",))
        for lane, n in self._store.queued().items():
            queued.add_metric((lane,), n)
        yield queued
        io = self._io
        yield CounterMetricFamily("orbit_store_commits_total",
                                  "Write transactions committed (a group commit once).",
                                  value=io.commits.count)
        if io.wal is not None:
            yield CounterMetricFamily(
                "orbit_store_wal_syncs_total", "fdatasync calls of the WAL sync thread "
                "(SQLite, docs/deployment.md Durability).", value=io.wal.syncs)
        frames = CounterMetricFamily("orbit_frames_total", "WebSocket messages by channel "
                                     "(worker, producer) and direction (in, out).",
                                     labels=("channel", "direction"))
        traffic = io.traffic
        for labels, n in ((("worker", "in"), traffic.worker_in),
                          (("worker", "out"), traffic.worker_out),
                          (("producer", "in"), traffic.producer_in),
                          (("producer", "out"), traffic.producer_out)):
            frames.add_metric(labels, n)
        yield frames

    def _worker_families(self) -> Iterator[Metric]:
        sessions: dict[str, list[int]] = {}
        for s in self._dispatcher.sessions():
            if not s.closed:
                row = sessions.setdefault(s.queue_id, [0, 0, 0])
                row[0] += 1
                row[1] += max(0, s.credits)
                row[2] += s.capacity
        families = (
            GaugeMetricFamily("orbit_worker_connections",
                              "Worker connections to this replica.", labels=("queue",)),
            GaugeMetricFamily("orbit_worker_credit",
                              "Credit (free slots offered) of those connections.",
                              labels=("queue",)),
            GaugeMetricFamily("orbit_worker_slots",
                              "Slots (capacity) of those connections.", labels=("queue",)),
        )
        for queue, row in sorted(sessions.items()):
            for family, value in zip(families, row, strict=True):
                family.add_metric((queue,), value)
        yield from families


class MetricsEndpoint:
    """``GET /metrics``, open or behind a bearer token (``metrics_token``)."""

    def __init__(self, registry: CollectorRegistry, counts: TaskCounts,
                 token: str | None) -> None:
        self._registry = registry
        self._counts = counts
        self._token = token.encode() if token else None

    async def serve(self, request: Request) -> Response:
        if self._token is not None and not self._authorized(request):
            error = OrbitError(ErrorCode.UNAUTHENTICATED,
                               "GET /metrics needs Authorization: Bearer <metrics token>")
            return Response(_error_json(error), status_code=401,
                            media_type="application/json",
                            headers={"WWW-Authenticate": "Bearer"})
        await self._counts.fresh()
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(self._registry), media_type=None,
                        headers={"Content-Type": content_type})

    def _authorized(self, request: Request) -> bool:
        assert self._token is not None
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        # Constant time: the comparison tells nothing of how much of a guess was right.
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                                   self._token)


def _error_json(error: OrbitError) -> bytes:
    import orjson

    return orjson.dumps({"error": error.to_dict()})


@dataclass(frozen=True, slots=True)
class ServerIO:
    """What the server's commits, WAL syncs and sockets counted (read at scrape time)."""

    commits: CommitCounter
    wal: WalSync | None
    traffic: Traffic


class ServerMetrics:
    """What ``OrbitServer`` composes when metrics are on: the tally it counts into, the
    route and the collector (the app adds ``RequestMetrics`` over its routes)."""

    def __init__(self, engine: Engine, store: StoreThread, dispatcher: Dispatcher,
                 replica: str, version: str, refresh_ms: int, token: str | None,
                 io: ServerIO) -> None:
        self.tally = ServerTally()
        self.counts = TaskCounts(engine, refresh_ms / 1000)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ServerCollector(self.tally, self.counts, store, dispatcher,
                                               replica, version, io))
        self.registry.register(ProcessCollector(registry=None))
        self.endpoint = MetricsEndpoint(self.registry, self.counts, token)

    def routes(self) -> list[Route]:
        return [Route("/metrics", self.endpoint.serve, methods=["GET"])]

    def close(self) -> None:
        self.counts.close()


__all__ = ["MetricsEndpoint", "RequestMetrics", "ServerIO", "ServerMetrics", "ServerTally",
           "TaskCounts"]
