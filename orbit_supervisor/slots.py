"""The lifecycle of one place in the child pool, as a transition table (pure).

Everything that affects a slot's state lives here: the states, the legal moves between
them (``TRANSITIONS``) and the per-state counts the pool reports. A move outside the
table is a bug: it raises and leaves the state unchanged.

    from       may move to
    CLOSED     SPAWNING, CLOSED
    SPAWNING   IDLE, BUSY, KILLING, SPAWNING, CLOSED
    IDLE       BUSY, KILLING, SPAWNING, CLOSED
    BUSY       IDLE, BUSY, EXITING, KILLING, SPAWNING, CLOSED
    KILLING    KILLING, SPAWNING, CLOSED
    EXITING    KILLING, SPAWNING, CLOSED

- SPAWNING: a fork was requested (or is due after a backoff, or waits for a template
  restart); the pool waits for the child's pid and its ready frame.
- IDLE: ready and parked; BUSY: handed to an ``execute()`` call (running, or about to).
  BUSY → BUSY is a finished child handed straight to the next waiter.
- KILLING: signalled; the pool waits for the template's reap report. A killed child that
  was ever ready is replaced at once instead (→ SPAWNING), while it dies.
- EXITING: asked to leave after its last task (recycling); waits for the reap report.
- CLOSED: before ``start()`` and after ``close()``.

Every state may go to SPAWNING (the template was lost, or the child's death was seen) and
to CLOSED (the pool closes). SPAWNING → SPAWNING is a respawn after an early death, and
KILLING → KILLING a second reason to kill a child already signalled.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping

__all__ = [
    "REPLACING", "TRANSITIONS", "SlotCounts", "SlotLifecycle", "SlotState", "replacing",
]


class SlotState(enum.Enum):
    SPAWNING = "spawning"
    IDLE = "idle"
    BUSY = "busy"
    KILLING = "killing"
    EXITING = "exiting"
    CLOSED = "closed"


_ANY_TO = frozenset({SlotState.SPAWNING, SlotState.CLOSED})

TRANSITIONS: Mapping[SlotState, frozenset[SlotState]] = {
    SlotState.CLOSED: _ANY_TO,
    SlotState.SPAWNING: _ANY_TO | {SlotState.IDLE, SlotState.BUSY, SlotState.KILLING},
    SlotState.IDLE: _ANY_TO | {SlotState.BUSY, SlotState.KILLING},
    SlotState.BUSY: _ANY_TO | {SlotState.BUSY, SlotState.IDLE, SlotState.EXITING,
                               SlotState.KILLING},
    SlotState.KILLING: _ANY_TO | {SlotState.KILLING},
    SlotState.EXITING: _ANY_TO | {SlotState.KILLING},
}

# Slots without a usable child while a new one comes: the session offers them no credit.
REPLACING = frozenset({SlotState.SPAWNING, SlotState.KILLING, SlotState.EXITING})

SlotCounts = Counter[SlotState]
"""A pool's slots per state, shared by its slots' lifecycles and kept by their moves."""


class SlotLifecycle:
    """The state of one slot; ``move`` is the only change and keeps the shared counts."""

    __slots__ = ("_counts", "_index", "_state")

    def __init__(self, index: int, counts: SlotCounts) -> None:
        self._index = index
        self._counts = counts
        self._state = SlotState.CLOSED
        counts[self._state] += 1

    @property
    def state(self) -> SlotState:
        return self._state

    def move(self, to: SlotState) -> None:
        """Move to ``to``; raises AssertionError (state unchanged) when the move is not in
        ``TRANSITIONS``."""
        before = self._state
        if to not in TRANSITIONS[before]:
            raise AssertionError(f"slot {self._index}: illegal {before.name} -> {to.name}")
        self._counts[before] -= 1
        self._counts[to] += 1
        self._state = to


def replacing(counts: SlotCounts) -> int:
    """How many slots of a pool are being replaced (``REPLACING``)."""
    return sum(counts[state] for state in REPLACING)
