"""The parent's end of one child's stream socket: frames in, bytes out, on the loop.

A ``ChildChannel`` lives as long as one child (one generation): the pool opens one per
fork and closes it when it forgets the child. It decodes what the child sends
(orbit_host.framing) and hands each frame to ``on_frame``, one at a time; a frame may make
the pool kill and replace the child, which closes the channel, and then no further frame
of it is delivered. ``send`` never blocks: what the socket does not take now is written
when it becomes writable.

The end of the child's side (EOF, a failed read or a failed write) calls ``on_eof`` once,
with the write error if there was one; a frame that cannot be decoded calls ``on_broken``.
What follows (killing the child, replacing it) is the pool's decision.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from orbit_host.framing import FrameDecoder, FrameError

__all__ = ["ChildChannel"]

# Under malloc's mmap threshold (128 KiB): a larger buffer costs an mmap, mremap and munmap
# per read, that is per task; a large frame takes a few reads instead.
_READ_CHUNK = 64 * 1024


class ChildChannel:
    """Registered with ``loop`` from construction until ``close()``."""

    __slots__ = ("_closed", "_decoder", "_loop", "_on_broken", "_on_eof", "_on_frame",
                 "_outbuf", "_sock", "_writing", "eof")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, *,
                 on_frame: Callable[[dict[str, Any]], None],
                 on_eof: Callable[[OSError | None], None],
                 on_broken: Callable[[FrameError], None]) -> None:
        """``sock`` must be non-blocking; the channel owns it from now on. ``on_frame``
        receives each decoded frame (a JSON object, not yet checked)."""
        self._loop = loop
        self._sock = sock
        self._decoder = FrameDecoder()
        self._outbuf = bytearray()
        self._writing = False  # a writer callback is registered for the socket
        self._closed = False
        self._on_frame = on_frame
        self._on_eof = on_eof
        self._on_broken = on_broken
        self.eof = False  # the child's side ended (on_eof was called)
        loop.add_reader(sock.fileno(), self._on_readable)

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the child and write what the socket takes now. A broken
        socket ends the channel like an EOF (``on_eof`` with the error)."""
        if self._closed:
            return
        if not self._outbuf:  # the usual case: the socket takes it all now, uncopied
            try:
                sent = self._sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self._ended(exc)
                return
            if sent == len(data):
                return
            data = data[sent:]
        self._outbuf += data
        self._flush()

    def close(self) -> None:
        """Unregister from the loop and close the socket (idempotent); unsent bytes are
        dropped."""
        if self._closed:
            return
        self._closed = True
        fd = self._sock.fileno()
        self._loop.remove_reader(fd)
        if self._writing:
            self._loop.remove_writer(fd)
            self._writing = False
        self._sock.close()
        self._outbuf.clear()

    def _on_readable(self) -> None:
        sock = self._sock
        while not self._closed:
            try:
                data = sock.recv(_READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._ended(None)
                return
            try:
                frames = self._decoder.feed(data)
            except FrameError as exc:
                self._on_broken(exc)
                return
            for frame in frames:
                if self._closed:  # an earlier frame made the pool forget this child
                    return
                self._on_frame(frame)
            if len(data) < _READ_CHUNK:
                return  # all there was: the loop calls again when more comes

    def _flush(self) -> None:
        if self._closed:
            return
        sock = self._sock
        while self._outbuf:
            try:
                sent = sock.send(self._outbuf)
            except BlockingIOError:
                if not self._writing:
                    self._loop.add_writer(sock.fileno(), self._flush)
                    self._writing = True
                return
            except OSError as exc:
                self._outbuf.clear()
                self._ended(exc)
                if self._closed:
                    return
                break
            del self._outbuf[:sent]
        if self._writing:
            self._loop.remove_writer(sock.fileno())
            self._writing = False

    def _ended(self, error: OSError | None) -> None:
        """The child's side ended: stop reading, and tell the pool once."""
        if not self._closed:
            self._loop.remove_reader(self._sock.fileno())
        if self.eof:
            return
        self.eof = True
        self._on_eof(error)
