"""The tallies the hot paths count into: Prometheus bucket semantics and snapshots."""

from __future__ import annotations

import math

from orbit_host.tally import Bounded, Counts, Histogram, LabeledHistograms


def test_a_value_on_a_bound_falls_in_that_bucket_and_buckets_cumulate() -> None:
    b = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 7.0):
        b.observe(v)
    cumulative, total = b.snapshot()
    assert cumulative == [(0.1, 2), (1.0, 4), (math.inf, 5)]  # "le": less than or equal
    assert total == 0.05 + 0.1 + 0.5 + 1.0 + 7.0


def test_counts_and_labeled_buckets_keep_each_label_tuple_apart() -> None:
    c = Counts()
    c.add(("q1", "SUCCEEDED"))
    c.add(("q1", "SUCCEEDED"), 2)
    c.add(("q2", "FAILED"))
    snap = c.snapshot()
    assert snap == {("q1", "SUCCEEDED"): 3, ("q2", "FAILED"): 1}
    c.add(("q2", "FAILED"))
    assert snap[("q2", "FAILED")] == 1  # a snapshot is a copy
    h = LabeledHistograms((1.0,))
    h.observe(("a",), 0.5)
    h.observe(("b",), 2.0)
    assert h.snapshot() == {("a",): ([(1.0, 1), (math.inf, 1)], 0.5),
                            ("b",): ([(1.0, 0), (math.inf, 1)], 2.0)}


def test_bounded_labels_keep_the_first_values_and_fold_the_rest() -> None:
    label = Bounded(2)
    assert [label(v) for v in ("A", "B", "C", "A", "D", "B")] == ["A", "B", "OTHER", "A",
                                                                   "OTHER", "B"]
