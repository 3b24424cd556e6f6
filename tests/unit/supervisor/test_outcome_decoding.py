"""The parent's checks of a child's answer (orbit_supervisor.outcomes), without processes."""

from __future__ import annotations

from typing import Any

import pytest

from orbit_host.messages import MalformedMessage, TaskDone, decode_from_child
from orbit_supervisor.outcomes import outcome_from_done
from orbit_wire.frames import Report
from orbit_wire.model import Outcome

REPORT = Report(child_pid=42, cpu_ms=1, peak_rss_bytes=1 << 20)


def done(**fields: Any) -> TaskDone:
    answer = decode_from_child({"t": "done", "g": 1, "a": "a" * 32, **fields})
    assert isinstance(answer, TaskDone)
    return answer


def test_a_valid_result_keeps_its_exact_text() -> None:
    text = '{"f":1.000000000000000000001,"big":9223372036854775807}'
    out = outcome_from_done(done(outcome="SUCCEEDED", result_json=text), REPORT)
    assert (out.outcome, out.code, out.result_json, out.report) == (
        Outcome.SUCCEEDED, None, text, REPORT)


def test_a_result_over_the_size_limit_is_an_invalid_handler_result() -> None:
    text = '"' + "x" * (256 * 1024) + '"'
    out = outcome_from_done(done(outcome="SUCCEEDED", result_json=text), REPORT)
    assert (out.outcome, out.code, out.result_json) == (
        Outcome.UNKNOWN, "INVALID_HANDLER_RESULT", None)


@pytest.mark.parametrize("text", ["null", "12345678901234567890", '{"a":', "[NaN]",
                                  "[" * 40 + "]" * 40])
def test_a_result_is_not_parsed_again_in_the_parent(text: str) -> None:
    # The child checked it; the server checks every report again (tests/integration/
    # supervisor/test_supervise_basic.py follows a corrupted child's answer there).
    out = outcome_from_done(done(outcome="SUCCEEDED", result_json=text), REPORT)
    assert (out.outcome, out.result_json) == (Outcome.SUCCEEDED, text)


def test_a_valid_failure() -> None:
    out = outcome_from_done(done(outcome="FAILED", code="OBJECT_REJECTED", retryable=True,
                                 details_json='{"why":"x"}'), REPORT)
    assert (out.outcome, out.code, out.retryable, out.details_json) == (
        Outcome.FAILED, "OBJECT_REJECTED", True, '{"why":"x"}')


@pytest.mark.parametrize("fields", [
    {"code": "lower", "retryable": False, "details_json": "{}"},
    {"code": "OK", "retryable": "yes", "details_json": "{}"},
    {"code": "OK", "retryable": False, "details_json": "[1]"},
    {"code": "OK", "retryable": False, "details_json": '{"n":1e999}'},
    {"code": "OK", "retryable": False},
])
def test_failures_that_break_the_rules_are_handler_errors(fields: dict[str, Any]) -> None:
    out = outcome_from_done(done(outcome="FAILED", **fields), REPORT)
    assert (out.outcome, out.code, out.details_json) == (Outcome.UNKNOWN, "HANDLER_ERROR", None)


@pytest.mark.parametrize(("code", "expected"), [
    ("HANDLER_ERROR", "HANDLER_ERROR"), ("INVALID_HANDLER_RESULT", "INVALID_HANDLER_RESULT"),
    ("LEASE_LOST", "HANDLER_ERROR"), (None, "HANDLER_ERROR"),
])
def test_a_child_can_only_claim_its_own_unknown_codes(code: str | None, expected: str) -> None:
    out = outcome_from_done(done(outcome="UNKNOWN", code=code), REPORT)
    assert (out.outcome, out.code, out.retryable) == (Outcome.UNKNOWN, expected, False)


def test_a_handler_exception_keeps_only_its_type_name() -> None:
    out = outcome_from_done(done(outcome="UNKNOWN", code="HANDLER_ERROR",
                                 details_json='{"exception_type":"KeyError"}'), REPORT)
    assert (out.outcome, out.code, out.details_json) == (
        Outcome.UNKNOWN, "HANDLER_ERROR", '{"exception_type":"KeyError"}')
    named = outcome_from_done(done(outcome="UNKNOWN", code="HANDLER_ERROR",
                                   details_json='{"exception_type":"app.errors.Boom"}'), REPORT)
    assert named.details_json == '{"exception_type":"app.errors.Boom"}'


@pytest.mark.parametrize("details", [
    '{"exception_type":"KeyError","message":"secret"}', '{"exception_type":"a b"}',
    '{"exception_type":"x\\"}', '{"exception_type":1}', '{"message":"secret"}', "[1]", "{",
    '{"exception_type":"' + "A" * 200 + '"}',
])
def test_anything_else_a_child_puts_beside_an_unknown_is_dropped(details: str) -> None:
    out = outcome_from_done(done(outcome="UNKNOWN", code="HANDLER_ERROR",
                                 details_json=details), REPORT)
    assert (out.code, out.details_json) == ("HANDLER_ERROR", None)
    lost = outcome_from_done(done(outcome="UNKNOWN", code="INVALID_HANDLER_RESULT",
                                  details_json='{"exception_type":"KeyError"}'), REPORT)
    assert lost.details_json is None


@pytest.mark.parametrize("frame", [done(), done(outcome="MAYBE"),
                                   done(outcome="SUCCEEDED", result_json={"not": "text"})])
def test_garbage_frames_are_malformed(frame: TaskDone) -> None:
    with pytest.raises(MalformedMessage):
        outcome_from_done(frame, REPORT)
