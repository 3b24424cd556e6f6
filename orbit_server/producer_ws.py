"""The producer channel (``/v1/producer``, orbit_wire/producer_frames.py): submits and their
results over one WebSocket.

The bearer is the HTTP one (``Authorization`` on the upgrade), checked through the same
verified-token cache and failed-login budget; the roles are HTTP's (producer, admin), every
message re-checks the credential (a revoked, expired or rotated-out one ends the channel,
close 4006), and a revocation closes the credential's channels on every replica within a
push poll (``ProducerChannels.close_credential``). Submits spend the same per-credential
budget as HTTP and run the same use case (orbit_server/submitting.py); several may be in
flight, each answered once committed (group commit lets them share commits). A watched
task is pushed once, as ``ended``, when it settles: woken by the transaction that ended it
(which read its view), else by a re-read every ``RECHECK_S`` (another replica's work).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import orjson
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from orbit_host.logs import fields
from orbit_host.task_owner import TaskOwner
from orbit_wire.errors import AuthError, ErrorCode, OrbitError, ProtocolError
from orbit_wire.model import Role, TaskState
from orbit_wire.producer_frames import (
    Ended,
    Failure,
    ProducerError,
    ServerMessage,
    Submit,
    Submitted,
    Watch,
    Watching,
    decode_client_message,
    encode_message,
)

from .auth import Principal, require_role
from .http_auth import Authenticator
from .parts import ServerParts
from .store.db import is_sqlite
from .submitting import SHARED_RECHECK_S, Submitter
from .worker_protocol import close_code
from .ws_transport import direct_receive
from .ws_writer import FrameWriter

log = logging.getLogger("orbit.producer")

# Submits of one channel in flight at once; past it the channel reads no more until one ends.
MAX_IN_FLIGHT = 256
# Tasks one channel may watch at once (LIMIT_EXCEEDED for a watch past it).
MAX_WATCHED = 100_000
# Watched tasks not settled are read again this often: on a shared database a task another
# replica ended wakes nobody here (the same period as an HTTP wait's re-read); on a SQLite
# file every end is this server's own, and the re-read is only a safety net. A channel that
# watches many tasks re-reads them at most RECHECK_TASKS_PER_S a second, more slowly.
RECHECK_S = SHARED_RECHECK_S
RECHECK_SQLITE_S = 30.0
RECHECK_TASKS_PER_S = 4_000
MAX_QUEUED = 10_000  # frames queued for a peer that does not read: past it, closed
_PRODUCERS = (Role.PRODUCER, Role.ADMIN)


class ProducerChannels:
    """The open channels of this server, by credential (what a revocation closes)."""

    def __init__(self) -> None:
        self._open: set[ProducerChannel] = set()

    def add(self, channel: ProducerChannel) -> None:
        self._open.add(channel)

    def discard(self, channel: ProducerChannel) -> None:
        self._open.discard(channel)

    def close_credential(self, credential_id: str, message: str) -> int:
        """End every channel of this credential: an ``error`` frame, then close 4006."""
        closing = [c for c in self._open if c.credential_id == credential_id]
        for channel in closing:
            channel.fail(AuthError(ErrorCode.UNAUTHENTICATED, message))
        return len(closing)

    def __len__(self) -> int:
        return len(self._open)


class _Watch:
    """One watched task of a channel (a ``TaskWaiters`` watcher)."""

    __slots__ = ("channel", "task_id")

    def __init__(self, channel: ProducerChannel, task_id: str) -> None:
        self.channel = channel
        self.task_id = task_id

    def wake(self, view: dict[str, Any] | None) -> None:
        self.channel.woken(self.task_id, view)


class ProducerChannel:
    """One producer socket from accept to close. ``run()`` returns when it is closed."""

    def __init__(self, parts: ServerParts, websocket: WebSocket, channels: ProducerChannels
                 ) -> None:
        self.parts = parts
        self.ws = websocket
        self._channels = channels
        self._auth = Authenticator(parts)
        self._submitter = Submitter(parts)
        self._tasks_service = parts.services.tasks
        self._out = FrameWriter(websocket)
        self._owner = TaskOwner(log)
        self._flying = 0  # requests under way (at most MAX_IN_FLIGHT)
        self._room = asyncio.Event()  # set when one lands
        self._watched: dict[str, _Watch] = {}
        self._rereading: set[str] = set()
        self._closing = False
        self._close_code = 1000
        self.principal: Principal | None = None
        self.credential_id: str | None = None

    # -------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        await self.ws.accept()
        try:
            self.principal = await self._auth.principal(self.ws)
            require_role(self.principal, _PRODUCERS)
        except OrbitError as exc:
            await self._send_now(ProducerError(_failure(exc)))
            with contextlib.suppress(Exception):
                await self.ws.close(close_code(exc.code), exc.code.value)
            return
        self.credential_id = self.principal.credential_id
        self._channels.add(self)
        owner = self._owner
        reader = owner.start(self._read_loop(), "orbit-producer-reader")
        writer = owner.start(self._out.run(), "orbit-producer-writer")
        recheck = owner.start(self._recheck_loop(), "orbit-producer-recheck")
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._channels.discard(self)
            for task_id, watch in self._watched.items():
                self.parts.waiters.unregister(task_id, watch)
            self._watched.clear()
            await owner.stop(reader, recheck)
            # Submits under way finish (their transactions may be running), unanswered.
            self._closing = True
            await owner.join()

    def fail(self, exc: OrbitError) -> None:
        """A connection-level error: tell the peer, then close with the error's code."""
        if self._closing:
            return
        self._closing = True
        self._close_code = close_code(exc.code)
        self._queue(ProducerError(_failure(exc)))
        self._out.close(self._close_code)

    # -------------------------------------------------------------- reading

    async def _read_loop(self) -> None:
        # Each message is taken in the transport's callback while the credential is cached
        # and a request may start; this loop reads what that leaves (and re-arms it).
        direct = direct_receive(self.ws.scope)
        while not self._closing:
            if direct is not None:
                direct(self._take)
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                self._closing = True
                self._out.close(self._close_code)
                return
            try:
                frame = self._decode(message.get("text"))
                principal = await self._current_principal()
            except OrbitError as exc:
                self.fail(exc)
                return
            while self._flying >= MAX_IN_FLIGHT:
                self._room.clear()
                await self._room.wait()
            self._start(principal, frame)

    def _take(self, text: str) -> bool:
        """A message taken in the transport's callback, as the read loop takes it; False
        leaves it to the loop: a request cannot start now, or the credential must be read."""
        if self._closing:
            return True  # the loop stops reading at a close as well
        if self._flying >= MAX_IN_FLIGHT:
            return False
        principal = self._auth.cached(self.ws)
        if principal is None:
            return False
        try:
            frame = self._decode(text)
            require_role(principal, _PRODUCERS)
        except OrbitError as exc:
            self.fail(exc)
            return True
        self._start(principal, frame)
        return True

    def _decode(self, text: str | None) -> Submit | Watch:
        """One message read (counted), as a request; BAD_FRAME for a binary one."""
        self.parts.traffic.producer_in += 1
        if text is None:
            raise ProtocolError(ErrorCode.BAD_FRAME, "binary frames are not accepted")
        return decode_client_message(text)

    def _start(self, principal: Principal, frame: Submit | Watch) -> None:
        self._flying += 1
        task = self._owner.start(self._serve(principal, frame), "orbit-producer-request")
        task.add_done_callback(self._landed)

    def _landed(self, _task: asyncio.Task[None]) -> None:
        self._flying -= 1
        self._room.set()

    async def _current_principal(self) -> Principal:
        """The credential as it is now (cached for a few seconds, as for HTTP): a revoked,
        expired or rotated-out one ends the channel."""
        principal = await self._auth.principal(self.ws)
        require_role(principal, _PRODUCERS)
        return principal

    async def _serve(self, principal: Principal, frame: Submit | Watch) -> None:
        try:
            if isinstance(frame, Submit):
                await self._submit(principal, frame)
            else:
                await self._watch(principal, frame)
        except OrbitError as exc:
            self._queue(ProducerError(_failure(exc), frame.id))
        except Exception:
            log.exception("a producer request failed", extra=fields("producer_request_failed"))
            self._queue(ProducerError(Failure(ErrorCode.INTERNAL.value, "internal error; "
                                              "retry", True), frame.id))

    async def _submit(self, principal: Principal, frame: Submit) -> None:
        self._submitter.check_rate(principal, len(frame.tasks))
        made = await self._submitter.submit(principal, frame.queue_id, frame.tasks)
        views = [task for task, _created in made]
        if frame.watch:  # before any await: the work that ends them is applied later
            self._watch_views(views)
        self._queue(Submitted(frame.id, tuple(_raw(view) for view in views)))

    async def _watch(self, principal: Principal, frame: Watch) -> None:
        wanted = [t for t in dict.fromkeys(frame.task_ids) if t not in self._watched]
        if len(self._watched) + len(wanted) > MAX_WATCHED:
            raise OrbitError(ErrorCode.LIMIT_EXCEEDED,
                             f"a channel watches at most {MAX_WATCHED} tasks at once")
        for task_id in wanted:  # registered before the read: no wake-up is missed
            self._register(task_id)
        try:
            found = await self.parts.store.call(self._tasks_service.get_tasks, principal,
                                                wanted)
        except BaseException:
            for task_id in wanted:
                self._unwatch(task_id)
            raise
        unknown = tuple(t for t in wanted if t not in found)
        for task_id in unknown:
            self._unwatch(task_id)
        self._queue(Watching(frame.id, unknown))
        for view in found.values():
            self._settled(view)

    # -------------------------------------------------------------- watches

    def _watch_views(self, views: Sequence[dict[str, Any]]) -> None:
        for view in views:
            if view["id"] not in self._watched:
                self._register(view["id"])
            self._settled(view)

    def _register(self, task_id: str) -> None:
        watch = _Watch(self, task_id)
        self._watched[task_id] = watch
        self.parts.waiters.watch(task_id, watch)

    def _unwatch(self, task_id: str) -> None:
        watch = self._watched.pop(task_id, None)
        if watch is not None:
            self.parts.waiters.unregister(task_id, watch)

    def _settled(self, view: dict[str, Any]) -> bool:
        """Push ``view`` if its task settled (once: it is watched no more)."""
        task_id = view["id"]
        if task_id not in self._watched or not TaskState(view["state"]).settled:
            return False
        self._unwatch(task_id)
        self._queue(Ended(_raw(view)))
        return True

    def woken(self, task_id: str, view: dict[str, Any] | None) -> None:
        """A transaction may have settled a watched task (``view``: read in it)."""
        if view is not None and self._settled(view):
            return
        if task_id in self._watched and task_id not in self._rereading and not self._closing:
            self._rereading.add(task_id)
            self._owner.start(self._reread([task_id]), "orbit-producer-reread")

    async def _reread(self, task_ids: list[str]) -> None:
        try:
            principal = self.principal
            assert principal is not None
            found = await self.parts.store.call(self._tasks_service.get_tasks, principal,
                                                task_ids)
        except OrbitError:
            return  # the next recheck reads them again
        finally:
            self._rereading.difference_update(task_ids)
        for view in found.values():
            self._settled(view)

    async def _recheck_loop(self) -> None:
        period = RECHECK_SQLITE_S if is_sqlite(self.parts.config.db_url) else RECHECK_S
        while True:
            await asyncio.sleep(max(period, len(self._watched) / RECHECK_TASKS_PER_S))
            pending = [t for t in self._watched if t not in self._rereading]
            if pending:
                self._rereading.update(pending)
                await self._reread(pending)

    # -------------------------------------------------------------- writing

    def _queue(self, message: ServerMessage) -> None:
        if self._out.pending() >= MAX_QUEUED:
            self.fail(OrbitError(ErrorCode.UNAVAILABLE, "the producer is not reading"))
            return
        self.parts.traffic.producer_out += 1
        self._out.put(encode_message(message))

    async def _send_now(self, message: ServerMessage) -> None:
        with contextlib.suppress(Exception):
            await self.ws.send({"type": "websocket.send",
                                "text": encode_message(message).decode()})


def _raw(view: dict[str, Any]) -> msgspec.Raw:
    """A task view as the HTTP API writes it (its payload and result are stored JSON text,
    embedded unchanged)."""
    return msgspec.Raw(orjson.dumps(view))


def _failure(exc: OrbitError) -> Failure:
    return Failure(exc.code.value, exc.message, exc.retryable)


def producer_routes(parts: ServerParts, channels: ProducerChannels) -> list[WebSocketRoute]:
    async def producer_endpoint(websocket: WebSocket) -> None:
        started = time.monotonic()
        try:
            await ProducerChannel(parts, websocket, channels).run()
        except Exception:  # one connection's failure must never reach the server
            log.exception("producer channel failed after %.1f s", time.monotonic() - started,
                          extra=fields("producer_channel_failed"))

    return [WebSocketRoute("/v1/producer", producer_endpoint)]
