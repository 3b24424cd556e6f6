"""The worker WebSocket endpoint (docs/protocol.md): the driver of ``worker_protocol``.

One ``WorkerConnection`` per socket. Its protocol (``WorkerProtocol``, pure) decides; the
connection does what it decides, with three tasks it owns: the reader (messages into the
protocol, in order), the writer (frames out, in order, never blocking the rest of the
server) and the timer (the protocol's next deadline: no hello, silence, the credential's
end). A hello is authenticated and its session opened here (the failed-login budget, the
session limits, the store, the replaced connection); a request is applied on the store
thread, its ``claim`` ops through the dispatcher's claim routine. A bad frame gets a typed
``error`` frame and closes *this* connection only; nothing a peer sends can end the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from orbit_host.logs import fields
from orbit_host.task_owner import TaskOwner
from orbit_wire.errors import AuthError, ErrorCode, OrbitError
from orbit_wire.frames import Hello, OpResult, Request, ServerFrame, encode
from orbit_wire.ids import new_id

from .dispatcher import Claimed, WorkerSession, claimed_by
from .parts import ServerParts
from .services import NO_CLAIMS, ClaimRoom, Effects
from .store.retry import faults_logged
from .worker_protocol import (
    CLOSE_REPLACED,
    Action,
    AddCredit,
    Apply,
    Close,
    Greet,
    Send,
    Settings,
    Why,
    WorkerProtocol,
    close_code,
)
from .ws_transport import direct_receive
from .ws_writer import FrameWriter

log = logging.getLogger("orbit.ws")

# A peer that stops reading while we keep queueing frames is cut off past this many.
MAX_QUEUED_FRAMES = 10_000
# How long a closing connection may take to flush its last frames.
FLUSH_TIMEOUT_S = 2.0

# A request's answers, and its transaction's effects (None if it failed as a whole).
Applied = tuple[list[OpResult], Effects | None]


def failed_request_answers(request: Request, exc: Exception) -> list[OpResult]:
    """The answer to every op of a request whose transaction failed as a whole: the
    retryable fault's own code (the database unavailable, the server stopping: nothing was
    applied, or the commit's answer was lost, and a resend with the same msg_ids tells which),
    else INTERNAL. Per-op errors are answered per op, so anything else ending a whole request
    is a server fault (logged with its traceback), never a verdict on the worker's reports;
    both codes are retryable for the worker."""
    if isinstance(exc, OrbitError) and exc.retryable:
        return [OpResult(op.msg_id, False, exc.code, exc.message) for op in request.ops]
    log.error("applying a worker request failed", exc_info=exc,
              extra=fields("worker_request_failed"))
    return [OpResult(op.msg_id, False, ErrorCode.INTERNAL, "internal error; retry")
            for op in request.ops]


class WorkerConnection:
    """One worker socket from accept to cleanup. ``run()`` returns when it is closed."""

    def __init__(self, parts: ServerParts, websocket: WebSocket) -> None:
        self.parts = parts
        self.workers = parts.services.workers
        self.ws = websocket
        self.config = cfg = parts.config
        self._loop = asyncio.get_running_loop()
        self.protocol = WorkerProtocol(Settings(
            hello_timeout_ms=cfg.hello_timeout_ms, session_ttl_ms=cfg.session_ttl_ms,
            heartbeat_ms=cfg.heartbeat_ms, kill_grace_ms=cfg.kill_grace_ms),
            self._loop.time())
        self.session: WorkerSession | None = None
        self._out = FrameWriter(websocket)
        self._tasks = TaskOwner(log)

    @property
    def closing(self) -> bool:
        return self.protocol.closing

    # -------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        await self.ws.accept()
        tasks = self._tasks
        reader = tasks.start(self._read_loop(), "orbit-ws-reader")
        writer = tasks.start(self._out.run(), "orbit-ws-writer")
        timer = tasks.start(self._timer_loop(), "orbit-ws-timer")
        try:
            await asyncio.wait({reader, writer, timer}, return_when=asyncio.FIRST_COMPLETED)
            if self.closing and not writer.done():
                # Let the error frame and the close go out, within a bound (a writer that
                # fails meanwhile is logged by its owner).
                with contextlib.suppress(TimeoutError, Exception):
                    await asyncio.wait_for(asyncio.shield(writer), FLUSH_TIMEOUT_S)
        finally:
            await tasks.stop(reader, writer, timer)
            # A request under way is not cancelled: its transaction may already be running
            # on the store thread, and its effects (wake-ups, dispatch hints) must still be
            # applied.
            await tasks.join()
            await self._cleanup()

    async def _cleanup(self) -> None:
        """Release the instance's unstarted reservations if this was its current session."""
        session, self.session = self.session, None
        if session is None:
            return
        if self.parts.dispatcher.detach(session):
            log.info("worker %s disconnected from queue %s", session.instance_id,
                     session.queue_id, extra=fields(
                         "worker_disconnected", instance_id=session.instance_id,
                         queue_id=session.queue_id, session_id=session.session_id))
            await self._release_reservations(session.instance_id,
                                             session.binding.connected_at_ms)

    async def _release_reservations(self, instance_id: str,
                                    connected_at_ms: int | None = None) -> None:
        """Release the instance's unstarted reservations (and mark its row disconnected when
        ``connected_at_ms`` names the connection that ended). On failure the reaper releases
        them once they time out, so the error is only logged (a bug with its traceback)."""
        parts = self.parts
        with faults_logged(log, "releasing reservations of instance %s failed", instance_id,
                           event="release_failed", instance_id=instance_id):
            effects = await parts.store.call_worker(self.workers.release_reservations,
                                                    instance_id, connected_at_ms)
            parts.act_on(effects)

    # -------------------------------------------------------------- what the protocol decides

    def _perform(self, actions: list[Action]) -> None:
        """Do what the protocol decided (a ``Greet`` is the reader's to await)."""
        for action in actions:
            match action:
                case Send(frame=frame):
                    self._queue(frame)
                case Close(code=code, reason=reason, why=why):
                    self._log_close(why)
                    self._out.close(code, reason)
                case AddCredit():
                    assert self.session is not None
                    self.parts.dispatcher.credit_added(self.session)
                case Apply():
                    assert self.session is not None
                    self._tasks.start(self._process(self.session, action), "orbit-ws-request")
                case Greet():
                    raise AssertionError("a hello is greeted by the reader")

    def _log_close(self, why: Why) -> None:
        cfg = self.config
        if why is Why.SILENT:
            log.info("closing a worker connection silent for %s ms", cfg.session_ttl_ms,
                     extra=self._ids(why.value))
        elif why is Why.NO_HELLO:
            log.info("closing a worker connection that sent no hello in %s ms",
                     cfg.hello_timeout_ms, extra=self._ids(why.value))
        elif why is Why.CREDENTIAL_ENDED:
            log.info("closing a worker connection: its credential expired",
                     extra=self._ids(why.value))

    def _ids(self, event: str) -> dict[str, Any]:
        session = self.session
        if session is None:
            return fields(event)
        return fields(event, instance_id=session.instance_id, queue_id=session.queue_id,
                      session_id=session.session_id)

    # The session's links, for the dispatcher (reserve and cancel frames, closes).

    def send(self, frame: ServerFrame) -> None:
        """Queue a frame; never blocks. Frames after a close are dropped."""
        if not self.closing:
            self._queue(frame)

    def close(self, code: int, reason: str) -> None:
        """Close after the frames already queued (idempotent)."""
        self._perform(self.protocol.close(code, reason))

    def fatal(self, code: ErrorCode, message: str) -> None:
        """A fatal ``error`` frame, then its close code."""
        self._perform(self.protocol.fatal(code, message))

    def _queue(self, frame: ServerFrame) -> None:
        if self._out.pending() >= MAX_QUEUED_FRAMES:
            log.warning("worker connection is not reading; closing it",
                        extra=self._ids("worker_not_reading"))
            self.close(close_code(ErrorCode.UNAVAILABLE), "peer is not reading")
            return
        self.parts.traffic.worker_out += 1
        self._out.put(encode(frame))

    # -------------------------------------------------------------- tasks

    async def _timer_loop(self) -> None:
        protocol = self.protocol
        while (due := protocol.next_timer()) is not None:
            await asyncio.sleep(max(0.0, due - self._loop.time()))
            self._perform(protocol.handle_timer(self._loop.time()))

    async def _read_loop(self) -> None:
        receive = self.ws.receive
        # Once a session is open every frame is taken in the transport's callback (no hello
        # to await any more); this loop then reads what that leaves and notices the end.
        direct = direct_receive(self.ws.scope)
        while not self.closing:
            if direct is not None and self.session is not None and direct(self._take):
                direct = None
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            for action in self._read(message.get("text")):
                if isinstance(action, Greet):
                    await self._greet(action.hello)
                else:
                    self._perform([action])

    def _read(self, text: str | None) -> list[Action]:
        now = self._loop.time()
        self.parts.traffic.worker_in += 1
        protocol = self.protocol
        actions = protocol.receive(text, now)
        if self.session is not None:
            self.session.last_frame_at = now
            self.session.frames_read = protocol.frames_read
        return actions

    def _take(self, text: str) -> bool:
        """A frame taken in the transport's callback, as the read loop takes it (a session is
        open, so it holds no hello to await)."""
        if self.closing:
            return True  # the read loop drops frames after a close the same way
        try:
            self._perform(self._read(text))
        except Exception:  # the read loop's owner would log it and end the connection
            log.exception("reading a worker frame failed", extra=self._ids("worker_read_failed"))
            self.close(close_code(ErrorCode.INTERNAL), ErrorCode.INTERNAL.value)
        return True

    # -------------------------------------------------------------- hello

    async def _greet(self, hello: Hello) -> None:
        """Authenticate the hello and open its session, or refuse it (the failed-login
        budget, the session limits, the store)."""
        parts = self.parts
        peer = self.ws.client.host if self.ws.client is not None else "?"
        keys = parts.logins.keys(hello.credential_id, peer)
        now_s = time.monotonic()  # the clock the HTTP routes spend the same budget on
        if parts.logins.wait_s(keys, now_s) > 0:
            self._perform(self.protocol.refused(
                ErrorCode.RATE_LIMITED, "too many failed hellos; retry later", retryable=True))
            return
        dispatcher = parts.dispatcher
        # Decided before the hello's transaction, which writes the instance's row only when
        # admitted (after authenticating: the refusal tells nothing to a wrong secret).
        admitted = dispatcher.admit(hello.credential_id, hello.instance_id,
                                    self.config.max_sessions_per_credential,
                                    self.config.max_sessions)
        try:
            await self._open_session(hello, admitted, keys, now_s)
        finally:
            if admitted:
                dispatcher.admitted(hello.credential_id)

    async def _open_session(self, hello: Hello, admitted: bool, keys: tuple[str, str],
                            now_s: float) -> None:
        parts = self.parts
        try:
            binding = await parts.store.call_worker(self.workers.worker_hello, hello, admitted)
        except OrbitError as exc:
            if isinstance(exc, AuthError):
                parts.logins.failed(keys, now_s)
            self._perform(self.protocol.refused(exc.code, exc.message,
                                                retryable=exc.retryable))
            return
        except Exception:
            log.exception("worker hello failed", extra=fields("worker_hello_failed"))
            self._perform(self.protocol.refused(
                ErrorCode.UNAVAILABLE, "the server cannot accept workers right now",
                retryable=True))
            return
        if self.closing:
            return
        dispatcher = parts.dispatcher
        older = dispatcher.current(binding.instance_id)
        if older is not None:
            # The same instance reconnected: the older connection goes, and its unstarted
            # reservations are released *before* this session can receive new ones.
            older.close(CLOSE_REPLACED, "replaced by a newer connection of this instance")
            dispatcher.detach(older)
            await self._release_reservations(binding.instance_id)
        if self.closing:
            return
        now_ms = parts.clock()
        session_id = new_id(now_ms)
        welcome = self.protocol.greeted(session_id, now=self._loop.time(), now_ms=now_ms,
                                        valid_until_ms=binding.valid_until_ms)
        session = WorkerSession(session_id, binding, self.protocol.credit, self.send,
                                self.close, self.fatal)
        session.last_frame_at = self.protocol.last_seen
        session.frames_read = self.protocol.frames_read
        self.session = session
        dispatcher.attach(session)
        log.info("worker %s connected to queue %s (%s, %d slots, %s)", binding.instance_id,
                 binding.queue_id, hello.agent or "unknown agent", hello.capacity,
                 ", ".join(str(c) for c in binding.capabilities), extra=fields(
                     "worker_connected", instance_id=binding.instance_id,
                     queue_id=binding.queue_id, session_id=session_id,
                     credential_id=binding.credential_id, agent=hello.agent,
                     slots=hello.capacity,
                     capabilities=[str(c) for c in binding.capabilities]))
        self._perform(welcome)

    # -------------------------------------------------------------- requests

    async def _apply(self, session: WorkerSession, request: Request,
                     room: ClaimRoom) -> Applied:
        """Apply the ops in one transaction (claims within ``room``); an answer for every
        op and the transaction's effects (None if it failed), never raises."""
        parts = self.parts
        try:
            results, effects = await parts.store.call_worker(
                self.workers.apply_ops, session.binding, request.ops, room,
                parts.waiters.watching,
            )
        except AuthError as exc:
            # Fenced (services.workers): the credential was revoked or expired meanwhile.
            self.fatal(exc.code, exc.message)
            return [OpResult(op.msg_id, False, exc.code, exc.message) for op in request.ops], None
        except Exception as exc:
            return failed_request_answers(request, exc), None
        return list(results), effects

    async def _process(self, session: WorkerSession, apply: Apply) -> None:
        """Apply a request and answer it (every op gets an answer, whatever fails)."""
        dispatcher = self.parts.dispatcher
        request = apply.request
        try:
            if apply.drain:
                dispatcher.stop_dispatching(session)
            if apply.claims:
                # Through the claim routine: claims and dispatch passes for this session take
                # turns, so the credit a claim leaves is booked against its current credit.
                async def claiming(room: ClaimRoom) -> tuple[Applied, Claimed]:
                    results, effects = await self._apply(session, request, room)
                    return (results, effects), claimed_by(request.ops, results)

                results, effects = await dispatcher.claim(session, claiming)
            else:
                results, effects = await self._apply(session, request, NO_CLAIMS)
            if effects is not None:
                # After the claim is booked: a claim its answer's payload budget ended leaves
                # a work hint for this session's queue, which must not read as "the queue is
                # empty".
                self.parts.act_on(effects)
            if apply.drain:
                # A dispatch pass already under way sends its reserve frame before this answer.
                async with session.lock:
                    pass
        except Exception as exc:  # a fault past the transaction: the ops are still answered
            results = failed_request_answers(request, exc)
        self._perform(self.protocol.answered(request.id, results))


def ws_routes(parts: ServerParts) -> list[WebSocketRoute]:
    """The worker endpoint, one ``WorkerConnection`` per socket."""

    async def worker_endpoint(websocket: WebSocket) -> None:
        try:
            await WorkerConnection(parts, websocket).run()
        except Exception:  # one connection's failure must never reach the server
            log.exception("worker connection failed", extra=fields("worker_connection_failed"))

    return [WebSocketRoute("/v1/worker", worker_endpoint)]
