"""The log record format (orbit_host/logs.py) and the children's output lines
(orbit_host/output.py): what a record holds in each format, how a pipe's bytes become lines,
and which lines count as Orbit's own diagnostics."""

from __future__ import annotations

import io
import logging
import sys

import orjson

from orbit_host.logs import JsonFormatter, TextFormatter, configure_logging, fields
from orbit_host.output import (
    DIAGNOSTIC_MARK,
    LineSplitter,
    OutputLine,
    diagnostic_line,
    parse_line,
)


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("orbit.test", logging.WARNING, __file__, 1, "killed %s",
                               ("a1",), None)
    record.__dict__.update(extra)
    return record


def test_a_json_record_has_the_keys_the_event_and_its_fields() -> None:
    line = JsonFormatter().format(_record(**fields("child_killed", attempt_id="a1",
                                                   task_id="t1", late_ms=None)))
    out = orjson.loads(line)
    assert "\n" not in line
    assert {k: out[k] for k in ("level", "logger", "event", "message", "attempt_id",
                                "task_id")} == {
        "level": "WARNING", "logger": "orbit.test", "event": "child_killed",
        "message": "killed a1", "attempt_id": "a1", "task_id": "t1"}
    assert "late_ms" not in out and isinstance(out["ts"], float)


def test_a_text_line_names_the_task_beside_the_attempt() -> None:
    line = TextFormatter().format(_record(**fields("child_killed", attempt_id="a1",
                                                   task_id="t1")))
    assert line.endswith("WARNING orbit.test: killed a1 (task t1)")
    # An ID the message does not show is named too; one it shows is not repeated.
    line = TextFormatter().format(_record(**fields("x", attempt_id="a9", task_id="t1")))
    assert line.endswith(": killed a1 (task t1, attempt a9)")
    assert TextFormatter().format(_record()).endswith(": killed a1")
    child = _record(exc="Traceback (most recent call last):\nKeyError: 'k'\n", task_id="t1")
    assert TextFormatter().format(child).endswith(
        "killed a1 (task t1)\nTraceback (most recent call last):\nKeyError: 'k'")


def test_a_record_without_an_event_is_named_after_its_logger() -> None:
    record = logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, "bad", (), None)
    assert orjson.loads(JsonFormatter().format(record))["event"] == "uvicorn_error"


def test_a_traceback_is_one_string_in_json_and_lines_below_in_text() -> None:
    try:
        raise KeyError("k")
    except KeyError:
        record = logging.LogRecord("orbit.x", logging.ERROR, __file__, 1, "boom", (),
                                   sys.exc_info())
    out = orjson.loads(JsonFormatter().format(record))
    assert out["exc"].startswith("Traceback") and "KeyError" in out["exc"]
    child = _record(exc="Traceback (most recent call last):\nKeyError: 'k'\n")
    text = TextFormatter().format(child)
    assert text.endswith("WARNING orbit.test: killed a1\nTraceback (most recent call last):"
                         "\nKeyError: 'k'")


def test_configure_logging_routes_every_logger_through_one_handler() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("info", "json", stream)
        logging.getLogger("uvicorn.error").warning("x")
        logging.getLogger("orbit.y").debug("hidden")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    (line,) = stream.getvalue().splitlines()
    assert orjson.loads(line)["logger"] == "uvicorn.error"


def test_lines_are_split_kept_partial_and_cut_when_too_long() -> None:
    lines = LineSplitter(max_line=8)
    assert lines.feed(b"one\ntw") == [b"one"]
    assert lines.feed(b"o\r\nthree") == [b"two\r"]
    assert lines.feed(b"-and-more") == [b"three-an"]
    assert lines.flush() == [b"d-more"] and lines.flush() == []


def test_a_diagnostic_line_round_trips_and_anything_else_is_plain_text() -> None:
    raw = diagnostic_line("ERROR", "handler_raised", "raised KeyError", "Traceback\n  x\n")
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert parse_line(raw[:-1], "child_output") == OutputLine(
        "ERROR", "handler_raised", "raised KeyError", "Traceback\n  x\n")
    assert parse_line(b"print me\r", "child_output") == OutputLine(
        "INFO", "child_output", "print me")
    for forged in (DIAGNOSTIC_MARK + b"{not json", DIAGNOSTIC_MARK + b'{"level":"LOUD",'
                   b'"event":"x","message":"m"}', DIAGNOSTIC_MARK + b'{"level":"INFO",'
                   b'"event":"Not Snake","message":"m"}'):
        assert parse_line(forged, "child_output").event == "child_output"
    assert parse_line(b"\xff\xfe", "child_output").message == "\ufffd\ufffd"


def test_the_text_time_is_the_stdlibs_across_seconds() -> None:
    ours, stdlib = TextFormatter(), logging.Formatter("%(asctime)s")
    for created in (1_796_206_517.001, 1_796_206_517.999, 1_796_206_518.5, 1_796_206_517.25):
        record = _record()
        record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
        assert ours.formatTime(record) == stdlib.formatTime(record)
    assert ours.formatTime(record, "%Y") == stdlib.formatTime(record, "%Y")
