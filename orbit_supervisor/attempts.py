"""The session's attempts and their phases, indexed by id and by phase (pure).

Everything that affects an attempt's phase lives here: the phases, the legal moves
between them (``TRANSITIONS``) and the table that keeps both indexes in step. A move
outside the table is a bug: it raises and leaves the attempt where it was.

    RESERVED ──► STARTING ──► RUNNING ──► KILLING ──► REPORTING ──► (forgotten)
                     └───────────┴────────────────────►┘

The by-phase index exists for speed: the session's slot arithmetic counts phases on every
input, and its timers, lease checks, starts and batch hold look at the running or reserved
attempts only. A pass over up to 2 x 256 attempts on every input would dominate the
supervisor's CPU, so no query here scans the table.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

from orbit_wire.frames import Report, Reservation

from .lease import Lease

__all__ = ["TRANSITIONS", "Attempt", "AttemptTable", "Phase"]


class Phase(StrEnum):
    RESERVED = "RESERVED"  # reservation held; start not queued yet (waiting for a free slot)
    STARTING = "STARTING"  # start queued or in flight
    RUNNING = "RUNNING"  # start confirmed; the handler executes in a child
    KILLING = "KILLING"  # kill ordered; waiting for the pool's outcome (the reap), while
    # its kill report may already be on the way (Session.kill_sent)
    REPORTING = "REPORTING"  # outcome known; finish queued or in flight


TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.RESERVED: frozenset({Phase.STARTING}),
    Phase.STARTING: frozenset({Phase.RUNNING, Phase.REPORTING}),
    Phase.RUNNING: frozenset({Phase.KILLING, Phase.REPORTING}),
    Phase.KILLING: frozenset({Phase.REPORTING}),
    Phase.REPORTING: frozenset(),
}


@dataclass(slots=True)
class Attempt:
    """One attempt the session knows. Its ``phase`` changes only through
    ``AttemptTable.move``, which keeps the by-phase index."""

    reservation: Reservation
    lease: Lease
    phase: Phase = Phase.RESERVED
    kill_reason: str | None = None
    cancelled: bool = False  # a cancel came while its start was in flight: never run it
    # A cancel reached it while running: the child was told (CancelChild) and is killed at
    # ``cancel_at`` (the end of its cancel grace) unless it ends first or its lease runs out.
    cancel_told: bool = False
    cancel_at: float | None = None
    running_since: float | None = None  # when Execute was emitted
    # A kill reported before its reap (Session.kill_sent): the report's msg_id and what it
    # said; confirmed once the server answered it (the attempt waits for the reap).
    kill_msg: str | None = None
    kill_report: Report | None = None
    killed_at: float | None = None
    kill_confirmed: bool = False

    @property
    def attempt_id(self) -> str:
        return self.reservation.attempt_id


class AttemptTable:
    """The known attempts by id (in the order they became known) and by phase.

    ``add``, ``forget`` and ``move`` are the only changes; every query is a lookup or a
    length, never a scan."""

    __slots__ = ("_by_id", "_by_phase")

    def __init__(self) -> None:
        self._by_id: dict[str, Attempt] = {}
        self._by_phase: dict[Phase, dict[str, Attempt]] = {phase: {} for phase in Phase}

    def get(self, attempt_id: str) -> Attempt | None:
        return self._by_id.get(attempt_id)

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Attempt]:
        """Every known attempt, oldest first."""
        return iter(self._by_id.values())

    def by_id(self) -> Mapping[str, Attempt]:
        """A read-only view of every known attempt by id."""
        return self._by_id

    def in_phase(self, phase: Phase) -> Mapping[str, Attempt]:
        """A read-only view of the attempts in ``phase``, in the order they entered it.
        Copy it (``list(...)``) before moving or forgetting attempts while iterating."""
        return self._by_phase[phase]

    def count(self, *phases: Phase) -> int:
        by_phase = self._by_phase
        return sum(len(by_phase[phase]) for phase in phases)

    def phase_counts(self) -> dict[Phase, int]:
        """Known attempts per phase (kept incrementally; tests check it against a count)."""
        return {phase: len(known) for phase, known in self._by_phase.items()}

    def add(self, att: Attempt) -> None:
        self._by_id[att.attempt_id] = att
        self._by_phase[att.phase][att.attempt_id] = att

    def forget(self, att: Attempt) -> None:
        del self._by_id[att.attempt_id]
        del self._by_phase[att.phase][att.attempt_id]

    def move(self, att: Attempt, to: Phase) -> None:
        """Move ``att`` to phase ``to``; raises AssertionError (attempt unchanged) when the
        move is not in ``TRANSITIONS``."""
        before = att.phase
        if to not in TRANSITIONS[before]:
            raise AssertionError(f"attempt {att.attempt_id}: illegal {before} -> {to}")
        att.phase = to
        del self._by_phase[before][att.attempt_id]
        self._by_phase[to][att.attempt_id] = att
