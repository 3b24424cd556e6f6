"""What an execution ended with, and how a child's ``TaskDone`` answer becomes one.

``outcome_from_done`` is where the parent checks what a child claims before it goes on the
wire: the outcome, the WorkerFailure code, details and flag, and what an UNKNOWN may carry
(an exception's type name, nothing else). A result's text is not parsed again here: the
child checked it against the value rules (orbit_child/results.py) and the server applies
them again to every report, so a handler that corrupts its own answer still turns its
attempt UNKNOWN/INVALID_HANDLER_RESULT rather than falsely successful. The parent only
bounds its size (a frame to the server must stay within the server's limit). Pure: no I/O,
no clock.
"""

from __future__ import annotations

from collections.abc import Callable

from msgspec import Struct
from msgspec.structs import replace

from orbit_host.messages import MalformedMessage, TaskDone
from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.frames import Report
from orbit_wire.jsonvalue import check_text, encode_value, utf8_len
from orbit_wire.limits import MAX_VALUE_BYTES
from orbit_wire.model import Outcome, UnknownCode, kill_cause
from orbit_wire.names import EXCEPTION_TYPE_MAX, EXCEPTION_TYPE_RE, is_code, message_first_line

__all__ = ["ChildOutcome", "not_run", "outcome_from_done", "uncertain"]

_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
_UNKNOWN_FROM_CHILD = frozenset({UnknownCode.HANDLER_ERROR.value,
                                 UnknownCode.INVALID_HANDLER_RESULT.value})


class ChildOutcome(Struct, frozen=True):
    """How one execution ended (a Struct: one is made per task, and a frozen dataclass
    costs ten times as much to build)."""

    outcome: Outcome  # SUCCEEDED | FAILED | UNKNOWN
    code: str | None  # FAILED: the WorkerFailure code; UNKNOWN: an UnknownCode
    retryable: bool
    result_json: str | None  # exact JSON text, as the child sent it (SUCCEEDED only)
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
    (a result over the size limit) or UNKNOWN/HANDLER_ERROR (a failure), and ``warn`` gets
    the reason (for the worker's log; never the value). A null result is a result (the child
    checked every value rule on the text it sent). ``exception_messages``: the details of an
    exception's outcome also carry the first line of its message
    (``orbit-supervise --report-exception-messages``); otherwise it is dropped here.
    """
    warn = warn or _ignore
    attempt = done.attempt_id
    outcome = _OUTCOMES.get(done.outcome) if isinstance(done.outcome, str) else None
    if outcome is None:
        raise MalformedMessage("done frame without a valid outcome")
    if outcome is Outcome.SUCCEEDED:
        text = done.result_json
        if not isinstance(text, str):
            raise MalformedMessage("result_json must be text")
        size = utf8_len(text)
        if size > MAX_VALUE_BYTES:
            warn(f"attempt {attempt}: invalid handler result ({ErrorCode.PAYLOAD_TOO_LARGE.value}"
                 f"): {size} bytes; at most {MAX_VALUE_BYTES}")
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
