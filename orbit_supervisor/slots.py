"""The lifecycle of one place in the child pool, as a (state, event) table (pure).

Everything that moves a slot lives here: its states, ``SLOTS`` (which event moves which
state where, read by machine.next_state: an event a state has no row for raises and leaves
the state unchanged) and the per-state counts the pool reports.

    state      FORK      PARK   HAND_OUT  RECYCLE   KILL     CLOSE
    CLOSED     SPAWNING                                      CLOSED
    SPAWNING   SPAWNING  IDLE   BUSY                KILLING  CLOSED
    IDLE       SPAWNING         BUSY                KILLING  CLOSED
    BUSY       SPAWNING  IDLE   BUSY      EXITING   KILLING  CLOSED
    KILLING    SPAWNING                             KILLING  CLOSED
    EXITING    SPAWNING                             KILLING  CLOSED

- FORK: a new child is requested (or due after a backoff, or waits for a template restart).
  Any slot may get one: the template was lost, the old child's death was seen, or a killed
  child that was ever ready is replaced at once while it dies. SPAWNING -> SPAWNING is a
  respawn after an early death.
- PARK: a ready child, fresh or done with its task, that no execution waits for: IDLE.
- HAND_OUT: a ready child given to an ``execute()`` call: BUSY (BUSY -> BUSY is a finished
  child handed straight to the next waiting execution).
- RECYCLE: asked to leave after its last task (max tasks, memory): EXITING until its reap.
- KILL: signalled; the pool waits for the template's reap report. KILLING -> KILLING is a
  second reason to kill a child already signalled.
- CLOSE: the pool closes (CLOSED is also the state before ``start()``).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping

from .machine import next_state

__all__ = [
    "BEING_REPLACED", "SLOTS", "SlotCounts", "SlotEvent", "SlotLifecycle", "SlotState",
    "count_being_replaced",
]


class SlotState(enum.Enum):
    # Members are singletons compared by identity: hash them so too, in C (Enum's own
    # __hash__ is Python code, run on every slot move and count).
    __hash__ = object.__hash__

    SPAWNING = "spawning"
    IDLE = "idle"
    BUSY = "busy"
    KILLING = "killing"
    EXITING = "exiting"
    CLOSED = "closed"


class SlotEvent(enum.Enum):
    __hash__ = object.__hash__  # as SlotState's

    FORK = "fork"
    PARK = "park"
    HAND_OUT = "hand_out"
    RECYCLE = "recycle"
    KILL = "kill"
    CLOSE = "close"


_S, _E = SlotState, SlotEvent
_ANY = {_E.FORK: _S.SPAWNING, _E.CLOSE: _S.CLOSED}

SLOTS: Mapping[SlotState, Mapping[SlotEvent, SlotState]] = {
    _S.CLOSED: _ANY,
    _S.SPAWNING: {**_ANY, _E.PARK: _S.IDLE, _E.HAND_OUT: _S.BUSY, _E.KILL: _S.KILLING},
    _S.IDLE: {**_ANY, _E.HAND_OUT: _S.BUSY, _E.KILL: _S.KILLING},
    _S.BUSY: {**_ANY, _E.PARK: _S.IDLE, _E.HAND_OUT: _S.BUSY, _E.RECYCLE: _S.EXITING,
              _E.KILL: _S.KILLING},
    _S.KILLING: {**_ANY, _E.KILL: _S.KILLING},
    _S.EXITING: {**_ANY, _E.KILL: _S.KILLING},
}

# Slots without a usable child while a new one comes: the session offers them no credit.
BEING_REPLACED = frozenset({SlotState.SPAWNING, SlotState.KILLING, SlotState.EXITING})

SlotCounts = Counter[SlotState]
"""A pool's slots per state, shared by its slots' lifecycles and kept by their moves."""


class SlotLifecycle:
    """The state of one slot; ``fire`` is the only change and keeps the shared counts."""

    __slots__ = ("_counts", "_index", "_state")

    def __init__(self, index: int, counts: SlotCounts) -> None:
        self._index = index
        self._counts = counts
        self._state = SlotState.CLOSED
        counts[self._state] += 1

    @property
    def state(self) -> SlotState:
        return self._state

    def fire(self, event: SlotEvent) -> SlotState:
        """Move by ``event`` (SLOTS); returns the new state."""
        before = self._state
        after = next_state(SLOTS, before, event, "slot", self._index)
        self._counts[before] -= 1
        self._counts[after] += 1
        self._state = after
        return after


def count_being_replaced(counts: SlotCounts) -> int:
    """How many slots of a pool are being replaced (``BEING_REPLACED``)."""
    # Spelled out: this runs on every pass of a session.
    return counts[SlotState.SPAWNING] + counts[SlotState.KILLING] + counts[SlotState.EXITING]
