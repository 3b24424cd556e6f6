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


def test_a_kill_reads_as_its_cause_whatever_code_the_worker_sent() -> None:
    # A protocol-1 worker says LEASE_LOST (HANDLER_CRASHED over the memory limit) with the
    # reason beside it; a newer one sends the cause itself. Both read the same.
    for code in ("LEASE_LOST", "HANDLER_CRASHED", "ATTEMPT_TIMEOUT"):
        checked = domain.check_report(domain.FinishReport(
            Outcome.UNKNOWN, code, facts=Report(kill_reason="ATTEMPT_TIMEOUT", signal=9)))
        assert checked.code == "ATTEMPT_TIMEOUT"
    memory = domain.check_report(domain.FinishReport(
        Outcome.UNKNOWN, "HANDLER_CRASHED", facts=Report(kill_reason="MEMORY_LIMIT")))
    assert memory.code == "MEMORY_LIMIT"
    # A reason that names no cause keeps the code; so does an outcome without a kill.
    lost = domain.check_report(domain.FinishReport(
        Outcome.UNKNOWN, "HANDLER_CRASHED", facts=Report(kill_reason="TEMPLATE_LOST")))
    assert lost.code == "HANDLER_CRASHED"
    raised = domain.check_report(domain.FinishReport(Outcome.UNKNOWN, "HANDLER_ERROR"))
    assert raised.code == "HANDLER_ERROR"


def test_a_follow_up_with_the_same_kill_is_the_reap_not_a_late_report() -> None:
    follow = domain.FinishReport(Outcome.UNKNOWN, "ATTEMPT_TIMEOUT", facts=Report(
        kill_reason="ATTEMPT_TIMEOUT", signal=9, reap_ms=20))
    assert domain.is_reap_follow_up("ATTEMPT_TIMEOUT", follow)
    assert not domain.is_reap_follow_up(None, follow)  # the first word of that kill
    assert not domain.is_reap_follow_up("TASK_CANCELLED", follow)
    result = domain.FinishReport(Outcome.SUCCEEDED, result_json="1")
    assert not domain.is_reap_follow_up("ATTEMPT_TIMEOUT", result)
