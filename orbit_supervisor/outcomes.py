"""What an execution ended with, and how a child's ``TaskDone`` answer becomes one.

``outcome_from_done`` is where the parent re-checks everything a child claims: the result
text against the value rules (``check_text``, the exact text is kept), the WorkerFailure
code, details and flag. It trusts nothing, so a handler that corrupts its own answer turns
its attempt uncertain rather than falsely successful. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from orbit_host.messages import MalformedMessage, TaskDone
from orbit_wire.errors import ValueRejected
from orbit_wire.frames import Report
from orbit_wire.jsonvalue import check_text, encode_value
from orbit_wire.model import Outcome, UnknownCode, kill_cause
from orbit_wire.names import EXCEPTION_TYPE_MAX, EXCEPTION_TYPE_RE, is_code, message_first_line

__all__ = ["ChildOutcome", "not_run", "outcome_from_done", "uncertain"]

_UNKNOWN_FROM_CHILD = frozenset({UnknownCode.HANDLER_ERROR.value,
                                 UnknownCode.INVALID_HANDLER_RESULT.value})


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    outcome: Outcome  # SUCCEEDED | FAILED | UNKNOWN
    code: str | None  # FAILED: the WorkerFailure code; UNKNOWN: an UnknownCode
    retryable: bool
    result_json: str | None  # exact JSON text, validated in the parent (SUCCEEDED only)
    details_json: str | None  # JSON text, "{}" when empty (FAILED only)
    report: Report  # child_pid, exit_code / signal, cpu_ms, peak_rss_bytes, kill_reason


def uncertain(code: str, report: Report) -> ChildOutcome:
    return ChildOutcome(Outcome.UNKNOWN, code, False, None, None, report)


def not_run(reason: str) -> ChildOutcome:
    """The outcome of an execution stopped before any child received it, for ``reason``
    (its code too, when the reason names a cause)."""
    return uncertain(kill_cause(reason, UnknownCode.LEASE_LOST.value), Report(kill_reason=reason))


def outcome_from_done(done: TaskDone, report: Report, *,
                      warn: Callable[[str], None] | None = None,
                      exception_messages: bool = False) -> ChildOutcome:
    """Turn a child's answer into an outcome; raise MalformedMessage if it is garbage (the
    child's channel is corrupt).

    Values that break the rules are not garbage: they become UNKNOWN/INVALID_HANDLER_RESULT
    (a result) or UNKNOWN/HANDLER_ERROR (a failure), and ``warn`` gets the reason (for the
    worker's log; never the value). A null result is a result. ``exception_messages``: the
    details of an exception's outcome also carry the first line of its message
    (``orbit-supervise --report-exception-messages``); otherwise it is dropped here.
    """
    warn = warn or _ignore
    attempt = done.attempt_id
    try:
        outcome = Outcome(done.outcome)
    except (ValueError, TypeError):
        raise MalformedMessage("done frame without a valid outcome") from None
    if outcome is Outcome.SUCCEEDED:
        text = done.result_json
        if not isinstance(text, str):
            raise MalformedMessage("result_json must be text")
        try:
            check_text(text, what="result", allow_null=True)
        except ValueRejected as exc:
            warn(f"attempt {attempt}: invalid handler result ({exc.code.value}): {exc.message}")
            return uncertain(UnknownCode.INVALID_HANDLER_RESULT.value, report)
        return ChildOutcome(Outcome.SUCCEEDED, None, False, text, None, report)
    if outcome is Outcome.FAILED:
        code, details, retryable = done.code, done.details_json, done.retryable
        valid = (is_code(code)
                 and isinstance(retryable, bool) and isinstance(details, str))
        if valid:
            try:
                valid = isinstance(check_text(str(details), what="details"), dict)
            except ValueRejected:
                valid = False
        if not valid:
            warn(f"attempt {attempt}: invalid WorkerFailure from the child")
            return uncertain(UnknownCode.HANDLER_ERROR.value, report)
        failed = ChildOutcome(Outcome.FAILED, str(code), bool(retryable), None, str(details),
                              report)
        # An exception the task type declared in fails_on (a WorkerFailure has no message).
        exception_type = _exception_type(details)
        if exception_type is None or done.exception_message is None:
            return failed
        return replace(failed, details_json=_exception_details(
            exception_type, done.exception_message if exception_messages else None))
    code = done.code
    out = uncertain(code if code in _UNKNOWN_FROM_CHILD else UnknownCode.HANDLER_ERROR.value,
                    report)
    exception_type = _exception_type(done.details_json)
    if exception_type is None or out.code != UnknownCode.HANDLER_ERROR.value:
        return out
    # Only the type name is carried on (checked, re-encoded), and the message's first line
    # where the operator asked for it; nothing else.
    return replace(out, details_json=_exception_details(
        exception_type, done.exception_message if exception_messages else None))


def _exception_details(exception_type: str, message: object) -> str:
    details: dict[str, str] = {"exception_type": exception_type}
    line = message_first_line(message) if isinstance(message, str) else None
    if line is not None:
        details["exception_message"] = line
    return encode_value(details, what="details").decode()


def _exception_type(details: object) -> str | None:
    if not isinstance(details, str) or len(details) > 2 * EXCEPTION_TYPE_MAX:
        return None
    try:
        value = check_text(details, what="details")
    except ValueRejected:
        return None
    if not isinstance(value, dict) or set(value) != {"exception_type"}:
        return None
    name = value["exception_type"]
    return name if isinstance(name, str) and EXCEPTION_TYPE_RE.fullmatch(name) else None


def _ignore(_message: str) -> None:
    pass
