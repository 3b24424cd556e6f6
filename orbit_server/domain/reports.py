"""A worker's finish report as the rules see it: ``FinishReport`` (as received) and
``CheckedReport`` (after the server applied the value rules again, ``check_report``).
``apply_report_facts`` copies what the worker observed of the child onto the attempt, and
``keep_late_facts`` keeps what a report that came too late to decide knew of a kill."""

from __future__ import annotations

from dataclasses import dataclass, field

from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.frames import Report
from orbit_wire.jsonvalue import check_text, encode_value
from orbit_wire.model import Outcome, UnknownCode, kill_cause

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
    UNKNOWN/INVALID_HANDLER_RESULT (a JSON ``null`` is a result); failure details default to
    ``{}``. An UNKNOWN kill reads as its cause: a protocol-1 worker's LEASE_LOST (or
    HANDLER_CRASHED) with kill reason ATTEMPT_TIMEOUT becomes ATTEMPT_TIMEOUT."""
    if report.outcome is Outcome.SUCCEEDED:
        try:
            if report.result_json is None:
                raise ValueRejected(ErrorCode.INVALID_RESULT, "result is missing")
            check_text(report.result_json, what="result", allow_null=True)
        except ValueRejected as exc:
            why = encode_value({"reason": exc.code.value}).decode()
            return CheckedReport(Outcome.UNKNOWN, "INVALID_HANDLER_RESULT", False, None, why)
        return CheckedReport(Outcome.SUCCEEDED, report.code, False, report.result_json, None)
    details = _checked_details(report.details_json)
    if report.outcome is Outcome.FAILED:
        return CheckedReport(Outcome.FAILED, report.code or "WORKER_FAILURE", report.retryable,
                             None, details if details is not None else "{}")
    code = report.code or UnknownCode.HANDLER_ERROR.value
    if code in _KILL_CODES_OF_PROTOCOL_1 and report.facts.kill_reason != UnknownCode.LEASE_LOST:
        code = kill_cause(report.facts.kill_reason, code)
    return CheckedReport(Outcome.UNKNOWN, code, False, None, details)


# The codes a worker of protocol 1 reported its kills with, whatever the reason: LEASE_LOST,
# and HANDLER_CRASHED over the memory limit (and for a child lost at its shutdown).
_KILL_CODES_OF_PROTOCOL_1 = frozenset({UnknownCode.LEASE_LOST.value,
                                       UnknownCode.HANDLER_CRASHED.value})


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


def apply_report_facts(attempt: AttemptRec, report: FinishReport, now_ms: int) -> None:
    """Copy what the worker observed of the child onto the attempt (history only). The
    worker's renewal count is left out: the attempt counts the renewals the server granted,
    not requests that may never have arrived. ``now_ms``: when the report was received."""
    facts = report.facts
    if facts.child_pid is not None:
        attempt.child_pid = facts.child_pid
    attempt.exit_code = facts.exit_code
    attempt.signal = facts.signal
    attempt.cpu_ms = facts.cpu_ms
    attempt.peak_rss_bytes = facts.peak_rss_bytes
    attempt.kill_reason = facts.kill_reason
    attempt.killed_at_ms = killed_at_ms(facts, now_ms)
    attempt.reap_ms = facts.reap_ms
    attempt.ended_by = facts.ended_by  # after a cancel reached a running child


def killed_at_ms(facts: Report, now_ms: int) -> int | None:
    """When the SIGKILL went out, on the server's clock: the receipt instant less the age
    the worker measured on its own clock up to the send. The one-way network delay is not
    subtracted, so the estimate is never earlier than the kill was."""
    if facts.kill_reason is None or facts.kill_age_ms is None:
        return None
    return now_ms - facts.kill_age_ms


def is_reap_follow_up(known_kill: str | None, report: FinishReport) -> bool:
    """Whether ``report``, for an attempt already closed whose recorded kill reason is
    ``known_kill``, is the worker's second finish of that kill, bringing the reap's facts
    (docs/protocol.md "Kill reports"): it is merged, never kept as a late report."""
    return (known_kill is not None and report.outcome is Outcome.UNKNOWN
            and report.facts.kill_reason == known_kill)


def keep_late_facts(attempt: AttemptRec, report: FinishReport, now_ms: int) -> bool:
    """A report of the attempt's own epoch that arrived after its lease ran out (the
    attempt still RUNNING or already closed LEASE_EXPIRED by the reaper), or a second
    report carrying the reap of a kill: fill in the kill facts the attempt lacks. Never
    the outcome, never a fact already recorded. Returns whether anything changed.

    Without this the attempt of a kill whose report lost the race against the reaper
    would read a bare UNKNOWN/LEASE_EXPIRED with no kill reason, signal, pid or usage.
    """
    facts = report.facts
    if facts.kill_reason is None:
        return False  # only a kill's facts: a late result never rewrites the history
    changed = False
    for name, value in (("child_pid", facts.child_pid), ("signal", facts.signal),
                        ("exit_code", facts.exit_code), ("cpu_ms", facts.cpu_ms),
                        ("peak_rss_bytes", facts.peak_rss_bytes),
                        ("kill_reason", facts.kill_reason),
                        ("killed_at_ms", killed_at_ms(facts, now_ms)),
                        ("reap_ms", facts.reap_ms), ("ended_by", facts.ended_by)):
        if value is not None and getattr(attempt, name) is None:
            setattr(attempt, name, value)
            changed = True
    return changed
