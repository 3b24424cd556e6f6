"""What an execution ended with, and how a child's ``done`` frame becomes one.

``outcome_from_done`` is where the parent re-checks everything a child claims: the result
text against the value rules (``check_text``, the exact text is kept), the WorkerFailure
code, details and flag. It trusts nothing, so a handler that corrupts its own answer turns
its attempt uncertain rather than falsely successful. Pure: no I/O, no clock.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from orbit_wire.errors import ValueRejected
from orbit_wire.frames import Report
from orbit_wire.jsonvalue import check_text
from orbit_wire.limits import MAX_CODE_LEN
from orbit_wire.model import Outcome, UnknownCode

__all__ = ["CODE_RE", "ChildOutcome", "MalformedFrame", "outcome_from_done", "uncertain"]

CODE_RE = re.compile(rf"[A-Z][A-Z0-9_]{{0,{MAX_CODE_LEN - 1}}}")
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


class MalformedFrame(ValueError):
    """The frame is not a well-formed answer at all: the child's channel is corrupt."""


def uncertain(code: str, report: Report) -> ChildOutcome:
    return ChildOutcome(Outcome.UNKNOWN, code, False, None, None, report)


def outcome_from_done(frame: dict[str, Any], report: Report, *,
                      log: logging.Logger | None = None) -> ChildOutcome:
    """Turn a child's ``done`` frame into an outcome; raise MalformedFrame if it is garbage.

    Values that break the rules are not garbage: they become UNKNOWN/INVALID_HANDLER_RESULT
    (a result) or UNKNOWN/HANDLER_ERROR (a failure), logged with the reason only.
    """
    log = log or logging.getLogger("orbit.pool")
    attempt = frame.get("a")
    try:
        outcome = Outcome(frame["outcome"])
    except (KeyError, ValueError, TypeError):
        raise MalformedFrame("done frame without a valid outcome") from None
    if outcome is Outcome.SUCCEEDED:
        text = frame.get("result_json")
        if not isinstance(text, str):
            raise MalformedFrame("result_json must be text")
        try:
            check_text(text, what="result")
        except ValueRejected as exc:
            log.warning("attempt %s: invalid handler result (%s): %s",
                        attempt, exc.code.value, exc.message)
            return uncertain(UnknownCode.INVALID_HANDLER_RESULT.value, report)
        return ChildOutcome(Outcome.SUCCEEDED, None, False, text, None, report)
    if outcome is Outcome.FAILED:
        code, details, retryable = (frame.get("code"), frame.get("details_json"),
                                    frame.get("retryable"))
        valid = (isinstance(code, str) and CODE_RE.fullmatch(code) is not None
                 and isinstance(retryable, bool) and isinstance(details, str))
        if valid:
            try:
                valid = isinstance(check_text(str(details), what="details"), dict)
            except ValueRejected:
                valid = False
        if not valid:
            log.warning("attempt %s: invalid WorkerFailure from the child", attempt)
            return uncertain(UnknownCode.HANDLER_ERROR.value, report)
        return ChildOutcome(Outcome.FAILED, str(code), bool(retryable), None, str(details),
                            report)
    code = frame.get("code")
    return uncertain(code if code in _UNKNOWN_FROM_CHILD else UnknownCode.HANDLER_ERROR.value,
                     report)
