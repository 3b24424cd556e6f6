"""Counters and histogram buckets the hot paths fill (pure: no I/O, no clock, no locks).

The server and the supervisor count what they do into these plain structures, and their
Prometheus collectors (``orbit_server/metrics.py``, ``orbit_supervisor/metrics.py``) read
them at scrape time. Counting is then one dict update or one bisect per event, where a
labelled ``prometheus_client`` metric costs a lock and a label look-up (docs/benchmarks.md,
"Metrics overhead"), and a process that never exports metrics never imports the client
library.

Each structure is written by one thread only; a reader on another thread takes a copy
(``snapshot``), which the GIL makes consistent enough for a scrape: a count and its sum may
be one event apart, never torn.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["LATENCY_BOUNDS", "LONG_BOUNDS", "Bounded", "Counts", "Histogram",
           "LabeledHistograms"]

Labels = tuple[str, ...]

# Upper bounds in seconds. Short: a store transaction, a request, a kill, a replacement.
LATENCY_BOUNDS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                     0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Long: how long a task waited to start, a long poll.
LONG_BOUNDS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0,
                                  60.0, 300.0, 900.0, 3600.0)


class Counts:
    """A counter per tuple of label values."""

    __slots__ = ("_by",)

    def __init__(self) -> None:
        self._by: dict[Labels, float] = {}

    def add(self, labels: Labels, amount: float = 1) -> None:
        by = self._by
        by[labels] = by.get(labels, 0) + amount

    def snapshot(self) -> dict[Labels, float]:
        return dict(self._by)


class Bounded:
    """A label's values, at most ``limit`` distinct ones: past that, a new value is shown as
    ``other``, so a peer that makes up codes cannot grow the exposition without bound."""

    __slots__ = ("_seen", "limit", "other")

    def __init__(self, limit: int, other: str = "OTHER") -> None:
        self._seen: set[str] = set()
        self.limit = limit
        self.other = other

    def __call__(self, value: str) -> str:
        seen = self._seen
        if value in seen:
            return value
        if len(seen) >= self.limit:
            return self.other
        seen.add(value)
        return value


class Histogram:
    """One histogram: observations per upper bound (not cumulated), their sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs to it (Prometheus' "le").
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def snapshot(self) -> tuple[list[tuple[float, int]], float]:
        """Cumulative (upper bound, count) pairs ending with +Inf, and the sum."""
        counts, total = list(self.counts), self.total
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
            running += n
            out.append((bound, running))
        return out, total


class LabeledHistograms:
    """A histogram per tuple of label values, all with the same bounds."""

    __slots__ = ("_by", "bounds")

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS) -> None:
        self.bounds = tuple(bounds)
        self._by: dict[Labels, Histogram] = {}

    def observe(self, labels: Labels, value: float) -> None:
        histogram = self._by.get(labels)
        if histogram is None:
            histogram = self._by[labels] = Histogram(self.bounds)
        histogram.observe(value)

    def snapshot(self) -> dict[Labels, tuple[list[tuple[float, int]], float]]:
        return {labels: h.snapshot() for labels, h in list(self._by.items())}

