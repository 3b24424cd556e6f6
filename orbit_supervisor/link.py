"""The session's connection to the server: its lifecycle table and its clocks (pure).

``CONNS`` is the lifecycle as (state, event) -> state (machine.py)::

    IDLE ─START─► CONNECTING ─OPENED─► HELLO_SENT ─WELCOMED─────────────► READY
                      ▲                     └─RESUME_SENT─► RESUMING ─RESUMED─┘
                      └──────── LOST (refused, dropped, silent) ◄── any of these
    every state but DONE ─ENDED─► DONE

``Link`` keeps it with what the connection's timers need: the welcome's heartbeat, session
TTL and batch bound, when a frame was last sent and received, and the reconnect backoff
(orbit_host/backoff.py, a fresh one after each welcome). The session decides; ``Link``
answers when each connection timer is due.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum

from orbit_host.backoff import delays
from orbit_wire.frames import Welcome
from orbit_wire.limits import FEATURE_GRANT, MAX_BATCH_OPS

from .machine import next_state

__all__ = [
    "CONNS", "DEFAULT_SESSION_TTL", "HELLO_TIMEOUT", "MAX_HEARTBEAT_MS", "SENT_FRAMES_KEPT",
    "Conn", "ConnEvent", "Link",
]

HELLO_TIMEOUT = 10.0  # seconds to wait for ``welcome`` before dropping the connection
DEFAULT_SESSION_TTL = 15.0  # until the welcome tells us the server's
MAX_HEARTBEAT_MS = 5000  # docs/protocol.md: heartbeat every TTL/3, at most 5 s
# When each of the connection's last frames was sent, for a grant's basis. Frames the server
# has not read yet are few (heartbeats, credit, one request); a basis further back than
# this is answered as expired.
SENT_FRAMES_KEPT = 1024
_JITTER = 0.5  # a reconnect waits between half its backoff delay and all of it


class Conn(StrEnum):
    IDLE = "IDLE"  # start() not called yet
    CONNECTING = "CONNECTING"  # a Connect action (with its backoff delay) is being performed
    HELLO_SENT = "HELLO_SENT"
    RESUMING = "RESUMING"  # resume request in flight; no credit yet
    READY = "READY"
    DONE = "DONE"


class ConnEvent(StrEnum):
    START = "START"  # the first Connect
    OPENED = "OPENED"  # the socket is open: hello goes out
    WELCOMED = "WELCOMED"  # welcome, and nothing started to resume
    RESUME_SENT = "RESUME_SENT"  # welcome, and the resume request went out
    RESUMED = "RESUMED"  # the resume request was answered
    LOST = "LOST"  # the connection failed or ended: connect again after a backoff
    ENDED = "ENDED"  # the run is over (drained, shutdown timeout, fatal error)


_OPEN = (Conn.HELLO_SENT, Conn.RESUMING, Conn.READY)

CONNS: Mapping[Conn, Mapping[ConnEvent, Conn]] = {
    Conn.IDLE: {ConnEvent.START: Conn.CONNECTING, ConnEvent.ENDED: Conn.DONE},
    Conn.CONNECTING: {ConnEvent.OPENED: Conn.HELLO_SENT, ConnEvent.LOST: Conn.CONNECTING,
                      ConnEvent.ENDED: Conn.DONE},
    Conn.HELLO_SENT: {ConnEvent.WELCOMED: Conn.READY, ConnEvent.RESUME_SENT: Conn.RESUMING,
                      ConnEvent.LOST: Conn.CONNECTING, ConnEvent.ENDED: Conn.DONE},
    Conn.RESUMING: {ConnEvent.RESUMED: Conn.READY, ConnEvent.LOST: Conn.CONNECTING,
                    ConnEvent.ENDED: Conn.DONE},
    Conn.READY: {ConnEvent.LOST: Conn.CONNECTING, ConnEvent.ENDED: Conn.DONE},
    Conn.DONE: {},
}


class Link:
    """The connection's state (``fire``) and clocks; ``sent`` and ``received`` stamp each
    frame, ``welcomed`` adopts the server's settings."""

    __slots__ = ("_backoff", "_draw", "_max_delay", "_min_delay", "_sent_at", "frames_sent",
                 "grants", "heartbeat", "last_received", "last_sent", "max_batch",
                 "reconnects", "session_ttl", "state", "welcomed_once")

    def __init__(self, min_delay: float, max_delay: float, draw: Callable[[], float]) -> None:
        self.state = Conn.IDLE
        self._min_delay, self._max_delay, self._draw = min_delay, max_delay, draw
        self._backoff = self._new_backoff()
        self.heartbeat = DEFAULT_SESSION_TTL / 3
        self.session_ttl = DEFAULT_SESSION_TTL
        self.max_batch = MAX_BATCH_OPS
        self.last_sent = 0.0
        self.last_received = 0.0
        self.welcomed_once = False
        self.reconnects = 0  # welcomes after the first
        # This connection's frames, numbered from 1 (the hello), and when each was sent; and
        # whether the server grants leases with the dispatch on it (its welcome says).
        self.frames_sent = 0
        self._sent_at: deque[float] = deque(maxlen=SENT_FRAMES_KEPT)
        self.grants = False

    def fire(self, event: ConnEvent) -> Conn:
        self.state = next_state(CONNS, self.state, event, "connection")
        if event is ConnEvent.OPENED:  # a new connection numbers its frames from 1
            self.frames_sent = 0
            self._sent_at.clear()
            self.grants = False
        return self.state

    @property
    def open(self) -> bool:
        """A connection is open (hello sent, resuming or ready)."""
        return self.state in _OPEN

    @property
    def ready(self) -> bool:
        return self.state is Conn.READY

    @property
    def done(self) -> bool:
        return self.state is Conn.DONE

    def sent(self, now: float) -> None:
        """A frame is queued to be sent at ``now`` (before the driver writes it)."""
        self.last_sent = now
        self.frames_sent += 1
        self._sent_at.append(now)

    def sent_at(self, frame: int) -> float | None:
        """When this connection's frame number ``frame`` was queued, or None when it is not
        one of the frames sent (or too far back to be kept)."""
        back = self.frames_sent - frame
        if frame < 1 or back < 0 or back >= len(self._sent_at):
            return None
        return self._sent_at[-1 - back]

    def received(self, now: float) -> None:
        self.last_received = now

    def welcomed(self, frame: Welcome) -> None:
        """Adopt the welcome's heartbeat, TTL and batch bound; a success resets the backoff."""
        self.heartbeat = min(frame.heartbeat_ms, MAX_HEARTBEAT_MS) / 1000.0
        self.session_ttl = frame.session_ttl_ms / 1000.0
        self.max_batch = max(1, min(frame.max_batch_ops, MAX_BATCH_OPS))
        self.grants = FEATURE_GRANT in frame.features
        self._backoff = self._new_backoff()
        if self.welcomed_once:
            self.reconnects += 1
        self.welcomed_once = True

    def reconnect_delay(self) -> float:
        """LOST: the connection ended; the delay before the next try."""
        self.fire(ConnEvent.LOST)
        return next(self._backoff)

    def overdue(self, now: float) -> str | None:
        """Why the connection must be dropped now (no welcome in time, or a server silent
        for its session TTL), or None."""
        if self.state is Conn.HELLO_SENT and now >= self.last_received + HELLO_TIMEOUT:
            return "WELCOME_TIMEOUT"
        if self.state in (Conn.RESUMING, Conn.READY) and (
                now >= self.last_received + self.session_ttl):
            return "SERVER_SILENT"
        return None

    def heartbeat_due(self, now: float) -> bool:
        return (self.state in (Conn.RESUMING, Conn.READY)
                and now >= self.last_sent + self.heartbeat)

    def timers(self) -> list[float]:
        """The instants ``overdue`` or ``heartbeat_due`` may change answer."""
        if self.state is Conn.HELLO_SENT:
            return [self.last_received + HELLO_TIMEOUT]
        if self.state in (Conn.RESUMING, Conn.READY):
            return [self.last_received + self.session_ttl, self.last_sent + self.heartbeat]
        return []

    def _new_backoff(self) -> Iterator[float]:
        return delays(self._min_delay, self._max_delay, jitter=_JITTER, draw=self._draw,
                      at_least=self._min_delay)
