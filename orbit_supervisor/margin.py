"""The local-expiry margin, from what this supervisor measures (pure: no I/O, no clock).

A kill is whole when, before the server's lease ends, the child is gone and the kill's
report has arrived. After the local expiry that takes:

- the event loop's lateness in running the lease timer (``loop lag``),
- then, at the same time, the kernel tearing the child down (``kill → reap``) and the
  report's trip to the server, which may first wait for the request in flight: at most
  1.5 round trips (the rest of the one in flight, then half of its own).

So the margin is ``lag + max(reap, 1.5 * round trip)``, each the largest of its recent
samples, within ``[floor, MAX_MARGIN]``: the floor is the configured report margin (50 ms
for ``orbit-supervise``; a floor of 0 turns the margin off, for exact times in tests), and
the ceiling bounds what the kill takes off an attempt's time when the machine is slow.
``lease.Lease`` caps it again at a tenth of the task's lease TTL.
"""

from __future__ import annotations

from collections import deque

__all__ = ["MAX_MARGIN", "WINDOW", "MarginEstimator"]

MAX_MARGIN = 0.150  # seconds: the kill never comes more than this before the granted expiry
WINDOW = 32  # recent samples of each kind that count


class MarginEstimator:
    """Feed samples with ``round_trip``, ``loop_lag`` and ``reap`` (seconds); ``value()`` is
    the margin a new grant should use."""

    __slots__ = ("_floor", "_lag", "_reap", "_rtt", "_value")

    def __init__(self, floor: float) -> None:
        self._floor = max(0.0, floor)
        self._rtt: deque[float] = deque(maxlen=WINDOW)
        self._lag: deque[float] = deque(maxlen=WINDOW)
        self._reap: deque[float] = deque(maxlen=WINDOW)
        self._value: float | None = None  # cached until the next sample

    def round_trip(self, seconds: float) -> None:
        self._add(self._rtt, seconds)

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
        need = (max(self._lag, default=0.0)
                + max(max(self._reap, default=0.0), 1.5 * max(self._rtt, default=0.0)))
        return min(max(self._floor, need), max(self._floor, MAX_MARGIN))
