"""Composition of the Orbit server: config → engine → store thread → Services → adapters.

``OrbitServer`` owns every long-lived part (store thread, dispatcher, reaper, receipt
prune and schedule loops) and the Starlette app; ``serve(config)`` runs it under uvicorn until
SIGTERM/SIGINT. Shutdown order: uvicorn stops accepting and closes connections, then the
lifespan stops the loops and the dispatcher and finally drains and closes the store thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware

from orbit_host import heap
from orbit_host.logs import fields
from orbit_host.task_owner import TaskOwner
from orbit_host.version import installed_version
from orbit_wire.limits import MAX_FRAME_BYTES

from .access_log import ObservedRequests, RequestObserver, access_log_enabled, log_request
from .config import ServerConfig
from .dashboard import dashboard_routes
from .dispatcher import Dispatcher
from .domain.listing import WarnOnce
from .http_api import http_routes
from .http_flow import flow_routes
from .http_hot import HotRoutes
from .http_limits import limit_routes
from .http_plumbing import http_exception_handlers
from .http_schedules import schedule_routes
from .http_workflows import workflow_routes
from .parts import ServerParts
from .producer_ws import ProducerChannels, producer_routes
from .ratelimit import FailedLogins, TokenBuckets
from .services import Effects, Services
from .services.pushes import PUSH_WINDOW_MS, Push, PushKind
from .services.retention import TASK_BATCH
from .store import workflow_rows
from .store.db import create_engine_for, is_sqlite, migrate, sqlite_file
from .store.retry import faults_logged
from .store_thread import StoreThread
from .traffic import Traffic
from .waiters import TaskWaiters
from .wal_sync import Durability, WalSync
from .ws_endpoint import ws_routes

if TYPE_CHECKING:
    import uvicorn

    from .metrics import ServerMetrics

log = logging.getLogger("orbit.server")

# The dispatcher also re-checks sessions that still hold credit this often, so tasks made
# ready by another replica (or a missed hint) are dispatched without a local signal. A SQLite
# file has one server, which hints every change itself: there the poll is only a safety net.
DISPATCH_POLL_S = 0.5
DISPATCH_POLL_SQLITE_S = 2.0
# The reaper's period unless --reaper-interval-ms sets it (ServerConfig.reaper_interval_ms).
# On SQLite every write of this server reports when something it made falls due, and each
# pass finds the next due instant in the database, so the period is a safety net there.
REAPER_INTERVAL_MS = 100
REAPER_INTERVAL_SQLITE_MS = 1_000
# Receipts past the retention are deleted at start and then this often, a batch per
# transaction until none is left (at most RECEIPT_PRUNE_MAX_BATCHES per pass).
RECEIPT_PRUNE_PERIOD_S = 60.0
RECEIPT_PRUNE_MAX_BATCHES = 1_000
# The schedule loop looks at least this often (a schedule made or resumed through another
# replica is seen within it), and at the earliest next tick it knows of.
SCHEDULE_POLL_MS = 1_000
_NEVER = 2**63
REVOKED_MESSAGE = "the worker's credential was revoked"
# PENDING work no live worker offers to serve is looked for this often, and each (queue,
# capability) is logged at warning level at most once per UNSERVED_WARN_INTERVAL_S.
UNSERVED_CHECK_S = 30.0
UNSERVED_WARN_INTERVAL_S = 300.0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class OrbitServer:
    """Every long-lived part of one server process. Build, then serve ``self.asgi`` (ASGI:
    the hot routes, then the Starlette app ``self.app``)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.clock = wall_clock_ms
        # A SQLite file's WAL is synced by a thread of its own (orbit_server/wal_sync.py).
        db_file = sqlite_file(config.db_url)
        self.engine = create_engine_for(
            config.db_url, synchronous="FULL" if db_file is None else "NORMAL")
        # How instance rows and logs name this server among the replicas of one database.
        self.replica = f"{socket.gethostname()}:{config.port or os.getpid()}"
        self.services = Services(self.engine, config, wall_clock_ms, random.Random(),
                                 self.replica)
        # Calls queued while one commits share the next commit (group commit).
        self.wal = (None if db_file is None else
                    WalSync(db_file, self.services.tx.commits, Durability(config.durability)))
        self.store = StoreThread(self.services.tx.run_group, config.group_commit_max,
                                 self.services.tx.pinned, timed=config.metrics, wal=self.wal,
                                 commits=None if self.wal is None else self.services.tx.commits)
        self.waiters = TaskWaiters()
        self.traffic = Traffic()
        self.dispatcher = Dispatcher(self.store, self.services.workers, self.act_on)
        self._reaper_wake = asyncio.Event()
        self._next_due_ms: int | None = None
        # Wall-clock ms of the reaper's next planned pass; "never" while a pass runs, so
        # every due instant reported meanwhile is kept for the next sleep.
        self._reaper_at_ms = _NEVER
        self._tasks = TaskOwner(log)  # the background loops, stopped at shutdown
        parts = ServerParts(config=config, clock=self.clock, store=self.store,
                            services=self.services, dispatcher=self.dispatcher,
                            waiters=self.waiters,
                            logins=FailedLogins(config.auth_failures_per_s,
                                                config.auth_failures_burst),
                            submits=TokenBuckets(config.submits_per_s, config.submits_burst),
                            act_on=self.act_on, traffic=self.traffic)
        self.producers = ProducerChannels()  # what a revocation closes, besides workers
        routes = [*http_routes(parts), *schedule_routes(parts), *flow_routes(parts),
                  *limit_routes(parts), *workflow_routes(parts), *ws_routes(parts),
                  *producer_routes(parts, self.producers), *dashboard_routes()]
        observers: list[RequestObserver] = [log_request] if access_log_enabled() else []
        self.metrics: ServerMetrics | None = None
        if config.metrics:  # prometheus_client is loaded only then
            from .metrics import RequestMetrics, ServerIO, ServerMetrics, route_templates

            self.metrics = ServerMetrics(self.engine, self.store, self.dispatcher, self.replica,
                                         _version(), config.metrics_refresh_ms,
                                         config.metrics_token, ServerIO(
                                             self.services.tx.commits, self.wal, self.traffic))
            routes += self.metrics.routes()
            observers.append(RequestMetrics(self.metrics.tally, route_templates(routes)))
        self.app = Starlette(routes=routes,
                             middleware=[Middleware(ObservedRequests, observers)],
                             exception_handlers=http_exception_handlers(),
                             lifespan=self._lifespan)
        # What uvicorn serves: the hot routes without the app's middleware, then the app.
        self.asgi = HotRoutes(self.app, observers)

    # -------------------------------------------------------------- effects of a transaction

    def act_on(self, effects: Effects) -> None:
        """Act on what a transaction changed: wake long polls, dispatch, push cancels;
        count what it did (metrics)."""
        if effects.counts is not None and self.metrics is not None:
            self.metrics.tally.count(effects.counts)
        if effects.terminal_tasks:
            self.waiters.wake(effects.terminal_tasks, effects.terminal_views)
        if effects.ready_queues:
            self.dispatcher.queues_ready(effects.ready_queues)
        if effects.counts is not None and effects.counts.ended:
            # An ended attempt freed a slot of its keys: tasks a limit held may start now.
            freed = self.services.tx.limits.limited(q for q, *_ in effects.counts.ended)
            if freed:
                self.dispatcher.queues_ready(freed)
        for instance_id, attempt_id, epoch in effects.cancels:
            self.dispatcher.push_cancel(instance_id, attempt_id, epoch)
        for credential_id in effects.revoked_credentials:
            self.dispatcher.close_credential(credential_id, REVOKED_MESSAGE)
            self.producers.close_credential(credential_id, REVOKED_MESSAGE)
        due = effects.next_due_ms
        if due is not None and due < self._reaper_at_ms:
            # Only an instant earlier than the reaper's next planned pass is worth a wake-up.
            self._next_due_ms = due if self._next_due_ms is None else min(due, self._next_due_ms)
            self._reaper_wake.set()

    # -------------------------------------------------------------- background loops

    async def _reaper_loop(self) -> None:
        """Run ``Reaper.reap()`` every reaper interval, or earlier at the next known due time
        (lease expiries, deadlines and backoffs the use cases reported in ``next_due_ms``).
        The reap's own effects make due retries dispatchable (``ready_queues``)."""
        interval_ms = self.config.reaper_interval_ms or (
            REAPER_INTERVAL_SQLITE_MS if is_sqlite(self.config.db_url) else REAPER_INTERVAL_MS)
        while True:
            # the next pass runs anyway
            with faults_logged(log, "reaper pass failed", event="reaper_failed"):
                effects = await self.store.call(self.services.reaper.reap)
                self.act_on(effects)
            planned = wall_clock_ms() + interval_ms
            while True:  # sleep until the planned pass or an earlier due instant
                target = planned
                if self._next_due_ms is not None:
                    target = min(target, self._next_due_ms)
                self._reaper_at_ms = target
                delay_ms = target - wall_clock_ms()
                if delay_ms <= 0:
                    break
                self._reaper_wake.clear()
                try:
                    await asyncio.wait_for(self._reaper_wake.wait(), delay_ms / 1000)
                except TimeoutError:
                    break
            self._next_due_ms = None
            self._reaper_at_ms = _NEVER

    async def _receipt_prune_loop(self) -> None:
        """Delete receipts past the retention, then finished tasks past the task retention
        and long-unseen instances. Each batch is its own call on the store thread's normal
        lane, so worker requests and other calls take turns with it."""
        retention = self.services.retention
        while True:
            # the next pass runs anyway
            with faults_logged(log, "receipt prune failed", event="receipt_prune_failed"):
                for _ in range(RECEIPT_PRUNE_MAX_BATCHES):
                    deleted = await self.store.call(self.services.reaper.prune_receipts)
                    if deleted < self.config.reap_batch:
                        break
                await self.store.call(self.services.pushes.prune)
            with faults_logged(log, "task retention failed", event="retention_failed"):
                tasks = 0
                for _ in range(RECEIPT_PRUNE_MAX_BATCHES):
                    deleted = await self.store.call(retention.prune_tasks)
                    tasks += deleted
                    if deleted < TASK_BATCH:
                        break
                instances = await self.store.call(retention.prune_instances)
                holds = await self.store.call(retention.prune_holds)
                if tasks or instances or holds:
                    log.info("retention: deleted %d finished task(s) (with their attempts, "
                             "evidence and audit), %d unseen worker instance(s) and %d "
                             "stale limit hold(s)", tasks, instances, holds, extra=fields(
                                 "retention_deleted", tasks=tasks, instances=instances,
                                 holds=holds))
            await asyncio.sleep(RECEIPT_PRUNE_PERIOD_S)

    async def _push_poll_loop(self) -> None:
        """Act on the cancels, revocations and declared policies other replicas wrote
        (services/pushes.py),
        every ``push_poll_ms`` (within a heartbeat). One SQLite file has one server, which
        acts on its own at once: there is nothing to poll."""
        if is_sqlite(self.config.db_url):
            return
        seen: dict[int, int] = {}  # push id -> created_at_ms, for the poll window
        period = self.config.push_poll_ms / 1000
        started = wall_clock_ms()
        while True:
            await asyncio.sleep(period)
            # the next poll reads again
            with faults_logged(log, "reading pushes failed", event="push_poll_failed"):
                for push in await self.store.call(self.services.pushes.recent):
                    if push.id in seen or push.created_at_ms < started - PUSH_WINDOW_MS:
                        continue
                    seen[push.id] = push.created_at_ms
                    await self._act_on_push(push)
                horizon = wall_clock_ms() - 2 * PUSH_WINDOW_MS
                for push_id in [i for i, at in seen.items() if at < horizon]:
                    del seen[push_id]

    async def _act_on_push(self, push: Push) -> None:
        if push.kind is PushKind.CANCEL and push.instance_id and push.attempt_id:
            self.dispatcher.push_cancel(push.instance_id, push.attempt_id, push.epoch or 0)
        elif push.kind is PushKind.POLICIES:
            await self.store.call(self.services.policies.forget)
        elif push.credential_id is not None:
            await self.store.call(self.services.admin.forget, push.credential_id)
            if push.kind is PushKind.REVOKE:
                self.dispatcher.close_credential(push.credential_id, REVOKED_MESSAGE)
                self.producers.close_credential(push.credential_id, REVOKED_MESSAGE)

    async def _schedule_loop(self) -> None:
        """Fire due schedules (services.schedules.fire_due: one transaction, exactly once per
        tick across replicas), then sleep until the next known tick or the poll period."""
        while True:
            next_ms: int | None = None
            # the next pass runs anyway
            with faults_logged(log, "schedule pass failed", event="schedule_failed"):
                effects, next_ms = await self.store.call(self.services.schedules.fire_due)
                self.act_on(effects)
            wait_ms = SCHEDULE_POLL_MS
            left = None if next_ms is None else next_ms - wall_clock_ms()
            if left is not None and left > 0:
                wait_ms = max(10, min(wait_ms, left))
            # Still due after a pass (more than a batch, or a schedule this server cannot
            # read): the next pass comes after the poll period, never in a busy loop.
            await asyncio.sleep(wait_ms / 1000)
    async def _presence_loop(self) -> None:
        """Every heartbeat interval, record the live connections of this replica (seen now,
        their credit, their last frame) so every replica lists them (GET /v1/workers)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.heartbeat_ms / 1000)
            # the next write runs anyway
            with faults_logged(log, "presence write failed", event="presence_failed"):
                rows = self.dispatcher.presence(wall_clock_ms(), loop.time())
                if rows:
                    await self.store.call(self.services.workers.presence, rows)

    async def _unserved_loop(self) -> None:
        """Warn of PENDING tasks whose capability no live worker of their queue offers (a
        handler name or version typo, or no worker running): once per capability and
        interval, so a waiting task never waits in silence."""
        warn = WarnOnce(UNSERVED_WARN_INTERVAL_S)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(UNSERVED_CHECK_S)
            with faults_logged(log, "looking for unserved tasks failed",
                               event="unserved_check_failed"):
                unserved = await self.store.call(self.services.listing.unserved)
                for item in warn.due(unserved, loop.time()):
                    cap = item["capability"]
                    waited = max(0, wall_clock_ms() - item["since"])
                    log.warning(
                        "%d task(s) of queue %s wait for %s@%s/%s, which no live worker "
                        "offers (for %s ms)", item["pending"], item["queue_id"],
                        cap["handler"], cap["handler_version"], cap["payload_version"],
                        waited, extra=fields(
                            "tasks_unserved", queue_id=item["queue_id"],
                            pending=item["pending"], waited_ms=waited,
                            capability=f"{cap['handler']}@{cap['handler_version']}/"
                                       f"{cap['payload_version']}"))

    async def _pause_loop(self) -> None:
        """Read the pauses in force into memory now and then twice per heartbeat interval
        (a pause or resume taken through another replica holds here within a heartbeat); a
        queue some pause left is dispatched at once."""
        period = self.config.heartbeat_ms / 2000
        while True:
            # the next read runs anyway
            with faults_logged(log, "reading pauses failed", event="pause_refresh_failed"):
                resumed = await self.store.call(self.services.pauses.refresh)
                if resumed:
                    self.dispatcher.queues_ready(resumed)
            await asyncio.sleep(period)

    async def _dispatch_poll_loop(self) -> None:
        period = DISPATCH_POLL_SQLITE_S if is_sqlite(self.config.db_url) else DISPATCH_POLL_S
        while True:
            await asyncio.sleep(period)
            self.dispatcher.poll_all()

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        if self.wal is not None:
            self.wal.start()
        self.store.start()
        self.dispatcher.start()
        # Workflow nodes a transaction on the store thread released or ended: a dispatch
        # pass for their queues and a wake-up of their long polls, each queued behind that
        # transaction (so it sees its commit).
        loop = asyncio.get_running_loop()

        def moved(queues: set[str], ended: list[str]) -> None:
            if queues:
                loop.call_soon_threadsafe(self.dispatcher.queues_ready, set(queues))
            if ended:
                loop.call_soon_threadsafe(self.waiters.wake, list(ended))

        workflow_rows.on_release(self.engine, moved)
        tasks = self._tasks
        tasks.start(self._pause_loop(), "orbit-pauses")  # first: no claim before it reads
        tasks.start(self._reaper_loop(), "orbit-reaper")
        tasks.start(self._dispatch_poll_loop(), "orbit-dispatch-poll")
        tasks.start(self._receipt_prune_loop(), "orbit-receipt-prune")
        tasks.start(self._push_poll_loop(), "orbit-push-poll")
        tasks.start(self._schedule_loop(), "orbit-schedules")
        tasks.start(self._presence_loop(), "orbit-presence")
        tasks.start(self._unserved_loop(), "orbit-unserved")
        cfg = self.config
        scheme = "https" if cfg.tls_cert else "http"
        log.info("orbit-server %s serving on %s://%s:%s (replica %s), database %s; "
                 "dashboard at %s://%s:%s/ui/", _version(), scheme, cfg.host, cfg.port,
                 self.replica, redacted_url(cfg.db_url), scheme, cfg.host, cfg.port,
                 extra=fields(
                     "server_started", version=_version(),
                     url=f"{scheme}://{cfg.host}:{cfg.port}", replica=self.replica,
                     database=redacted_url(cfg.db_url)))
        try:
            yield
        finally:
            open_sessions = len(self.dispatcher.sessions())
            log.info("orbit-server shutting down (%d worker connection(s) open)",
                     open_sessions, extra=fields("server_stopping", workers=open_sessions))
            await self._tasks.stop()
            await self.dispatcher.stop()
            if self.metrics is not None:
                self.metrics.close()
            self.store.close()
            if self.wal is not None:
                self.wal.close()  # after the store thread: it syncs the last commits
            self.engine.dispose()
            log.info("orbit-server stopped", extra=fields("server_stopped"))


def redacted_url(url: str) -> str:
    """The database URL without its password (it never reaches a log line)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL fails later with its own error; hide it whole
        return "<database URL>"


def _version() -> str:
    return installed_version("(development)")


def uvicorn_config(server: OrbitServer, log_level: str = "info") -> uvicorn.Config:
    """The uvicorn configuration that serves ``server.asgi`` (the app behind the hot
    routes): uvloop and httptools, the
    WebSocket limits, TLS when configured, and a bounded graceful shutdown."""
    import uvicorn

    from .http_transport import http_protocol
    from .ws_transport import OrbitWebSocketProtocol

    cfg = server.config
    return uvicorn.Config(
        server.asgi,
        host=cfg.host,
        port=cfg.port,
        loop="uvloop",
        # httptools, with header and body read timeouts for slow clients.
        http=http_protocol(cfg.header_timeout_ms / 1000, cfg.body_timeout_ms / 1000),
        # uvicorn's sans-I/O WebSocket implementation, with a typed close for invalid UTF-8.
        ws=OrbitWebSocketProtocol,
        # Frames between MAX_FRAME_BYTES and this size get a typed FRAME_TOO_LARGE error;
        # larger ones are cut by the WebSocket layer itself (close 1009).
        ws_max_size=MAX_FRAME_BYTES + 1024 * 1024,
        ws_ping_interval=None,  # the protocol has its own heartbeat and session TTL
        # Frames are small JSON; compressing each costs more CPU and latency than it saves.
        ws_per_message_deflate=False,
        # uvicorn's own limits (docs/security.md): concurrent connections, idle keep-alive.
        limit_concurrency=cfg.limit_concurrency,
        timeout_keep_alive=cfg.timeout_keep_alive,
        # Forwarded headers only from the proxies the operator named (uvicorn would trust
        # them from 127.0.0.1 by default, letting a local client pick its address).
        proxy_headers=cfg.forwarded_allow_ips is not None,
        forwarded_allow_ips=cfg.forwarded_allow_ips or "",
        # uvicorn's own start and stop lines repeat the server's: only its warnings show.
        log_level="warning" if log_level == "info" else log_level,
        # uvicorn's records go to the root logger, so --log-format applies to them too; its
        # access log stays off (it writes query strings): access_log.py replaces it.
        log_config=None,
        access_log=False,
        ssl_certfile=cfg.tls_cert,
        ssl_keyfile=cfg.tls_key,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )


def serve(config: ServerConfig, log_level: str = "info") -> None:
    """Bind the port, migrate the database to head, then serve until SIGTERM/SIGINT
    (graceful, exit 0). A port that cannot be bound fails first, before any "serving on"."""
    import uvicorn

    from .listen import listen_socket

    class GracefulServer(uvicorn.Server):
        # uvicorn re-raises the captured signal after a graceful shutdown, which makes the
        # process die "by SIGTERM"; a clean drain should end with status 0 instead.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    sock = listen_socket(config.host, config.port)
    try:
        # --port 0: the start line and the replica's name say the port the kernel chose.
        config = dataclasses.replace(config, port=sock.getsockname()[1])
        migrate(config.db_url)
        log.info("database %s is at the latest schema", redacted_url(config.db_url),
                 extra=fields("schema_ready", database=redacted_url(config.db_url)))
        server = OrbitServer(config)
        heap.settle()  # the start-up heap out of every collection's walk
        GracefulServer(uvicorn_config(server, log_level)).run(sockets=[sock])
    finally:
        sock.close()
