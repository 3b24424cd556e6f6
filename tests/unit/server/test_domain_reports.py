"""What a finish report leaves on its attempt after a cancel: ``ended_by`` as the worker
said it, on an accepted report and on a late one that only fills in a kill's facts."""

from __future__ import annotations

from orbit_server import domain
from orbit_wire.frames import Report
from orbit_wire.model import AttemptState, Outcome


def _attempt() -> domain.AttemptRec:
    return domain.AttemptRec("a" * 32, "t" * 32, "q" * 32, 1, 1, AttemptState.RUNNING,
                             "i" * 32, 0)


def test_an_accepted_report_records_which_ended_the_child() -> None:
    att = _attempt()
    domain.apply_report_facts(att, domain.FinishReport(
        Outcome.SUCCEEDED, result_json="1", facts=Report(ended_by="COOPERATIVE")), 10)
    assert (att.ended_by, att.kill_reason) == ("COOPERATIVE", None)
    att = _attempt()
    domain.apply_report_facts(att, domain.FinishReport(Outcome.UNKNOWN, "LEASE_LOST", facts=Report(
        kill_reason="TASK_CANCELLED", signal=9, ended_by="KILLED")), 10)
    assert (att.ended_by, att.kill_reason) == ("KILLED", "TASK_CANCELLED")
    # No cancel reached the child: nothing to say.
    att = _attempt()
    domain.apply_report_facts(att, domain.FinishReport(Outcome.SUCCEEDED, result_json="1"), 10)
    assert att.ended_by is None


def test_a_late_kill_report_fills_in_ended_by() -> None:
    att = _attempt()
    report = domain.FinishReport(Outcome.UNKNOWN, "LEASE_LOST", facts=Report(
        kill_reason="LEASE_LOST", signal=9, ended_by="KILLED"))
    assert domain.keep_late_facts(att, report, 10)
    assert att.ended_by == "KILLED"
