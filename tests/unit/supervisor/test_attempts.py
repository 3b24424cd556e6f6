"""The attempt record's tables alone (attempts.py; the session's use of them:
test_session*.py, and the state machine's invariants in test_session_machine.py)."""

from __future__ import annotations

import pytest
from supervisor_session_harness import reservation

from orbit_supervisor.attempts import (
    CANCELS,
    KILLS,
    PHASES,
    RUNS,
    Attempt,
    AttemptTable,
    CancelState,
    Event,
    KillState,
    Phase,
    RunEvent,
    RunState,
)
from orbit_supervisor.lease import Lease
from orbit_supervisor.machine import IllegalEvent
from orbit_wire.frames import Report


def attempt() -> Attempt:
    res = reservation()
    return Attempt(res, Lease(res.lease_ttl_ms))


def test_every_state_of_every_table_has_a_row() -> None:
    assert set(PHASES) == set(Phase)
    assert set(CANCELS) == set(CancelState)
    assert set(KILLS) == set(KillState)
    assert set(RUNS) == set(RunState)
    # Only FORGOTTEN ends a known attempt; every other phase has a way on.
    assert [phase for phase, row in PHASES.items() if not row] == [Phase.FORGOTTEN]


def test_a_reserved_attempt_runs_reports_and_is_forgotten() -> None:
    table, att = AttemptTable(), attempt()
    table.add(att, Event.RESERVED)
    assert table.get(att.attempt_id) is att and table.count(Phase.RESERVED) == 1
    for event, phase in [(Event.START_QUEUED, Phase.STARTING), (Event.STARTED, Phase.RUNNING),
                         (Event.KILLED, Phase.KILLING), (Event.ENDED, Phase.REPORTING)]:
        att.fire(event)
        assert att.phase is phase and list(table.in_phase(phase)) == [att.attempt_id]
    att.fire(Event.CONFIRMED)
    assert att.phase is Phase.FORGOTTEN
    assert att.attempt_id not in table and len(table) == 0
    assert sum(table.phase_counts().values()) == 0


def test_a_claimed_attempt_arrives_starting() -> None:
    table, att = AttemptTable(), attempt()
    table.add(att, Event.CLAIMED)
    assert att.phase is Phase.STARTING and table.count(Phase.STARTING) == 1


@pytest.mark.parametrize(("setup", "event"), [
    ([], Event.STARTED),  # a reserved attempt's start was never queued
    ([Event.START_QUEUED], Event.KILLED),  # nothing runs before the start is confirmed
    ([Event.START_QUEUED, Event.STARTED], Event.RELEASED),  # a started one is never released
])
def test_an_illegal_event_raises_and_changes_nothing(setup: list[Event], event: Event) -> None:
    table, att = AttemptTable(), attempt()
    table.add(att, Event.RESERVED)
    for each in setup:
        att.fire(each)
    before, counts = att.phase, table.phase_counts()
    with pytest.raises(IllegalEvent, match=f"attempt {att.attempt_id}: no {event.name} in"):
        att.fire(event)
    assert att.phase is before and table.phase_counts() == counts


def test_a_forgotten_attempt_takes_no_event_and_cannot_be_added_twice() -> None:
    table, att = AttemptTable(), attempt()
    table.add(att, Event.RESERVED)
    with pytest.raises(AssertionError, match="known already"):
        table.add(att, Event.RESERVED)
    att.fire(Event.CANCELLED)
    with pytest.raises(IllegalEvent):
        att.fire(Event.START_QUEUED)
    assert att.phase is Phase.FORGOTTEN and len(table) == 0


def test_the_kill_is_decided_once_reported_once_and_confirmed() -> None:
    att = attempt()
    att.decide_kill("LEASE_LOST")
    with pytest.raises(IllegalEvent):
        att.decide_kill("TASK_CANCELLED")
    assert att.kill_reason == "LEASE_LOST"
    first, merged = Report(signal=9), Report(signal=9, reap_ms=3)
    att.kill_reported("m7", first, 1.5)
    att.kill_report_merged(merged)
    assert (att.kill_msg, att.kill_report, att.killed_at) == ("m7", merged, 1.5)
    att.kill_report_confirmed()
    assert att.kill_confirmed
    with pytest.raises(IllegalEvent):
        att.kill_report_merged(first)  # once answered, the report is what the server has
    assert att.kill_report == merged


def test_a_cancel_while_starting_repeats_but_one_while_running_is_told_once() -> None:
    starting, running = attempt(), attempt()
    starting.cancel_while_starting()
    starting.cancel_while_starting()
    assert starting.cancelled and not starting.cancel_told
    running.cancel_while_running(4.0)
    assert running.cancel_told and running.cancel_at == 4.0
    with pytest.raises(IllegalEvent):
        running.cancel_while_running(9.0)  # the grace runs once, from the first push
    assert running.cancel_at == 4.0


def test_a_run_waits_is_told_gets_a_child_and_ends() -> None:
    att = attempt()
    assert att.move_run(RunEvent.QUEUED) is RunState.IDLE
    att.move_run(RunEvent.TOLD)
    assert att.move_run(RunEvent.GIVEN) is RunState.WAITING_TOLD  # its child is told at once
    att.move_run(RunEvent.ENDED)
    assert att.run_state is RunState.OVER
    with pytest.raises(IllegalEvent):
        att.move_run(RunEvent.QUEUED)  # an attempt runs at most once
