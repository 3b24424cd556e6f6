"""The producer channel of the blocking client: one WebSocket (``websockets.sync``) shared by
every thread that submits or waits, and one reader thread per connection.

A thin driver of ``ChannelCore`` (channel_core.py), which holds the state under ``_lock``:
each call registers itself there with a box (a ``queue.SimpleQueue``), sends the frames the
core returns, and blocks on its box. The reader thread hands every frame to the core and runs
the posts it returns. When the connection drops while calls wait, the reader thread opens a
new one (a few tries with pauses); the core then sends again every submit not answered and
every watch still needed. Openings are serialized by ``_connecting``.

Messages are taken on websockets' own receiving thread as it parses them (``_DirectConnection``):
no queue to the reader thread and no wake-up of it per message. The reader thread reads only
what that thread leaves to websockets' queue (a message before the connection was started, a
fragmented or binary one, the one that drops the connection) and notices the end.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import queue
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

from websockets.exceptions import ConnectionClosed
from websockets.frames import DATA_OPCODES, Frame, Opcode
from websockets.protocol import Event
from websockets.sync.client import ClientConnection, connect

from .channel_core import run_posts
from .channel_link import (
    CLOSE_TIMEOUT_S,
    ChannelBase,
    ChannelRefused,
    closed_error,
    opening_failure,
)
from .errors import ServerUnreachable, unreachable

__all__ = ["BlockingChannel"]

log = logging.getLogger("orbit.client.channel")
# websockets 17.1 deprecates a connection opened outside a ``with`` block unless asked for
# with ``legacy=True`` (a flag older versions do not know): this one outlives any block.
_DIRECT: dict[str, Any] = (
    {"legacy": True} if "legacy" in inspect.signature(connect).parameters else {})
_JOIN_S = 2 * CLOSE_TIMEOUT_S


class _DirectConnection(ClientConnection):
    """websockets' blocking client connection that offers each whole text message to
    ``take`` on its receiving thread. ``take`` returns False to leave a message to the queue
    (the reader thread's): from then on every data frame goes there, so order holds."""

    def __init__(self, *args: Any, take: Callable[[_DirectConnection, str], bool],
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._take = take
        self.direct = True
        self.dropped = False  # the message queued last ends the connection

    def process_event(self, event: Event) -> None:
        if self.direct and self.response is not None and isinstance(event, Frame) \
                and event.opcode in DATA_OPCODES:
            if event.opcode is Opcode.TEXT and event.fin:
                try:
                    text: str | None = bytes(event.data).decode()
                except UnicodeDecodeError:  # the reader's decode raises it, as before
                    text = None
                if text is not None and self._take(self, text):
                    return
            self.direct = False
        super().process_event(event)


class BlockingChannel(ChannelBase):
    """The channel to one server, opened on first use. ``submit`` and ``settled`` raise
    ChannelRefused when the server refuses the channel (the caller uses HTTP then), and
    OrbitApiError as HTTP calls do."""

    def __init__(self, base_url: str, headers: Mapping[str, str], tls: ssl.SSLContext | None,
                 timeout: float) -> None:
        super().__init__(base_url, headers, tls, timeout)
        self._lock = threading.Lock()
        self._connecting = threading.Lock()
        self._ws: ClientConnection | None = None
        self._closed = threading.Event()
        self._readers: list[threading.Thread] = []

    def submit(self, queue_id: str, specs: Sequence[bytes]) -> list[dict[str, Any]]:
        """Submit TaskSpec texts (each with its operation key); their task views once the
        server committed them."""
        box: queue.SimpleQueue[Any] = queue.SimpleQueue()
        with self._lock:
            request, frames = self._core.submit(queue_id, specs, box.put)
            ws = self._ws
        try:
            self._send_or_open(ws, frames)
            answer = box.get(timeout=self._timeout)
        except queue.Empty:
            raise unreachable(self.url, "ReadTimeout") from None
        finally:
            with self._lock:
                self._core.abandon(request)
        if isinstance(answer, BaseException):
            raise answer
        return list(answer)

    def settled(self, task_ids: Iterable[str], timeout: float
                ) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """``(task_id, view)`` for each task as it settles, until all have or ``timeout``
        seconds passed; ``view`` None: the server knows no such task."""
        deadline = time.monotonic() + timeout
        wanted = list(dict.fromkeys(task_ids))
        box: queue.SimpleQueue[Any] = queue.SimpleQueue()
        with self._lock:
            waiter, posts, frames = self._core.wait(wanted, box.put)
            ws = self._ws
        try:
            run_posts(posts)
            self._send_or_open(ws, frames)
            for _ in wanted:
                try:  # what was delivered already comes even when the time is up
                    item = box.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            with self._lock:
                self._core.stop_waiting(waiter)

    def close(self) -> None:
        """Fail every waiting call, close the connection; later calls raise ChannelRefused."""
        self._closed.set()
        with self._lock:
            ws, self._ws = self._ws, None
            posts = self._core.fail_all(closed_error())
            self._core.disconnected()
            readers = list(self._readers)
        run_posts(posts)
        if ws is not None:
            ws.close()
        for reader in readers:
            if reader is not threading.current_thread():
                reader.join(timeout=_JOIN_S)

    # ------------------------------------------------------------------ the connection

    def _send_or_open(self, ws: ClientConnection | None, frames: list[bytes]) -> None:
        if ws is None:
            self._open()
        else:
            _send(ws, frames)

    def _open(self) -> None:
        """Open a connection while calls wait and none is open: a few tries with pauses;
        when they are spent, or the server refuses, every waiting call fails."""
        with self._connecting:
            failure: Exception = unreachable(self.url, "ConnectionRefusedError")
            while True:
                with self._lock:
                    if self._closed.is_set():
                        failure = ChannelRefused(None, True)
                        pause = None
                    elif self._ws is not None or not self._core.busy:
                        return
                    else:
                        pause = self._core.next_pause()
                    if pause is None:
                        posts = self._core.fail_all(failure)
                if pause is None:
                    run_posts(posts)
                    return
                if pause and self._closed.wait(pause):
                    continue
                direct = functools.partial(_DirectConnection, take=self._take)
                try:
                    ws = connect(self.url, **{**self._options, **_DIRECT},
                                 create_connection=cast("type[ClientConnection]", direct))
                except Exception as exc:
                    failure = opening_failure(self.url, exc)
                    with self._lock:
                        if isinstance(failure, ServerUnreachable):
                            self._core.connect_failed()
                            continue
                        posts = self._core.fail_all(failure)
                    run_posts(posts)
                    return
                self._start(ws)
                return

    def _start(self, ws: ClientConnection) -> None:
        reader = threading.Thread(target=self._read, args=(ws,), daemon=True,
                                  name="orbit-channel-reader")
        with self._lock:
            if self._closed.is_set():
                frames = None
            else:
                self._ws = ws
                frames = self._core.connected()
                self._readers = [r for r in self._readers if r.is_alive()] + [reader]
        if frames is None:
            ws.close()
            return
        reader.start()
        _send(ws, frames)

    def _take(self, ws: _DirectConnection, text: str) -> bool:
        """A message on websockets' receiving thread: taken as the reader would, unless the
        connection is not this channel's yet; False leaves it to the reader thread."""
        with self._lock:
            if self._ws is not ws:
                return False
            try:
                reaction = self._core.receive(text)
            except Exception:  # a bug here must not leave callers waiting unseen
                log.exception("the producer channel's reader failed")
                ws.dropped = True
                return False
        run_posts(reaction.posts)
        if reaction.drop:  # the reader thread wakes on it and closes the connection
            ws.dropped = True
            return False
        return True

    def _read(self, ws: ClientConnection) -> None:
        try:
            for data in ws:
                if getattr(ws, "dropped", False):
                    break
                with self._lock:
                    reaction = self._core.receive(data)
                run_posts(reaction.posts)
                if reaction.drop:
                    break
        except (ConnectionClosed, OSError):
            pass
        except Exception:  # a bug here must not leave callers waiting unseen
            log.exception("the producer channel's reader failed")
        finally:
            ws.close()
        with self._lock:
            if self._ws is ws:
                self._ws = None
                self._core.disconnected()
            again = self._core.busy and not self._closed.is_set()
        if again:
            self._open()


def _send(ws: ClientConnection, frames: list[bytes]) -> None:
    # A failed send is the reader's to notice: it reconnects and the core sends again.
    with contextlib.suppress(ConnectionClosed, OSError):
        for frame in frames:
            ws.send(frame.decode())
