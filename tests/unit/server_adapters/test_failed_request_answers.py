"""A worker request whose transaction fails as a whole: every op gets an answer, the
retryable fault's own code or INTERNAL, and a server fault is logged with its traceback."""

from __future__ import annotations

import logging

import pytest

from orbit_server.ws_endpoint import failed_request_answers
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.frames import ClaimOp, FinishOp, Request, StartOp
from orbit_wire.model import Outcome

REQUEST = Request(7, (
    StartOp("m1", "a" * 32, 1),
    FinishOp("m2", "b" * 32, 1, Outcome.SUCCEEDED, result_json="1"),
    ClaimOp("m3", 2),
))


def test_a_retryable_fault_answers_every_op_with_its_code(
        caplog: pytest.LogCaptureFixture) -> None:
    fault = OrbitError(ErrorCode.UNAVAILABLE, "the database is unavailable; retry",
                       retryable=True)
    with caplog.at_level(logging.DEBUG, logger="orbit.ws"):
        answers = failed_request_answers(REQUEST, fault)
    assert [a.msg_id for a in answers] == ["m1", "m2", "m3"]
    assert {(a.ok, a.error_code, a.error_message) for a in answers} == {
        (False, ErrorCode.UNAVAILABLE, "the database is unavailable; retry")}
    assert not caplog.records  # an expected fault, not a bug


@pytest.mark.parametrize("fault", [
    ValueError("a bug"),
    OrbitError(ErrorCode.CONFLICT, "a per-op error raised for the whole request"),
])
def test_anything_else_is_internal_and_logged(fault: Exception,
                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="orbit.ws"):
        answers = failed_request_answers(REQUEST, fault)
    assert [a.msg_id for a in answers] == ["m1", "m2", "m3"]
    assert {(a.ok, a.error_code) for a in answers} == {(False, ErrorCode.INTERNAL)}
    assert [r.exc_info[1] for r in caplog.records if r.exc_info] == [fault]
