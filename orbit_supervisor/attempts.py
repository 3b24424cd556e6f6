"""One record per attempt on the worker, its state tables, and the session's index (pure).

Everything that moves an attempt lives here. The session, the Supervisor's loop and the
child pool hold references to the same ``Attempt``, never copies: it owns its reservation,
its lease (lease.py), and four small state machines, each a table ``{state: {event: next
state}}`` read by machine.next_state, so an event a state has no row for raises and
leaves the attempt as it was. A new phase or event is one row in one table.

``PHASES``, where the attempt is in the protocol (the session moves it)::

    NEW ─RESERVED─► RESERVED ─START_QUEUED─► STARTING ─STARTED─► RUNNING ─KILLED─► KILLING
     └─CLAIMED, GRANTED────────────────────────►┘  │NOT_RUN         │ENDED           │ENDED
                                                   └──────────────► REPORTING ◄────┘
                                                                        │CONFIRMED
    RESERVED ─RELEASED, CANCELLED─► FORGOTTEN ◄─RELEASED, REJECTED─ STARTING   FORGOTTEN

``CANCELS``, what a cancel push did: before the run it is never run (NEVER_RUN); during
it its child is told and the grace runs until ``cancel_at`` (TOLD).

``KILLS``, the kill the session decided (DECIDED, with ``kill_reason``), its report sent
before the reap (REPORTED: ``kill_msg``, ``kill_report``, ``killed_at``; the reap's facts
join it if it is still unsent, MERGE), and that report answered (CONFIRMED: the attempt
still holds its slot until the reap).

``RUNS``, its execution in the child pool (pool.py moves it): waiting for a free child
(a prefetched attempt), told of a cancel while waiting, on a child, over.

``AttemptTable`` is the session's index of the known attempts, by id and by phase, kept by
the records' own moves; a FORGOTTEN attempt leaves it. The by-phase index is what lets the
session count phases on every input and look at the running or reserved attempts only,
without a pass over every known attempt.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any

from orbit_wire.frames import Report, Reservation

from .lease import Lease
from .machine import next_state
from .progress import AttemptProgress

__all__ = [
    "CANCELS", "KILLS", "PHASES", "RUNS", "Attempt", "AttemptTable", "CancelEvent",
    "CancelState", "Event", "KillEvent", "KillState", "Phase", "RunEvent", "RunState",
]


class Phase(StrEnum):
    NEW = "NEW"  # made, not known to the session yet (its arrival is the first event)
    RESERVED = "RESERVED"  # reservation held; start not queued yet (waiting for a free slot)
    STARTING = "STARTING"  # start queued or in flight (or a claim started it: grant next)
    RUNNING = "RUNNING"  # start confirmed; the handler executes in a child (or waits for one)
    KILLING = "KILLING"  # kill ordered; waiting for the pool's outcome (the reap), while
    # its kill report may already be on the way (Session.child_killed)
    REPORTING = "REPORTING"  # outcome known; finish queued or in flight
    FORGOTTEN = "FORGOTTEN"  # out of the session's index; nothing happens to it any more


class Event(StrEnum):
    RESERVED = "RESERVED"  # a reserve frame brought it
    CLAIMED = "CLAIMED"  # a claim's answer brought it, started by the server
    GRANTED = "GRANTED"  # a reserve frame brought it started, with its lease (a grant)
    START_QUEUED = "START_QUEUED"  # a slot is free: its start is queued
    STARTED = "STARTED"  # the start (or claim) was confirmed with a live lease: it runs
    NOT_RUN = "NOT_RUN"  # confirmed too late or cancelled meanwhile: it never runs
    KILLED = "KILLED"  # its child is killed (lease lost, cancel grace over, shutdown)
    ENDED = "ENDED"  # the pool's outcome (the child's answer, or the killed child's reap)
    CONFIRMED = "CONFIRMED"  # the server answered its report
    REJECTED = "REJECTED"  # the server refused its start for good
    RELEASED = "RELEASED"  # the connection ended before its start was sent
    CANCELLED = "CANCELLED"  # a cancel push came before its start was queued


PHASES: Mapping[Phase, Mapping[Event, Phase]] = {
    Phase.NEW: {Event.RESERVED: Phase.RESERVED, Event.CLAIMED: Phase.STARTING,
                Event.GRANTED: Phase.STARTING},
    Phase.RESERVED: {Event.START_QUEUED: Phase.STARTING, Event.RELEASED: Phase.FORGOTTEN,
                     Event.CANCELLED: Phase.FORGOTTEN},
    Phase.STARTING: {Event.STARTED: Phase.RUNNING, Event.NOT_RUN: Phase.REPORTING,
                     Event.REJECTED: Phase.FORGOTTEN, Event.RELEASED: Phase.FORGOTTEN},
    Phase.RUNNING: {Event.KILLED: Phase.KILLING, Event.ENDED: Phase.REPORTING},
    Phase.KILLING: {Event.ENDED: Phase.REPORTING},
    Phase.REPORTING: {Event.CONFIRMED: Phase.FORGOTTEN},
    Phase.FORGOTTEN: {},
}


class CancelState(StrEnum):
    NONE = "NONE"
    NEVER_RUN = "NEVER_RUN"  # a cancel came while its start was in flight: never run it
    TOLD = "TOLD"  # a cancel reached it running: its child is told, killed at cancel_at


class CancelEvent(StrEnum):
    WHILE_STARTING = "WHILE_STARTING"
    WHILE_RUNNING = "WHILE_RUNNING"


CANCELS: Mapping[CancelState, Mapping[CancelEvent, CancelState]] = {
    CancelState.NONE: {CancelEvent.WHILE_STARTING: CancelState.NEVER_RUN,
                  CancelEvent.WHILE_RUNNING: CancelState.TOLD},
    CancelState.NEVER_RUN: {CancelEvent.WHILE_STARTING: CancelState.NEVER_RUN},
    CancelState.TOLD: {},
}


class KillState(StrEnum):
    NONE = "NONE"
    DECIDED = "DECIDED"  # kill_reason set: its child is killed, or it never runs
    REPORTED = "REPORTED"  # its kill report is queued or sent, before the reap
    CONFIRMED = "CONFIRMED"  # that report was answered; the attempt waits for the reap


class KillEvent(StrEnum):
    DECIDE = "DECIDE"
    REPORT = "REPORT"
    MERGE = "MERGE"  # the reap's facts joined the report before it was sent
    CONFIRM = "CONFIRM"


KILLS: Mapping[KillState, Mapping[KillEvent, KillState]] = {
    KillState.NONE: {KillEvent.DECIDE: KillState.DECIDED},
    KillState.DECIDED: {KillEvent.REPORT: KillState.REPORTED},
    KillState.REPORTED: {KillEvent.MERGE: KillState.REPORTED,
                         KillEvent.CONFIRM: KillState.CONFIRMED},
    KillState.CONFIRMED: {},
}


class RunState(StrEnum):
    IDLE = "IDLE"  # not handed to the pool
    WAITING = "WAITING"  # in the pool, waiting for a free child (no handler of it ran)
    WAITING_TOLD = "WAITING_TOLD"  # waiting, and a cancel reached it: its child is told at once
    ON_CHILD = "ON_CHILD"  # a child received it: its handler may run
    OVER = "OVER"  # its outcome is known, or it was stopped before any child got it


class RunEvent(StrEnum):
    QUEUED = "QUEUED"
    TOLD = "TOLD"
    GIVEN = "GIVEN"
    STOPPED = "STOPPED"  # no child will get it (stopped, cancelled, the pool closed)
    ENDED = "ENDED"  # its child answered, or is gone


RUNS: Mapping[RunState, Mapping[RunEvent, RunState]] = {
    RunState.IDLE: {RunEvent.QUEUED: RunState.WAITING},
    RunState.WAITING: {RunEvent.TOLD: RunState.WAITING_TOLD, RunEvent.GIVEN: RunState.ON_CHILD,
                  RunEvent.STOPPED: RunState.OVER},
    RunState.WAITING_TOLD: {RunEvent.TOLD: RunState.WAITING_TOLD, RunEvent.GIVEN: RunState.ON_CHILD,
                       RunEvent.STOPPED: RunState.OVER},
    RunState.ON_CHILD: {RunEvent.ENDED: RunState.OVER},
    RunState.OVER: {},
}


class Attempt:
    """One attempt. Its states change only through its methods, each one event of a table
    above; the fields the driver and the pool keep on it (``child``, ``outcome``,
    ``kill_timed_from``) are their handles, opaque here."""

    __slots__ = ("_cancel", "_cancel_at", "_index", "_kill", "_kill_msg", "_kill_reason",
                 "_kill_report", "_killed_at", "_phase", "_run", "_running_since", "child",
                 "kill_timed_from", "lease", "outcome", "progress", "progress_refused",
                 "reservation")

    def __init__(self, reservation: Reservation, lease: Lease) -> None:
        self.reservation = reservation
        self.lease = lease
        self._phase = Phase.NEW
        self._index: AttemptTable | None = None
        self._cancel = CancelState.NONE
        self._cancel_at: float | None = None
        self._kill = KillState.NONE
        self._kill_reason: str | None = None
        self._kill_msg: str | None = None
        self._kill_report: Report | None = None
        self._killed_at: float | None = None
        self._running_since: float | None = None
        self._run = RunState.IDLE
        # Its handler's latest progress and last sign of life (progress.py): the pool
        # writes the notes its child sends, renewals and the finish carry them.
        self.progress = AttemptProgress()
        self.progress_refused = 0  # notes of its child that broke the rules (dropped)
        # The pool's handles: the child that runs it, and the future its execute() awaits.
        self.child: Any = None
        self.outcome: Any = None
        # The driver's: when the kill it measures (local expiry -> reaped outcome) began.
        self.kill_timed_from: float | None = None

    def __repr__(self) -> str:
        return (f"Attempt({self.attempt_id}, {self._phase}, cancel={self._cancel}, "
                f"kill={self._kill}, run={self._run}, {self.lease!r})")

    @property
    def attempt_id(self) -> str:
        return self.reservation.attempt_id

    @property
    def task_id(self) -> str:
        return self.reservation.task_id

    # ------------------------------------------------------------------ phase

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def running_since(self) -> float | None:
        """When it started running (its Execute), or None."""
        return self._running_since

    def fire(self, event: Event) -> Phase:
        """Move by ``event`` (PHASES) and keep the index; returns the new phase."""
        before = self._phase
        after = next_state(PHASES, before, event, "attempt", self.attempt_id)
        self._phase = after
        if self._index is not None:
            self._index._moved(self, before, after)
        return after

    def start_running(self, now: float) -> None:
        """STARTED: its start was confirmed at ``now`` and it executes from now on."""
        self.fire(Event.STARTED)
        self._running_since = now
        self.progress.alive(now)  # the progress timeout counts from here (or a child's start)

    # ------------------------------------------------------------------ cancel

    @property
    def cancel_state(self) -> CancelState:
        return self._cancel

    @property
    def cancelled(self) -> bool:
        """A cancel came while its start was in flight: it must never run."""
        return self._cancel is CancelState.NEVER_RUN

    @property
    def cancel_told(self) -> bool:
        """A cancel reached it while it ran (its child told, or killed for a grace of 0)."""
        return self._cancel is CancelState.TOLD

    @property
    def cancel_at(self) -> float | None:
        """The end of its cancel grace, when a cancel reached it running (else None)."""
        return self._cancel_at

    def cancel_while_starting(self) -> None:
        self._cancel = next_state(CANCELS, self._cancel, CancelEvent.WHILE_STARTING,
                                  "cancel of", self.attempt_id)

    def cancel_while_running(self, grace_ends: float | None) -> None:
        """Its child is told (or, ``grace_ends`` None, killed at once for a grace of 0)."""
        self._cancel = next_state(CANCELS, self._cancel, CancelEvent.WHILE_RUNNING,
                                  "cancel of", self.attempt_id)
        self._cancel_at = grace_ends

    # ------------------------------------------------------------------ kill

    @property
    def kill_state(self) -> KillState:
        return self._kill

    @property
    def kill_reason(self) -> str | None:
        return self._kill_reason

    @property
    def kill_msg(self) -> str | None:
        """The msg_id of its kill report sent before the reap (None: none was)."""
        return self._kill_msg

    @property
    def kill_report(self) -> Report | None:
        return self._kill_report

    @property
    def killed_at(self) -> float | None:
        """When its child was signalled (as told by ``kill_reported``)."""
        return self._killed_at

    @property
    def kill_confirmed(self) -> bool:
        return self._kill is KillState.CONFIRMED

    def decide_kill(self, reason: str) -> None:
        self._kill = next_state(KILLS, self._kill, KillEvent.DECIDE, "kill of", self.attempt_id)
        self._kill_reason = reason

    def kill_reported(self, msg_id: str, report: Report, killed_at: float) -> None:
        self._kill = next_state(KILLS, self._kill, KillEvent.REPORT, "kill of", self.attempt_id)
        self._kill_msg, self._kill_report, self._killed_at = msg_id, report, killed_at

    def kill_report_merged(self, report: Report) -> None:
        self._kill = next_state(KILLS, self._kill, KillEvent.MERGE, "kill of", self.attempt_id)
        self._kill_report = report

    def kill_report_confirmed(self) -> None:
        self._kill = next_state(KILLS, self._kill, KillEvent.CONFIRM,
                                "kill of", self.attempt_id)

    # ------------------------------------------------------------------ run (the pool's)

    @property
    def run_state(self) -> RunState:
        return self._run

    def move_run(self, event: RunEvent) -> RunState:
        """Move its run by ``event`` (RUNS); returns the state it left."""
        before = self._run
        self._run = next_state(RUNS, before, event, "run of", self.attempt_id)
        return before


class AttemptTable:
    """The known attempts by id (in the order they became known) and by phase.

    ``add`` makes an attempt known by its arrival event; from then on the attempt's own
    moves keep both indexes, and FORGOTTEN takes it out. Every query is a lookup or a
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
        Copy it (``list(...)``) before moving attempts while iterating."""
        return self._by_phase[phase]

    def count(self, *phases: Phase) -> int:
        by_phase = self._by_phase
        total = 0
        for phase in phases:  # several times per task: no generator
            total += len(by_phase[phase])
        return total

    def phase_counts(self) -> dict[Phase, int]:
        """Known attempts per phase (kept incrementally; tests check it against a count)."""
        return {phase: len(known) for phase, known in self._by_phase.items()}

    def add(self, att: Attempt, arrival: Event) -> None:
        """Make ``att`` (NEW) known by its ``arrival`` event (RESERVED, CLAIMED, GRANTED)."""
        if att.phase is not Phase.NEW or att._index is not None:
            raise AssertionError(f"attempt {att.attempt_id} is known already")
        att._index = self
        att.fire(arrival)

    def _moved(self, att: Attempt, before: Phase, after: Phase) -> None:
        attempt_id = att.attempt_id
        if before is Phase.NEW:
            self._by_id[attempt_id] = att
        else:
            del self._by_phase[before][attempt_id]
        if after is Phase.FORGOTTEN:
            del self._by_id[attempt_id]
            att._index = None
        else:
            self._by_phase[after][attempt_id] = att
