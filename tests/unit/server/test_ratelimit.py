"""The token buckets behind the rate limits, on a fake clock."""

from __future__ import annotations

from orbit_server.ratelimit import Buckets, retry_after


def test_burst_then_rate() -> None:
    b = Buckets(rate=2.0, burst=3)
    assert [b.take("k", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("k", 0.0) == 0.5  # refused, nothing spent
    assert b.take("k", 0.5) == 0.0
    assert b.take("other", 0.5) == 0.0  # keys are independent
    assert retry_after(0.01) == 1 and retry_after(2.2) == 3


def test_spend_goes_below_zero_and_disabled_never_limits() -> None:
    b = Buckets(rate=1.0, burst=2)
    for _ in range(5):
        b.spend("k", 0.0)
    assert b.wait_s("k", 0.0) == 4.0
    off = Buckets(rate=0.0, burst=0)
    assert off.take("k", 0.0, 10**6) == 0.0


def test_keys_are_bounded() -> None:
    b = Buckets(rate=1.0, burst=1, max_keys=100)
    for i in range(1000):
        b.spend(f"k{i}", 0.0)
    assert len(b._buckets) <= 100
