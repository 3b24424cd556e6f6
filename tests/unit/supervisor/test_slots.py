"""The pool's slot lifecycle table alone (the pool's use of it: tests/integration/pool)."""

from __future__ import annotations

import pytest

from orbit_supervisor.slots import (
    REPLACING,
    TRANSITIONS,
    SlotCounts,
    SlotLifecycle,
    SlotState,
    replacing,
)


def test_every_state_has_a_row_and_may_be_replaced_or_closed() -> None:
    assert set(TRANSITIONS) == set(SlotState)
    for targets in TRANSITIONS.values():
        assert {SlotState.SPAWNING, SlotState.CLOSED} <= targets


def test_moves_keep_the_shared_counts() -> None:
    counts = SlotCounts()
    a, b = SlotLifecycle(0, counts), SlotLifecycle(1, counts)
    assert counts[SlotState.CLOSED] == 2
    a.move(SlotState.SPAWNING)
    b.move(SlotState.SPAWNING)
    a.move(SlotState.IDLE)
    b.move(SlotState.BUSY)
    b.move(SlotState.EXITING)
    assert (counts[SlotState.IDLE], counts[SlotState.EXITING], counts[SlotState.CLOSED]) == (
        1, 1, 0)
    assert replacing(counts) == 1 and SlotState.EXITING in REPLACING


def test_an_illegal_move_raises_and_changes_nothing() -> None:
    counts = SlotCounts()
    slot = SlotLifecycle(3, counts)
    slot.move(SlotState.SPAWNING)
    slot.move(SlotState.IDLE)
    with pytest.raises(AssertionError, match="slot 3: illegal IDLE -> EXITING"):
        slot.move(SlotState.EXITING)  # only a child that just finished a task is recycled
    assert slot.state is SlotState.IDLE and counts[SlotState.IDLE] == 1
    assert counts[SlotState.EXITING] == 0
