"""The parent's checks of a child's answer (orbit_supervisor.outcomes), without processes."""

from __future__ import annotations

from typing import Any

import orjson
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


def test_a_null_result_is_a_result() -> None:
    # A handler that returned None succeeded; its result is JSON null.
    out = outcome_from_done(done(outcome="SUCCEEDED", result_json="null"), REPORT)
    assert (out.outcome, out.code, out.result_json) == (Outcome.SUCCEEDED, None, "null")


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


def test_an_exception_message_is_kept_only_where_the_operator_asked() -> None:
    raised = {"outcome": "UNKNOWN", "code": "HANDLER_ERROR",
              "details_json": '{"exception_type":"builtins.ValueError"}',
              "exception_message": "bad row 7\nsecond line"}
    off = outcome_from_done(done(**raised), REPORT)
    assert off.details_json == '{"exception_type":"builtins.ValueError"}'
    on = outcome_from_done(done(**raised), REPORT, exception_messages=True)
    assert on.details_json == ('{"exception_type":"builtins.ValueError",'
                               '"exception_message":"bad row 7"}')
    # The parent bounds what the child sent: one line, at most 1 KiB of UTF-8.
    long = outcome_from_done(done(**{**raised, "exception_message": "é" * 2000}), REPORT,
                             exception_messages=True)
    assert long.details_json is not None
    kept = orjson.loads(long.details_json)["exception_message"]
    assert kept == "é" * 512 and len(kept.encode()) == 1024


def test_a_declared_failure_carries_its_type_and_the_message_only_when_asked() -> None:
    declared = {"outcome": "FAILED", "code": "HANDLER_ERROR", "retryable": True,
                "details_json": '{"exception_type":"myapp.errors.Boom"}',
                "exception_message": "upstream said no"}
    off = outcome_from_done(done(**declared), REPORT)
    assert (off.outcome, off.code, off.retryable, off.details_json) == (
        Outcome.FAILED, "HANDLER_ERROR", True, '{"exception_type":"myapp.errors.Boom"}')
    on = outcome_from_done(done(**declared), REPORT, exception_messages=True)
    assert orjson.loads(str(on.details_json)) == {"exception_type": "myapp.errors.Boom",
                                                  "exception_message": "upstream said no"}


@pytest.mark.parametrize("frame", [done(), done(outcome="MAYBE"),
                                   done(outcome="SUCCEEDED", result_json={"not": "text"})])
def test_garbage_frames_are_malformed(frame: TaskDone) -> None:
    with pytest.raises(MalformedMessage):
        outcome_from_done(frame, REPORT)
