"""The worker WebSocket endpoint (docs/protocol.md): decode a frame, call a use case, encode.

One ``WorkerConnection`` per socket, with three tasks it owns: the reader (frames in, in
order), the writer (frames out, in order, never blocking the rest of the server), and the
watchdog (closes a connection silent for ``session_ttl_ms``). A bad frame gets a typed
``error`` frame and closes *this* connection only; nothing a peer sends can end the server.

Close codes (after a fatal ``error`` frame): see ``CLOSE_CODES``; 4008 is an expired session,
4009 a connection replaced by a newer ``hello`` of the same instance.
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
from orbit_wire.errors import AuthError, ErrorCode, OrbitError, ProtocolError
from orbit_wire.frames import (
    ClaimOp,
    ClientFrame,
    Credit,
    DrainOp,
    ErrorFrame,
    Heartbeat,
    HeartbeatAck,
    Hello,
    OpResult,
    Request,
    Response,
    ServerFrame,
    Welcome,
    decode_client_frame,
    encode,
)
from orbit_wire.ids import new_id
from orbit_wire.limits import MAX_BATCH_OPS, PROTOCOL_VERSION

from .dispatcher import Claimed, WorkerSession, claimed_by
from .parts import ServerParts
from .services import NO_CLAIMS, ClaimRoom, Effects
from .store.retry import faults_logged

log = logging.getLogger("orbit.ws")

CLOSE_CODES: dict[ErrorCode, int] = {
    ErrorCode.BAD_FRAME: 4001,
    ErrorCode.UNKNOWN_FRAME_TYPE: 4001,
    ErrorCode.FRAME_TOO_LARGE: 4002,
    ErrorCode.OUT_OF_ORDER: 4003,
    ErrorCode.CONCURRENT_REQUEST: 4003,
    ErrorCode.LIMIT_EXCEEDED: 4004,
    ErrorCode.UNSUPPORTED_PROTOCOL: 4005,
    ErrorCode.UNAUTHENTICATED: 4006,
    ErrorCode.PERMISSION_DENIED: 4006,
    ErrorCode.INSTANCE_CONFLICT: 4007,
    ErrorCode.UNAVAILABLE: 4010,
    ErrorCode.INTERNAL: 4011,
    ErrorCode.RATE_LIMITED: 4012,
}
CLOSE_SESSION_EXPIRED = 4008
CLOSE_REPLACED = 4009
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


class _Close:
    """Writer-queue sentinel: close the socket with this code after the frames before it."""

    __slots__ = ("code", "reason")

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason


class WorkerConnection:
    """One worker socket from accept to cleanup. ``run()`` returns when it is closed."""

    def __init__(self, parts: ServerParts, websocket: WebSocket) -> None:
        self.parts = parts
        self.workers = parts.services.workers
        self.ws = websocket
        self.config = parts.config
        self.session: WorkerSession | None = None
        self.closing = False
        self._out: asyncio.Queue[str | _Close] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._last_seen = self._loop.time()
        self._in_flight = False
        self._last_request_id: int | None = None
        self._request_task: asyncio.Task[None] | None = None
        # Loop time at which the hello's credential stops holding (expiry, rotation grace).
        self._valid_until: float | None = None
        self._accepted_at = self._loop.time()

    # -------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        await self.ws.accept()
        reader = asyncio.create_task(self._read_loop(), name="orbit-ws-reader")
        writer = asyncio.create_task(self._write_loop(), name="orbit-ws-writer")
        watchdog = asyncio.create_task(self._watch(), name="orbit-ws-watchdog")
        try:
            await asyncio.wait({reader, writer, watchdog}, return_when=asyncio.FIRST_COMPLETED)
            if self.closing and not writer.done():
                # Let the error frame and the close go out, within a bound.
                with contextlib.suppress(TimeoutError, Exception):
                    await asyncio.wait_for(asyncio.shield(writer), FLUSH_TIMEOUT_S)
        finally:
            for task in (reader, writer, watchdog):
                task.cancel()
            for task in (reader, writer, watchdog):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self._request_task is not None:
                # Not cancelled: its transaction may already be running on the store thread,
                # and its effects (wake-ups, dispatch hints) must still be applied.
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._request_task
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
            parts.apply(effects)

    # -------------------------------------------------------------- output

    def _ids(self, event: str) -> dict[str, Any]:
        session = self.session
        if session is None:
            return fields(event)
        return fields(event, instance_id=session.instance_id, queue_id=session.queue_id,
                      session_id=session.session_id)

    def send(self, frame: ServerFrame) -> None:
        """Queue a frame; never blocks. Frames after a close request are dropped."""
        if self.closing:
            return
        if self._out.qsize() >= MAX_QUEUED_FRAMES:
            log.warning("worker connection is not reading; closing it",
                        extra=self._ids("worker_not_reading"))
            self.close(CLOSE_CODES[ErrorCode.UNAVAILABLE], "peer is not reading")
            return
        self._out.put_nowait(encode(frame).decode())

    def close(self, code: int, reason: str) -> None:
        """Close after the frames already queued (idempotent)."""
        if self.closing:
            return
        self.closing = True
        self._out.put_nowait(_Close(code, reason))

    def fatal(self, code: ErrorCode, message: str, *, retryable: bool = False) -> None:
        """Send a fatal ``error`` frame and close this connection."""
        self.send(ErrorFrame(code, message, retryable=retryable, fatal=True))
        self.close(CLOSE_CODES.get(code, 4000), code.value)

    async def _write_loop(self) -> None:
        ws_send = self.ws.send
        while True:
            item = await self._out.get()
            if isinstance(item, _Close):
                with contextlib.suppress(Exception):
                    await self.ws.close(item.code, item.reason)
                return
            await ws_send({"type": "websocket.send", "text": item})

    async def _watch(self) -> None:
        ttl = self.config.session_ttl_ms / 1000
        while True:
            now = self._loop.time()
            remaining = self._last_seen + ttl - now
            if remaining <= 0:
                log.info("closing a worker connection silent for %s ms",
                         self.config.session_ttl_ms, extra=self._ids("worker_silent"))
                self.close(CLOSE_SESSION_EXPIRED, "session expired")
                return
            if self.session is None:
                # Unauthenticated connections are held briefly: the hello must come soon.
                hello_left = self._accepted_at + self.config.hello_timeout_ms / 1000 - now
                if hello_left <= 0:
                    log.info("closing a worker connection that sent no hello in %s ms",
                             self.config.hello_timeout_ms, extra=self._ids("worker_no_hello"))
                    self.close(CLOSE_SESSION_EXPIRED, "no hello")
                    return
                remaining = min(remaining, hello_left)
            if self._valid_until is not None:
                if self._valid_until <= now:
                    log.info("closing a worker connection: its credential expired",
                             extra=self._ids("worker_credential_expired"))
                    self.fatal(ErrorCode.UNAUTHENTICATED, "the worker's credential expired")
                    return
                remaining = min(remaining, self._valid_until - now)
            await asyncio.sleep(remaining)

    # -------------------------------------------------------------- input

    async def _read_loop(self) -> None:
        receive = self.ws.receive
        while not self.closing:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            self._last_seen = self._loop.time()
            if self.session is not None:
                self.session.last_frame_at = self._last_seen
            text = message.get("text")
            if text is None:
                self.fatal(ErrorCode.BAD_FRAME, "binary frames are not accepted; send text")
                return
            try:
                frame = decode_client_frame(text)
            except ProtocolError as exc:
                self.fatal(exc.code, exc.message)
                return
            try:
                await self._handle(frame)
            except ProtocolError as exc:
                self.fatal(exc.code, exc.message)
                return

    async def _handle(self, frame: ClientFrame) -> None:
        session = self.session
        if session is None:
            if not isinstance(frame, Hello):
                raise ProtocolError(ErrorCode.OUT_OF_ORDER, "the first frame must be hello")
            await self._hello(frame)
            return
        match frame:
            case Heartbeat():
                self.send(HeartbeatAck())
            case Credit(credits=credits):
                self.parts.dispatcher.grant(session, credits)
            case Request():
                self._request(session, frame)
            case Hello():
                raise ProtocolError(ErrorCode.OUT_OF_ORDER, "hello was already received")

    async def _hello(self, hello: Hello) -> None:
        if hello.protocol != PROTOCOL_VERSION:
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_PROTOCOL,
                f"protocol {hello.protocol} is not supported; use {PROTOCOL_VERSION}",
            )
        parts = self.parts
        peer = self.ws.client.host if self.ws.client is not None else "?"
        keys = parts.logins.keys(hello.credential_id, peer)
        now_s = time.monotonic()  # the clock the HTTP routes spend the same budget on
        if parts.logins.wait_s(keys, now_s) > 0:
            self.fatal(ErrorCode.RATE_LIMITED, "too many failed hellos; retry later",
                       retryable=True)
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
            self.fatal(exc.code, exc.message, retryable=exc.retryable)
            return
        except Exception:
            log.exception("worker hello failed", extra=fields("worker_hello_failed"))
            self.fatal(ErrorCode.UNAVAILABLE, "the server cannot accept workers right now",
                       retryable=True)
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
        if binding.valid_until_ms is not None:
            self._valid_until = self._loop.time() + (binding.valid_until_ms - now_ms) / 1000
        session = WorkerSession(new_id(now_ms), binding, hello.capacity, self.send, self.close)
        session.last_frame_at = self._last_seen
        self.session = session
        dispatcher.attach(session)
        log.info("worker %s connected to queue %s (%s, %d slots, %s)", binding.instance_id,
                 binding.queue_id, hello.agent or "unknown agent", hello.capacity,
                 ", ".join(str(c) for c in binding.capabilities), extra=fields(
                     "worker_connected", instance_id=binding.instance_id,
                     queue_id=binding.queue_id, session_id=session.session_id,
                     credential_id=binding.credential_id, agent=hello.agent,
                     slots=hello.capacity,
                     capabilities=[str(c) for c in binding.capabilities]))
        cfg = self.config
        self.send(Welcome(
            session_id=session.session_id,
            session_ttl_ms=cfg.session_ttl_ms,
            heartbeat_ms=cfg.heartbeat_ms,
            kill_grace_ms=cfg.kill_grace_ms,
            server_time_ms=now_ms,
            max_batch_ops=MAX_BATCH_OPS,
        ))

    def _request(self, session: WorkerSession, request: Request) -> None:
        if self._in_flight:
            raise ProtocolError(ErrorCode.CONCURRENT_REQUEST,
                                "a request is already in flight on this connection")
        if self._last_request_id is not None and request.id <= self._last_request_id:
            raise ProtocolError(ErrorCode.OUT_OF_ORDER,
                                f"request id {request.id} was not greater than the previous "
                                f"({self._last_request_id})")
        self.parts.dispatcher.check_claims(session, request.ops)
        self._last_request_id = request.id
        self._in_flight = True
        self._request_task = asyncio.create_task(self._process(session, request))

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

    async def _process(self, session: WorkerSession, request: Request) -> None:
        dispatcher = self.parts.dispatcher
        drain = any(isinstance(op, DrainOp) for op in request.ops)
        try:
            if drain:
                dispatcher.stop_dispatching(session)
            if any(isinstance(op, ClaimOp) for op in request.ops):
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
                self.parts.apply(effects)
            if drain:
                # A dispatch pass already under way sends its reserve frame before this answer.
                async with session.lock:
                    pass
            self.send(Response(request.id, tuple(results)))
        finally:
            self._in_flight = False


def ws_routes(parts: ServerParts) -> list[WebSocketRoute]:
    """The worker endpoint, one ``WorkerConnection`` per socket."""


    async def worker_endpoint(websocket: WebSocket) -> None:
        try:
            await WorkerConnection(parts, websocket).run()
        except Exception:  # one connection's failure must never reach the server
            log.exception("worker connection failed", extra=fields("worker_connection_failed"))

    return [WebSocketRoute("/v1/worker", worker_endpoint)]
