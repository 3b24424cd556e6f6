"""The local lease (lease.py) on a fake monotonic clock."""

from __future__ import annotations

import pytest

from orbit_supervisor.lease import RENEW_MIN_GAP, Lease


def test_expiry_counts_from_the_send_time_not_the_answer_time() -> None:
    lease = Lease(requested_ms=3000)
    assert lease.grant(sent_at=10.0, lease_ms=3000, now=10.8)
    assert lease.expires_at == pytest.approx(13.0)


def test_renewal_is_due_after_a_third_of_the_remaining_lease() -> None:
    lease = Lease(requested_ms=3000)
    lease.grant(sent_at=0.0, lease_ms=3000, now=0.0)
    assert lease.renew_at == pytest.approx(1.0)
    assert not lease.renewal_due(0.99)
    assert lease.renewal_due(1.0)
    # Answer came late: one third of what is left *now*.
    lease2 = Lease(requested_ms=3000)
    lease2.grant(sent_at=0.0, lease_ms=3000, now=1.5)
    assert lease2.renew_at == pytest.approx(2.0)


def test_renewals_are_at_least_the_minimum_gap_apart() -> None:
    lease = Lease(requested_ms=30)
    lease.renew_sent(1.0)
    lease.renewal_queued()
    assert lease.renewal_confirmed(sent_at=1.0, lease_ms=30, now=1.0)
    assert lease.renew_at is not None and lease.renew_at >= 1.0 + RENEW_MIN_GAP
    assert lease.renewals == 1


def test_a_shorter_lease_is_adopted_at_once() -> None:
    lease = Lease(requested_ms=3000)
    lease.grant(0.0, 3000, 0.0)
    assert lease.renewal_confirmed(sent_at=1.0, lease_ms=500, now=1.1)
    assert lease.expires_at == pytest.approx(1.5)
    assert lease.capped  # shorter than the task's TTL: attempt timeout or deadline


def test_expiry_is_reported_once_and_never_revived() -> None:
    lease = Lease(requested_ms=1000)
    lease.grant(0.0, 1000, 0.0)
    assert not lease.check(0.999)
    assert lease.check(1.0)
    assert not lease.check(1.5)  # only once
    assert lease.lost
    # A confirmation that arrives after the loss never revives the lease.
    assert not lease.renewal_confirmed(sent_at=0.9, lease_ms=1000, now=1.2)
    assert lease.lost and lease.deadline() is None


def test_a_grant_that_is_already_over_loses_the_lease() -> None:
    lease = Lease(requested_ms=1000)
    assert not lease.grant(sent_at=0.0, lease_ms=1000, now=1.2)
    assert lease.lost


def test_transient_renewal_failure_retries_after_the_gap() -> None:
    lease = Lease(requested_ms=3000)
    lease.grant(0.0, 3000, 0.0)
    lease.renewal_queued()
    assert not lease.renewal_due(2.0)  # one in flight: never two
    lease.renewal_failed(1.2)
    assert lease.renew_at == pytest.approx(1.2 + RENEW_MIN_GAP)
    assert lease.deadline() == pytest.approx(1.2 + RENEW_MIN_GAP)


def test_the_report_margin_kills_earlier_and_is_capped_at_a_tenth() -> None:
    lease = Lease(requested_ms=3000, margin=0.05)
    assert lease.grant(sent_at=10.0, lease_ms=3000, now=10.1)
    assert lease.expires_at == pytest.approx(12.95)
    assert not lease.check(12.94)
    assert lease.check(12.95)
    short = Lease(requested_ms=200, margin=0.05)
    assert short.grant(sent_at=0.0, lease_ms=200, now=0.0)
    assert short.expires_at == pytest.approx(0.18)  # a tenth of the 200 ms TTL, not 50 ms
    # Near an attempt timeout the grants shrink; the margin does not, so the kill still lands
    # before the server's expiry. A grant shorter than the margin is already lost.
    capped = Lease(requested_ms=3000, margin=0.05)
    assert capped.grant(sent_at=1.0, lease_ms=100, now=1.0)
    assert capped.expires_at == pytest.approx(1.05)
    assert not capped.grant(sent_at=1.04, lease_ms=30, now=1.04)
    assert capped.lost
