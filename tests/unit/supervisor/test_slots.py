"""The pool's slot lifecycle table alone (the pool's use of it: tests/integration/pool)."""

from __future__ import annotations

from collections import Counter

import pytest

from orbit_supervisor.machine import IllegalEvent
from orbit_supervisor.slots import (
    BEING_REPLACED,
    SLOTS,
    SlotCounts,
    SlotEvent,
    SlotLifecycle,
    SlotState,
    count_being_replaced,
)


def test_every_state_has_a_row_and_may_get_a_new_child_or_be_closed() -> None:
    assert set(SLOTS) == set(SlotState)
    for row in SLOTS.values():
        assert row[SlotEvent.FORK] is SlotState.SPAWNING
        assert row[SlotEvent.CLOSE] is SlotState.CLOSED


def test_moves_keep_the_shared_counts() -> None:
    counts = SlotCounts()
    a, b = SlotLifecycle(0, counts), SlotLifecycle(1, counts)
    assert counts[SlotState.CLOSED] == 2
    a.fire(SlotEvent.FORK)
    b.fire(SlotEvent.FORK)
    a.fire(SlotEvent.PARK)
    b.fire(SlotEvent.HAND_OUT)
    b.fire(SlotEvent.RECYCLE)
    assert (counts[SlotState.IDLE], counts[SlotState.EXITING], counts[SlotState.CLOSED]) == (
        1, 1, 0)
    assert count_being_replaced(counts) == 1 and SlotState.EXITING in BEING_REPLACED


def test_an_illegal_event_raises_and_changes_nothing() -> None:
    counts = SlotCounts()
    slot = SlotLifecycle(3, counts)
    slot.fire(SlotEvent.FORK)
    slot.fire(SlotEvent.PARK)
    with pytest.raises(IllegalEvent, match="slot 3: no RECYCLE in IDLE"):
        slot.fire(SlotEvent.RECYCLE)  # only a child that just finished a task is recycled
    assert slot.state is SlotState.IDLE and counts[SlotState.IDLE] == 1
    assert counts[SlotState.EXITING] == 0


def test_the_count_of_slots_being_replaced_is_that_of_the_states_named() -> None:
    counts: SlotCounts = Counter({state: 10 + i for i, state in enumerate(SlotState)})
    assert count_being_replaced(counts) == sum(counts[state] for state in BEING_REPLACED)
