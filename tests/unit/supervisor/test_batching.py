"""BatchHold on its own: the window it allows and the instant it holds a request until."""

from __future__ import annotations

import pytest

from orbit_supervisor.batching import BATCH_HOLD_MAX, BATCH_HOLD_MIN, BatchHold


def test_nothing_is_held_before_a_handler_duration_is_known() -> None:
    hold = BatchHold(cpus=2)
    hold.queued(0.0, True)
    assert hold.until(0.001, [0.0, 0.0, 0.0], executing=3) is None


def test_the_window_is_one_recent_round_trip_within_the_bounds() -> None:
    hold = BatchHold(cpus=None)
    assert hold.window() == BATCH_HOLD_MIN
    hold.round_trip(0.005)
    assert hold.window() == pytest.approx(0.005)
    hold.round_trip(0.015)  # running average: 0.8 * 5 ms + 0.2 * 15 ms
    assert hold.window() == pytest.approx(0.007)
    for _ in range(50):
        hold.round_trip(1.0)
    assert hold.window() == BATCH_HOLD_MAX


def test_a_short_handler_is_waited_for_twice_its_duration_at_most() -> None:
    hold = BatchHold(cpus=None)
    hold.handler_took(0.0005, cpu_seconds=None, executing=1)
    hold.round_trip(0.004)
    # Started 0.2 ms ago: expected within 2 x 0.5 ms of its start.
    assert hold.until(1.0, [0.9998], executing=1) == pytest.approx(0.9998 + 0.001)
    # Started longer ago than that: not waited for.
    assert hold.until(1.0, [0.998], executing=1) is None
    # Handlers longer than half the window are never waited for.
    hold.handler_took(0.01, cpu_seconds=None, executing=1)
    assert hold.until(1.0, [0.9998], executing=1) is None


def test_oversubscribed_holds_count_from_the_oldest_queued_op() -> None:
    hold = BatchHold(cpus=2)
    hold.handler_took(0.050, cpu_seconds=0.024, executing=4)  # 0.48 of 0.5 CPU: CPU-bound
    assert hold.cpu_bound()
    hold.queued(1.0, True)
    hold.queued(1.004, True)  # still the op queued at 1.0 is the oldest
    running = [0.96, 0.97, 0.98]  # the first is expected at 1.01, within the limit
    assert hold.until(1.005, running, executing=3) == pytest.approx(1.0 + BATCH_HOLD_MAX)
    # An overdue handler counts too; with no more handlers than CPUs nothing is held.
    assert hold.until(1.005, [0.9], executing=3) == pytest.approx(1.0 + BATCH_HOLD_MAX)
    assert hold.until(1.005, running, executing=2) is None
    # None expected before the limit, or the limit reached: send.
    assert hold.until(1.005, [0.99, 1.0], executing=3) is None
    assert hold.until(1.0 + BATCH_HOLD_MAX, running, executing=3) is None
    # After a send the remaining ops' wait starts again; with none left nothing is queued.
    hold.sent(1.03, left_queued=True)
    assert hold.queued_since == 1.03
    hold.sent(1.04, left_queued=False)
    assert hold.queued_since is None


def test_io_bound_handlers_are_not_held_for_however_many_run() -> None:
    # Handlers that sleep 50 ms use next to no CPU: more of them than CPUs leaves the CPUs
    # idle, so a finished slot held back would idle too.
    hold = BatchHold(cpus=2)
    for _ in range(20):
        hold.handler_took(0.050, cpu_seconds=0.001, executing=16)
    assert not hold.cpu_bound()
    hold.queued(1.0, True)
    assert hold.until(1.001, [0.96, 0.97], executing=15) is None
    # The same handlers burning their CPU share are held for.
    for _ in range(20):
        hold.handler_took(0.050, cpu_seconds=0.006, executing=16)  # 0.12 of 0.125 CPU
    assert hold.cpu_bound()
    assert hold.until(1.001, [0.96, 0.97], executing=15) == pytest.approx(1.0 + BATCH_HOLD_MAX)


def test_a_lone_handler_is_measured_against_a_whole_cpu() -> None:
    hold = BatchHold(cpus=4)
    hold.handler_took(0.010, cpu_seconds=0.004, executing=1)  # 40 % of one CPU
    assert not hold.cpu_bound()
    hold = BatchHold(cpus=4)
    hold.handler_took(0.010, cpu_seconds=0.010, executing=1)
    assert hold.cpu_bound()
