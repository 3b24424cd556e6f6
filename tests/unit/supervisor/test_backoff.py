"""The one backoff (orbit_host/backoff.py) alone, in each shape its users ask for (the
session's reconnects: test_session.py)."""

from __future__ import annotations

from itertools import islice

import pytest

from orbit_host.backoff import delays


def reconnects(draw: float) -> list[float]:
    """The supervisor's reconnect delays: doubling from 0.2 s to 5 s, jitter 0.5, >= 0.2 s."""
    return list(islice(delays(0.2, 5.0, jitter=0.5, draw=lambda: draw, at_least=0.2), 8))


def test_delays_double_from_the_minimum_up_to_the_cap() -> None:
    assert reconnects(1.0) == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])


def test_jitter_keeps_each_delay_between_half_its_base_and_the_base() -> None:
    # Half of 0.2 would be below the minimum: the minimum holds.
    assert reconnects(0.0)[:4] == pytest.approx([0.2, 0.2, 0.4, 0.8])


def test_one_draw_per_delay() -> None:
    draws: list[int] = []
    gen = delays(0.2, 5.0, jitter=0.5, draw=lambda: draws.append(1) or 0.5)
    next(gen)
    next(gen)
    assert len(draws) == 2


def test_without_jitter_nothing_is_drawn_and_the_cap_holds() -> None:
    # A child that dies before it is ready, and a lost template, back off this way.
    assert list(islice(delays(0.05, 5.0), 9)) == pytest.approx(
        [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])


def test_linear_growth_with_a_wide_jitter() -> None:
    # A store transaction that lost to another writer: [0.002, 0.02] x n seconds.
    low = list(islice(delays(0.02, 0.1, growth="linear", jitter=0.9, draw=lambda: 0.0), 4))
    high = list(islice(delays(0.02, 0.1, growth="linear", jitter=0.9, draw=lambda: 1.0), 4))
    assert low == pytest.approx([0.002, 0.004, 0.006, 0.008])
    assert high == pytest.approx([0.02, 0.04, 0.06, 0.08])


def test_a_doubling_past_any_cap_never_overflows() -> None:
    gen = delays(1e-9, 1.0)
    assert list(islice(gen, 200))[-1] == 1.0


def test_a_jitter_needs_a_draw_and_stays_within_one() -> None:
    with pytest.raises(ValueError, match="draw"):
        next(delays(0.1, 1.0, jitter=0.5))
    with pytest.raises(ValueError, match="jitter"):
        next(delays(0.1, 1.0, jitter=1.5, draw=lambda: 0.5))
