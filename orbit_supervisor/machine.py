"""How the supervisor's state tables are read (pure).

Each state machine of the supervisor (an attempt's phase, cancel and kill, its run on a
child; the connection; a pool slot) is a table ``{state: {event: next state}}`` like h11's
``_state.py``: what moves a state is data, and a new event is one row. ``next_state`` looks
an event up; an event the table has no row for is a bug in the caller, so it raises
``IllegalEvent`` and the state stays as it was (the caller assigns only what it returns).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

from orbit_wire.errors import ErrorCode, OrbitError

__all__ = ["IllegalEvent", "Table", "next_state"]

S = TypeVar("S", bound=Enum)
E = TypeVar("E", bound=Enum)

Table = Mapping[S, Mapping[E, S]]


class IllegalEvent(OrbitError):
    """An event the state's row does not list: a bug (INTERNAL), never a peer's fault (the
    code that handles the peer's frames checks what the peer may do before it moves
    anything)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INTERNAL, message, retryable=False)


def next_state(table: Mapping[S, Mapping[E, S]], state: S, event: E, what: str,
               of: object = None) -> S:
    """The state ``event`` moves ``state`` to; ``what`` (and ``of``: "attempt", its ID)
    names the machine in the error, formatted only then (moves are per task)."""
    try:
        return table[state][event]
    except KeyError:
        name = what if of is None else f"{what} {of}"
        raise IllegalEvent(f"{name}: no {event.name} in {state.name}") from None
