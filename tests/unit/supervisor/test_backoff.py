"""The reconnect backoff generator alone (the session's use of it: test_session.py)."""

from __future__ import annotations

from itertools import islice

import pytest

from orbit_supervisor.backoff import backoff


def test_delays_double_from_the_minimum_up_to_the_cap() -> None:
    delays = list(islice(backoff(0.2, 5.0, lambda: 1.0), 8))
    assert delays == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])


def test_jitter_keeps_each_delay_between_half_its_base_and_the_base() -> None:
    delays = list(islice(backoff(0.2, 5.0, lambda: 0.0), 4))
    # Half of 0.2 would be below the minimum: the minimum holds.
    assert delays == pytest.approx([0.2, 0.2, 0.4, 0.8])


def test_one_draw_per_delay() -> None:
    draws: list[int] = []
    gen = backoff(0.2, 5.0, lambda: draws.append(1) or 0.5)
    next(gen)
    next(gen)
    assert len(draws) == 2
