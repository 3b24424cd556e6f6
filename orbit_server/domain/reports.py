"""A worker's finish report as the rules see it: ``FinishReport`` (as received) and
``CheckedReport`` (after the server applied the value rules again, ``check_report``).
``apply_report_facts`` copies what the worker observed of the child onto the attempt."""

from __future__ import annotations

from dataclasses import dataclass, field

from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.frames import Report
from orbit_wire.jsonvalue import check_text, encode_value
from orbit_wire.model import Outcome

from .records import AttemptRec


@dataclass(frozen=True, slots=True)
class FinishReport:
    """A worker's finish report, value rules not yet applied; ``facts`` is what the worker
    observed of the child (the wire's ``Report``)."""

    outcome: Outcome
    code: str | None = None
    retryable: bool = False
    result_json: str | None = None
    details_json: str | None = None
    facts: Report = field(default_factory=Report)


@dataclass(frozen=True, slots=True)
class CheckedReport:
    """A report after the server's own value checks (docs/handlers.md "Results")."""

    outcome: Outcome
    code: str | None
    retryable: bool
    result: str | None
    details: str | None


def check_report(report: FinishReport) -> CheckedReport:
    """Apply the value rules again: a bad or missing result turns the outcome into
    UNKNOWN/INVALID_HANDLER_RESULT; failure details default to ``{}``."""
    if report.outcome is Outcome.SUCCEEDED:
        try:
            if report.result_json is None:
                raise ValueRejected(ErrorCode.INVALID_RESULT, "result is missing")
            check_text(report.result_json, what="result")
        except ValueRejected as exc:
            why = encode_value({"reason": exc.code.value}).decode()
            return CheckedReport(Outcome.UNKNOWN, "INVALID_HANDLER_RESULT", False, None, why)
        return CheckedReport(Outcome.SUCCEEDED, report.code, False, report.result_json, None)
    details = _checked_details(report.details_json)
    if report.outcome is Outcome.FAILED:
        return CheckedReport(Outcome.FAILED, report.code or "WORKER_FAILURE", report.retryable,
                             None, details if details is not None else "{}")
    return CheckedReport(Outcome.UNKNOWN, report.code or "HANDLER_ERROR", False, None, details)


def _checked_details(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        value = check_text(text, what="details")
    except ValueRejected as exc:
        return encode_value({"invalid_details": exc.code.value}).decode()
    if value == {} or value == []:
        return "{}"
    return text


def apply_report_facts(attempt: AttemptRec, report: FinishReport) -> None:
    """Copy what the worker observed of the child onto the attempt (history only). The
    worker's renewal count is left out: the attempt counts the renewals the server granted,
    not requests that may never have arrived."""
    facts = report.facts
    if facts.child_pid is not None:
        attempt.child_pid = facts.child_pid
    attempt.exit_code = facts.exit_code
    attempt.signal = facts.signal
    attempt.cpu_ms = facts.cpu_ms
    attempt.peak_rss_bytes = facts.peak_rss_bytes
    attempt.kill_reason = facts.kill_reason
