"""store.retry.faults_logged: background store calls log and swallow what they raise - a
database fault as one warning line, a bug with its traceback - and keep going."""

from __future__ import annotations

import logging

import pytest

from orbit_server.store.retry import faults_logged
from orbit_wire.errors import ErrorCode, OrbitError

LOG = logging.getLogger("orbit.test.faults")


def test_a_database_fault_is_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, LOG.name), faults_logged(LOG, "pass %s failed", 7,
                                                                    event="pass_failed"):
        raise OrbitError(ErrorCode.UNAVAILABLE, "database is locked", retryable=True)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage() == "pass 7 failed: database is locked"
    assert (record.event, record.code) == ("pass_failed", "UNAVAILABLE")  # type: ignore[attr-defined]


def test_a_bug_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, LOG.name), faults_logged(LOG, "pass %s failed", 8,
                                                                    event="pass_failed"):
        raise KeyError("oops")
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage() == "pass 8 failed"
    assert record.event == "pass_failed"  # type: ignore[attr-defined]


def test_nothing_is_logged_when_the_block_succeeds(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, LOG.name), faults_logged(LOG, "pass failed",
                                                                  event="pass_failed"):
        pass
    assert caplog.records == []
