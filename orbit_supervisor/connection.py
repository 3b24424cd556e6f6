"""The WebSocket driver of the worker protocol: open, send frames in order, read frames.

It decides nothing: every frame goes to the caller's ``on_frame`` and the session core
decides what happens. ``send`` never waits: it writes the frame to the transport at once
when nothing is queued and the transport takes more, else queues it to one writer task (so
the order of sends is the order of calls); ``abort`` drops the connection at once, without
the closing handshake, because the peer may be unreachable (a blackholed network).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.frames import Frame, Opcode
from websockets.protocol import Event, State

from orbit_host.logs import fields
from orbit_host.task_owner import TaskOwner
from orbit_host.tls import certificate_failure
from orbit_wire.errors import ErrorCode, OrbitError, ProtocolError
from orbit_wire.frames import ClientFrame, ErrorFrame, ServerFrame, decode_server_frame, encode
from orbit_wire.limits import MAX_FRAME_BYTES

OPEN_TIMEOUT = 10.0  # seconds for TCP + TLS + WebSocket handshake
CLOSE_TIMEOUT = 1.0  # a graceful close waits this long for the server's close frame

log = logging.getLogger("orbit.supervisor.connection")
# websockets logs frame text at DEBUG; hello carries secrets, so that logger never goes below
# INFO whatever the root level is.
_WS_LOG = logging.getLogger("orbit.supervisor.websocket")
_WS_LOG.setLevel(logging.INFO)


def worker_url(base_url: str) -> str:
    """``http://host:port[/prefix]`` → ``ws://host:port[/prefix]/v1/worker`` (https → wss)."""
    parts = urlsplit(base_url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ValueError(f"server URL must be http(s)://host:port, got {base_url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1/worker"):
        path += "/v1/worker"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


class ServerUrls:
    """The servers a worker may connect to, in the order given (``--url`` repeated): it stays
    with the one that answered, and a connect that fails moves to the next (after the last,
    the first again). A connection lost is tried again on the same server first."""

    def __init__(self, base_urls: Sequence[str]) -> None:
        if not base_urls:
            raise ValueError("at least one server URL is needed")
        self.all = tuple(worker_url(url) for url in base_urls)
        self._index = 0

    @property
    def current(self) -> str:
        return self.all[self._index]

    def connect_failed(self) -> None:
        self._index = (self._index + 1) % len(self.all)


class ConnectFailed(OrbitError):
    """The server could not be reached or refused the WebSocket handshake: UNAVAILABLE and
    transient (the session backs off and connects again); ``reason`` says which."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, f"{reason}: {detail}", retryable=True)
        self.reason = reason


class _DirectConnection(ClientConnection):
    """websockets' client connection that hands each whole text frame to ``on_text`` in the
    callback that parsed it: no queue, no wake-up of a reader task per frame. Any other data
    frame (a fragment, binary) turns that off for good, so it and every frame after it go
    through websockets' queue in order, to ``Connection.run``'s loop."""

    on_text: Callable[[bytes | bytearray | memoryview], None] | None = None

    def process_event(self, event: Event) -> None:
        on_text = self.on_text
        if on_text is not None and isinstance(event, Frame):
            if event.opcode is Opcode.TEXT and event.fin:
                on_text(event.data)
                return
            if event.opcode is not Opcode.PING and event.opcode is not Opcode.PONG:
                self.on_text = None
        super().process_event(event)


class Connection:
    """One open WebSocket. Use ``open``, then ``run(on_frame)`` until it returns."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._ended: str | None = None  # why a frame read directly ended the connection
        self._failure: Exception | None = None  # what on_frame raised on a direct frame
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._writing = False  # the writer task holds a frame it has not written yet
        self._aborted = False

    @classmethod
    async def open(cls, url: str, *, timeout: float = OPEN_TIMEOUT,
                   ssl_context: ssl.SSLContext | None = None) -> Connection:
        """Connect; raises ConnectFailed (with a short reason) on any transient failure."""
        tls: dict[str, Any] = {} if ssl_context is None else {"ssl": ssl_context}
        try:
            ws = await connect(
                url, open_timeout=timeout, close_timeout=CLOSE_TIMEOUT, **tls,
                ping_interval=None,  # the protocol has its own heartbeats
                max_size=MAX_FRAME_BYTES + 1024, compression=None,
                max_queue=64, logger=_WS_LOG, create_connection=_DirectConnection,
            )
        except TimeoutError as exc:
            raise ConnectFailed("CONNECT_TIMEOUT", str(exc) or "timed out") from None
        except InvalidURI as exc:
            raise ValueError(str(exc)) from None
        except InvalidHandshake as exc:
            raise ConnectFailed("HANDSHAKE_REJECTED", str(exc)) from None
        except ConnectionClosed as exc:  # the peer (a proxy, a dying server) hung up
            raise ConnectFailed("CLOSED_IN_HANDSHAKE", str(exc)) from None
        except ssl.SSLCertVerificationError as exc:
            raise ConnectFailed("TLS_CERTIFICATE", certificate_failure(exc) or str(exc)) from None
        except OSError as exc:
            raise ConnectFailed("UNREACHABLE", exc.strerror or str(exc)) from None
        return cls(ws)

    def send(self, frame: ClientFrame) -> None:
        """Write one frame, after every frame sent before it."""
        if self._aborted:
            return
        data = encode(frame)
        ws = self._ws
        # The writer task costs a loop pass per frame: write here when it holds nothing and
        # the transport is open and not full (what websockets' send would wait for).
        if (not self._writing and self._outbox.empty() and not ws.paused
                and ws.send_in_progress is None and ws.protocol.state is State.OPEN
                and not ws.transport.is_closing()):
            try:
                ws.protocol.send_text(data)
                ws.send_data()
            except Exception as exc:  # OSError: the connection is gone; run() says so
                log.debug("write failed: %s", exc, extra=fields("connection_write_failed"))
                self.abort()
            return
        self._outbox.put_nowait(data)

    async def run(self, on_frame: Callable[[ServerFrame], None]) -> str:
        """Read frames until the connection ends; returns a short reason code.

        A frame that breaks the wire contract is passed on as a fatal ErrorFrame (the
        server broke the protocol; the session ends the run). What ``on_frame`` raises ends
        the connection and is raised here.
        """
        ws = self._ws
        if isinstance(ws, _DirectConnection) and not len(ws.recv_messages.frames):
            ws.on_text = functools.partial(self._on_text, on_frame)
        writer = TaskOwner()
        writer.start(self._write_loop())
        try:
            async for message in ws:
                if not self._take(message, on_frame):
                    return "BAD_SERVER_FRAME"
            return self._ended or "CLOSED_BY_SERVER"
        except ConnectionClosed as exc:
            if self._ended is not None:
                return self._ended
            return "ABORTED" if self._aborted else f"CLOSED_{exc.rcvd.code if exc.rcvd else 1006}"
        except OSError:
            return "NETWORK_ERROR"
        finally:
            if isinstance(ws, _DirectConnection):
                ws.on_text = None
            self._outbox.put_nowait(None)
            await writer.stop()
            self.abort()
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure

    def _take(self, message: str | bytes | bytearray | memoryview,
              on_frame: Callable[[ServerFrame], None]) -> bool:
        """Decode one frame and hand it on; False after a bad one."""
        try:
            frame = decode_server_frame(message)  # type: ignore[arg-type]  # any buffer
        except ProtocolError as exc:
            on_frame(ErrorFrame(exc.code, f"server sent a bad frame: {exc.message}"))
            return False
        on_frame(frame)
        return True

    def _on_text(self, on_frame: Callable[[ServerFrame], None],
                 data: bytes | bytearray | memoryview) -> None:
        """A frame read directly (in websockets' data callback): as run()'s loop would take
        it, but what ends the connection is kept for run() to return or raise. Nothing is
        taken once the connection is dropped."""
        if self._aborted:
            return
        try:
            if not self._take(data, on_frame):
                self._ended = "BAD_SERVER_FRAME"
                self.abort()
        except Exception as exc:
            self._failure = exc
            self.abort()

    async def close(self) -> None:
        """Graceful close (bounded by CLOSE_TIMEOUT), after the queued frames are written."""
        if self._aborted:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self._outbox.join()  # every queued frame written
                await self._ws.close()
        self.abort()

    def abort(self) -> None:
        """Drop the TCP connection now (no closing handshake)."""
        self._aborted = True
        transport = self._ws.transport
        if transport is not None and not transport.is_closing():
            transport.abort()

    async def _write_loop(self) -> None:
        while True:
            data = await self._outbox.get()
            self._writing = True
            try:
                if data is None:
                    return
                await self._ws.send(data, text=True)  # UTF-8 already: no decode
            except ConnectionClosed:
                return
            except OSError as exc:
                log.debug("write failed: %s", exc, extra=fields("connection_write_failed"))
                return
            finally:
                self._writing = False
                self._outbox.task_done()


__all__ = ["ConnectFailed", "Connection", "ServerUrls", "worker_url"]
