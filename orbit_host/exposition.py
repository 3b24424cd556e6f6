"""Metric families from the tallies (orbit_host/tally.py), for the collectors of the server
and the supervisor: built at scrape time, so counting never touches ``prometheus_client``.
Imported only by a process that exports metrics."""

from __future__ import annotations

import math

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from .tally import Counts

__all__ = ["counter", "histogram"]

HistogramSnapshot = dict[tuple[str, ...], tuple[list[tuple[float, int]], float]]


def counter(name: str, doc: str, labels: tuple[str, ...], counts: Counts) -> Metric:
    """A counter family with one sample per label values counted so far."""
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, n in counts.snapshot().items():
        family.add_metric(values, n)
    return family


def histogram(name: str, doc: str, labels: tuple[str, ...],
              snapshot: HistogramSnapshot) -> Metric:
    """A histogram family from ``LabeledHistograms.snapshot()`` (or one made like it)."""
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, (cumulative, total) in snapshot.items():
        family.add_metric(values, [("+Inf" if math.isinf(b) else str(b), n)
                                   for b, n in cumulative], total)
    return family
