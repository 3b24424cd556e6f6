"""Composition of the Orbit server: config → engine → store thread → Services → adapters.

``OrbitServer`` owns every long-lived part (store thread, dispatcher, reaper and receipt
prune loops) and the Starlette app; ``serve(config)`` runs it under uvicorn until
SIGTERM/SIGINT. Shutdown order: uvicorn stops accepting and closes connections, then the
lifespan stops the loops and the dispatcher and finally drains and closes the store thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.applications import Starlette

from orbit_host.credentials import Credentials, write_credentials
from orbit_wire.limits import MAX_FRAME_BYTES

from .config import ServerConfig
from .dispatcher import Dispatcher
from .domain.listing import WarnOnce
from .http_api import http_exception_handlers, http_routes
from .parts import ServerParts
from .services import Effects, Services
from .store.db import create_engine_for, is_sqlite, migrate
from .store.retry import faults_logged
from .store_thread import StoreThread
from .waiters import TaskWaiters
from .ws_endpoint import ws_routes

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger("orbit.server")

# The dispatcher also re-checks sessions that still hold credit this often, so tasks made
# ready by another replica (or a missed hint) are dispatched without a local signal. A SQLite
# file has one server, which hints every change itself: there the poll is only a safety net.
DISPATCH_POLL_S = 0.5
DISPATCH_POLL_SQLITE_S = 2.0
# Receipts past the retention are deleted at start and then this often, a batch per
# transaction until none is left (at most RECEIPT_PRUNE_MAX_BATCHES per pass).
RECEIPT_PRUNE_PERIOD_S = 60.0
RECEIPT_PRUNE_MAX_BATCHES = 1_000
_NEVER = 2**63
# PENDING work no live worker offers to serve is looked for this often, and each (queue,
# capability) is logged at warning level at most once per UNSERVED_WARN_INTERVAL_S.
UNSERVED_CHECK_S = 30.0
UNSERVED_WARN_INTERVAL_S = 300.0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class OrbitServer:
    """Every long-lived part of one server process. Build, then serve ``self.app`` (ASGI)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.clock = wall_clock_ms
        self.store = StoreThread()
        self.engine = create_engine_for(config.db_url)
        # How instance rows and logs name this server among the replicas of one database.
        self.replica = f"{socket.gethostname()}:{config.port or os.getpid()}"
        self.services = Services(self.engine, config, wall_clock_ms, random.Random(),
                                 self.replica)
        self.waiters = TaskWaiters()
        self.dispatcher = Dispatcher(self.store, self.services.workers)
        self._reaper_wake = asyncio.Event()
        self._next_due_ms: int | None = None
        # Wall-clock ms of the reaper's next planned pass; "never" while a pass runs, so
        # every due instant reported meanwhile is kept for the next sleep.
        self._reaper_at_ms = _NEVER
        self._tasks: list[asyncio.Task[None]] = []
        parts = ServerParts(config=config, clock=self.clock, store=self.store,
                            services=self.services, dispatcher=self.dispatcher,
                            waiters=self.waiters, apply=self.apply)
        self.app = Starlette(routes=[*http_routes(parts), *ws_routes(parts)],
                             exception_handlers=http_exception_handlers(),
                             lifespan=self._lifespan)

    # -------------------------------------------------------------- effects of a transaction

    def apply(self, effects: Effects) -> None:
        """Act on what a transaction changed: wake long polls, dispatch, push cancels."""
        if effects.terminal_tasks:
            self.waiters.wake(effects.terminal_tasks, effects.terminal_views)
        if effects.ready_queues:
            self.dispatcher.queues_ready(effects.ready_queues)
        for instance_id, attempt_id, epoch in effects.cancels:
            self.dispatcher.push_cancel(instance_id, attempt_id, epoch)
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
        interval_ms = self.config.reaper_interval_ms
        while True:
            with faults_logged(log, "reaper pass failed"):  # the next pass runs anyway
                effects = await self.store.call(self.services.reaper.reap)
                self.apply(effects)
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
        """Delete receipts past the retention. Each batch is its own call on the store
        thread's normal lane, so worker requests and other calls take turns with it."""
        while True:
            with faults_logged(log, "receipt prune failed"):  # the next pass runs anyway
                for _ in range(RECEIPT_PRUNE_MAX_BATCHES):
                    deleted = await self.store.call(self.services.reaper.prune_receipts)
                    if deleted < self.config.reap_batch:
                        break
            await asyncio.sleep(RECEIPT_PRUNE_PERIOD_S)

    async def _presence_loop(self) -> None:
        """Every heartbeat interval, record the live connections of this replica (seen now,
        their credit, their last frame) so every replica lists them (GET /v1/workers)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.heartbeat_ms / 1000)
            with faults_logged(log, "presence write failed"):  # the next write runs anyway
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
            with faults_logged(log, "looking for unserved tasks failed"):
                unserved = await self.store.call(self.services.listing.unserved)
                for item in warn.due(unserved, loop.time()):
                    cap = item["capability"]
                    log.warning(
                        "%d task(s) of queue %s wait for %s@%s/%s, which no live worker "
                        "offers (for %s ms)", item["pending"], item["queue_id"],
                        cap["handler"], cap["handler_version"], cap["payload_version"],
                        max(0, wall_clock_ms() - item["since"]))

    async def _dispatch_poll_loop(self) -> None:
        period = DISPATCH_POLL_SQLITE_S if is_sqlite(self.config.db_url) else DISPATCH_POLL_S
        while True:
            await asyncio.sleep(period)
            self.dispatcher.poll_all()

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self.store.start()
        self.dispatcher.start()
        self._tasks = [
            asyncio.create_task(self._reaper_loop(), name="orbit-reaper"),
            asyncio.create_task(self._dispatch_poll_loop(), name="orbit-dispatch-poll"),
            asyncio.create_task(self._receipt_prune_loop(), name="orbit-receipt-prune"),
            asyncio.create_task(self._presence_loop(), name="orbit-presence"),
            asyncio.create_task(self._unserved_loop(), name="orbit-unserved"),
        ]
        log.info("orbit-server ready on %s:%s", self.config.host, self.config.port)
        try:
            yield
        finally:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.dispatcher.stop()
            self.store.close()
            self.engine.dispose()


def uvicorn_config(server: OrbitServer, log_level: str = "warning") -> uvicorn.Config:
    """The uvicorn configuration that serves ``server.app``: uvloop and httptools, the
    WebSocket limits, TLS when configured, and a bounded graceful shutdown."""
    import uvicorn

    cfg = server.config
    return uvicorn.Config(
        server.app,
        host=cfg.host,
        port=cfg.port,
        loop="uvloop",
        http="httptools",
        ws="websockets-sansio",
        # Frames between MAX_FRAME_BYTES and this size get a typed FRAME_TOO_LARGE error;
        # larger ones are cut by the WebSocket layer itself (close 1009).
        ws_max_size=MAX_FRAME_BYTES + 1024 * 1024,
        ws_ping_interval=None,  # the protocol has its own heartbeat and session TTL
        # Frames are small JSON; compressing each costs more CPU and latency than it saves.
        ws_per_message_deflate=False,
        log_level=log_level,
        access_log=False,
        ssl_certfile=cfg.tls_cert,
        ssl_keyfile=cfg.tls_key,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )


def bootstrap_admin(config: ServerConfig, output: Path, server_url: str,
                    name: str | None) -> str:
    """Migrate, create an admin credential directly in the database, and write its
    credentials file (mode 0600). Returns the credential ID; the secret is only in the file."""
    migrate(config.db_url)
    engine = create_engine_for(config.db_url)
    try:
        services = Services(engine, config, wall_clock_ms, random.Random())
        made = services.admin.bootstrap_admin(name)
    finally:
        engine.dispose()
    write_credentials(output, Credentials(
        url=server_url.rstrip("/"), credential_id=made["credential_id"], secret=made["secret"],
        role=str(made.get("role", "admin")), queues=tuple(made.get("queues", ())),
    ))
    return str(made["credential_id"])


def serve(config: ServerConfig, log_level: str = "warning") -> None:
    """Migrate the database to head, then serve until SIGTERM/SIGINT (graceful, exit 0)."""
    import uvicorn

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

    migrate(config.db_url)
    server = OrbitServer(config)
    GracefulServer(uvicorn_config(server, log_level)).run()
