"""The local-expiry margin, from what this supervisor measures (pure: no I/O, no clock).

What must happen between the local expiry and the server's lease end is that the child is
gone: the event loop runs the lease timer late by its ``loop lag``, then the kernel takes
``kill -> reap`` to tear the SIGKILLed child down. So the margin is ``lag + reap``, each
the largest of its recent samples, within ``[floor, MAX_MARGIN]``.

The report's trip to the server is not part of it: the report leaves with the SIGKILL, and
one that arrives after the lease end still leaves its facts on the attempt (the outcome is
then the server's LEASE_EXPIRED). Counting round trips would only shorten every attempt
on a slow server, down to attempts that never run because their start's answer came back
after a local expiry pulled in by that very round trip.

The floor is the configured report margin (50 ms for ``orbit-supervise``; a floor of 0
turns the margin off, for exact times in tests); the ceiling bounds what the kill takes off
an attempt's time when the machine is slow. ``lease.Lease`` caps it again at a tenth of
the task's lease TTL.
"""

from __future__ import annotations

from collections import deque

__all__ = ["MAX_MARGIN", "WINDOW", "MarginEstimator"]

MAX_MARGIN = 0.250  # seconds: the kill never comes more than this before the granted expiry
WINDOW = 256  # recent samples of each kind that count (a spike is remembered a while)


class MarginEstimator:
    """Feed samples with ``loop_lag`` and ``reap`` (seconds); ``value()`` is the margin a
    new grant should use."""

    __slots__ = ("_floor", "_lag", "_reap", "_value")

    def __init__(self, floor: float) -> None:
        self._floor = max(0.0, floor)
        self._lag: deque[float] = deque(maxlen=WINDOW)
        self._reap: deque[float] = deque(maxlen=WINDOW)
        self._value: float | None = None  # cached until the next sample

    def loop_lag(self, seconds: float) -> None:
        self._add(self._lag, seconds)

    def reap(self, seconds: float) -> None:
        self._add(self._reap, seconds)

    def value(self) -> float:
        if self._value is None:
            self._value = self._compute()
        return self._value

    def recent_loop_lag(self) -> float:
        """The largest recent loop lag (0 before any sample)."""
        return max(self._lag, default=0.0)

    def recent_reap(self) -> float:
        """The largest recent kill → reap latency (0 before any sample)."""
        return max(self._reap, default=0.0)

    def _add(self, window: deque[float], seconds: float) -> None:
        window.append(max(0.0, seconds))
        self._value = None

    def _compute(self) -> float:
        if self._floor <= 0.0:
            return 0.0
        need = max(self._lag, default=0.0) + max(self._reap, default=0.0)
        return min(max(self._floor, need), max(self._floor, MAX_MARGIN))
