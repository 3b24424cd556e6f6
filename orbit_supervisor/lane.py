"""One queue's part of a Supervisor: its session, connection, timers and executions.

Every input (a frame, a child's outcome, the timer, stop()) is handed to the lane's pure
Session synchronously; the actions it returns are queued and one loop (``apply``) performs
them in order, then re-arms the lane's timer. That loop never re-enters itself: an action
whose effect gives more actions (a kill's report, a change in the slots being replaced)
queues them behind the others. Nothing awaits between a decision and its kill:
``pool.kill`` is called while the actions are performed (executions.py).

A Supervisor of several queues runs one lane per queue over the same child pool; their
sessions share its slots (credit.SlotShare), and after each pass of one lane the others
look again at what they may offer (``nudge``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from ssl import SSLContext
from typing import Any

from orbit_host.logs import fields
from orbit_host.tally import Histogram
from orbit_wire.frames import ServerFrame

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
)
from .connection import ConnectFailed, Connection, ServerUrls
from .errors import SupervisorError
from .events import EventStream
from .executions import Executions
from .pool import ChildPool
from .session import Session
from .timers import SessionTimers

__all__ = ["Lane", "LaneParts"]

Spawn = Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]


class LaneParts:
    """What every lane of one Supervisor shares: the loop, the pool, the event stream, the
    servers' addresses (one failover order for every lane), the histograms and where
    background tasks go."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pool: ChildPool, events: EventStream,
                 urls: ServerUrls, ssl: SSLContext | None, spawn: Spawn, kill_latency: Histogram,
                 after_pass: Callable[[Lane], None]) -> None:
        self.loop, self.pool, self.events = loop, pool, events
        self.urls, self.ssl, self.spawn = urls, ssl, spawn
        self.kill_latency = kill_latency
        self.after_pass = after_pass


class Lane:
    """The driver of one queue's session. ``finished`` is set once the session ends the
    run (None after a clean drain, else the SupervisorError)."""

    def __init__(self, session: Session, parts: LaneParts, log: logging.Logger,
                 loop_lag: Histogram) -> None:
        self.session = session
        self.queue_id = session.config.queue_id
        self.instance_id = session.config.instance_id
        self._parts = parts
        self._log = log
        self.conn: Connection | None = None
        self._connect_task: asyncio.Task[None] | None = None
        self._connect_attempts = 0
        self._queued: deque[Action] = deque()
        self._performing = False
        self.finished: asyncio.Future[SupervisorError | None] = parts.loop.create_future()
        self.timers = SessionTimers(parts.loop, session, parts.pool, perform=self.apply,
                                    on_error=self.internal_error, loop_lag=loop_lag)
        self.executions = Executions(
            parts.loop, session, parts.pool, log=log, perform=self.apply,
            timers_first=self.timers.due_first, on_error=self.internal_error,
            kill_latency=parts.kill_latency)

    def begin(self) -> None:
        self.apply(self.session.start(self._parts.loop.time()))
        self.timers.probe_lag()

    def stop(self, *, force: bool = False) -> None:
        self.apply(self.session.request_stop(self._parts.loop.time(), force=force))

    def nudge(self) -> None:
        """Another lane's pass changed what the shared slots hold: look again."""
        if not self.session.done:
            self.apply(self.session.slots_changed(self._parts.loop.time()))

    async def close(self, error: SupervisorError | None) -> None:
        """The lane's part of the shutdown, once the run ended and its timers stopped (the
        Supervisor killed what still ran): the connection closes (gracefully after a drain,
        aborted otherwise), the connect task is cancelled, the executions left are awaited."""
        self.timers.cancel()
        if self.conn is not None:
            if error is None:
                await self.conn.close()
            else:
                self.conn.abort()  # pending control requests are abandoned
        if self._connect_task is not None:
            self._connect_task.cancel()
        await self.executions.end()

    # ------------------------------------------------------------------ actions

    def apply(self, actions: list[Action]) -> None:
        """Queue the session's actions; unless a pass is running already (this call comes
        from one of its actions), perform every queued action in order, tell the session
        about the slots being replaced, and re-arm the timer."""
        self._queued.extend(actions)
        if self._performing:
            return
        self._performing = True
        try:
            while True:
                while self._queued:
                    self._perform(self._queued.popleft())
                more = self.timers.replacing()
                if not more:
                    break
                self._queued.extend(more)
        except BaseException:
            self._queued.clear()  # the run ends with this error: nothing else is done
            raise
        finally:
            self._performing = False
        self.timers.rearm()
        self._parts.after_pass(self)

    def _perform(self, action: Action) -> None:
        match action:
            case SendFrame(frame=frame):
                if self.conn is not None:
                    self.conn.send(frame)
            case Execute(attempt=att):
                self.executions.start(att)
            case Kill(attempt=att, reason=reason, code=code, late_by=late):
                self._queued.extend(self.executions.kill(att, reason, code, late))
            case CancelChild(attempt=att):
                self.executions.cancel(att)
            case Emit(event=event):
                self._parts.events.publish(event, self.queue_id)
                if self._log.isEnabledFor(logging.DEBUG):
                    self._log.debug("event %s %s %s", event.type, event.attempt_id or "",
                                    event.classification or "", extra=fields(
                                        "supervisor_event", type=event.type,
                                        attempt_id=event.attempt_id, task_id=event.task_id,
                                        classification=event.classification))
            case Connect(delay=delay):
                self._connect_task = self._parts.spawn(self._connect(delay))
            case CloseConnection(reason=reason):
                self._log.warning("dropping the connection: %s", reason, extra=fields(
                    "connection_dropped", reason=reason, instance_id=self.instance_id))
                if self.conn is not None:
                    self.conn.abort()
            case EndRun(error=error):
                if not self.finished.done():
                    self.finished.set_result(error)

    def internal_error(self, where: str, exc: BaseException) -> None:
        """A bug must end the run with an error, never hang it or leave children running."""
        self._log.error("internal error in %s", where, exc_info=exc,
                        extra=fields("internal_error", where=where))
        if not self.finished.done():
            session = self.session
            self.finished.set_result(SupervisorError(
                f"internal error in {where}: {type(exc).__name__}",
                unconfirmed=session.unconfirmed, running=session.executing))

    # ------------------------------------------------------------------ the connection

    async def _connect(self, delay: float) -> None:
        try:
            await self._connect_and_read(delay)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.internal_error("the connection task", exc)

    async def _connect_and_read(self, delay: float) -> None:
        session, loop, urls = self.session, self._parts.loop, self._parts.urls
        if delay > 0:
            await asyncio.sleep(delay)
        self._connect_attempts += 1
        url = urls.current
        try:
            conn = await Connection.open(
                url, ssl_context=self._parts.ssl if url.startswith("wss:") else None)
        except ConnectFailed as exc:
            urls.connect_failed()
            following = f"; next: {urls.current}" if urls.current != url else ""
            self._log.warning("cannot reach %s (attempt %d): %s%s", url,
                              self._connect_attempts, exc, following, extra=fields(
                                  "connect_failed", url=url,
                                  attempt=self._connect_attempts, reason=exc.reason))
            self.apply(session.connect_failed(loop.time(), exc.reason))
            return
        self._log.info("connected to %s", url, extra=fields(
            "connected", url=url, instance_id=self.instance_id, queue_id=self.queue_id))
        self.conn = conn
        self.apply(session.connected(loop.time()))
        reason = await conn.run(self._on_frame)
        if self.conn is conn:
            self.conn = None
        if not session.done:
            self._log.warning("connection lost: %s", reason, extra=fields(
                "connection_lost", url=url, reason=reason))
        self.apply(session.connection_lost(loop.time(), reason))

    def _on_frame(self, frame: ServerFrame) -> None:
        self.timers.due_first()
        self.apply(self.session.frame_received(frame, self._parts.loop.time()))
