"""The token buckets behind the rate limits, on a fake clock."""

from __future__ import annotations

from orbit_server.ratelimit import FailedLogins, TokenBuckets, retry_after


def test_burst_then_rate() -> None:
    b = TokenBuckets(rate=2.0, burst=3)
    assert [b.take("k", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take("k", 0.0) == 0.5  # refused, nothing spent
    assert b.take("k", 0.5) == 0.0
    assert b.take("other", 0.5) == 0.0  # keys are independent
    assert retry_after(0.01) == 1 and retry_after(2.2) == 3


def test_spend_goes_below_zero_and_disabled_never_limits() -> None:
    b = TokenBuckets(rate=1.0, burst=2)
    for _ in range(5):
        b.spend("k", 0.0)
    assert b.wait_s("k", 0.0) == 4.0
    off = TokenBuckets(rate=0.0, burst=0)
    assert off.take("k", 0.0, 10**6) == 0.0


def test_keys_are_bounded() -> None:
    b = TokenBuckets(rate=1.0, burst=1, max_keys=100)
    for i in range(1000):
        b.spend(f"k{i}", 0.0)
    assert len(b._buckets) <= 100


def test_failed_logins_spend_from_the_credential_and_the_peer() -> None:
    logins = FailedLogins(per_s=1.0, burst=2)
    one = logins.keys("a" * 100, "10.0.0.1")
    assert one == ("id:" + "a" * 64, "peer:10.0.0.1")
    logins.failed(one, 0.0)
    logins.failed(one, 0.0)
    assert logins.wait_s(one, 0.0) == 1.0
    # Another peer naming the same credential, or the same peer naming another: both wait.
    assert logins.wait_s(logins.keys("a" * 64, "10.0.0.2"), 0.0) == 1.0
    assert logins.wait_s(logins.keys("b", "10.0.0.1"), 0.0) == 1.0
    assert logins.wait_s(logins.keys("b", "10.0.0.2"), 0.0) == 0.0
    assert logins.wait_s(one, 1.0) == 0.0  # refilled
