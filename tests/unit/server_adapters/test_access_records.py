"""The access log's record (orbit_server/access_log.py): made without ``log.info``'s caller
and thread look-ups, it formats exactly as the record ``log.info`` made, in both formats."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pytest

from orbit_host.logs import JsonFormatter, TextFormatter, fields
from orbit_server.access_log import log, log_request


@dataclass
class _Route:
    path: str


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    kept: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(record)

    handler = Keep()
    saved = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield kept
    finally:
        log.removeHandler(handler)
        log.setLevel(saved)


def _stdlib_record(records: list[logging.LogRecord], method: str, path: str, status: int,
                   duration_ms: float, client: str | None) -> logging.LogRecord:
    log.info("%s %s %d %.2f ms", method, path, status, duration_ms, extra=fields(
        "http_request", method=method, path=path, status=status, duration_ms=duration_ms,
        client=client))
    return records.pop()


def test_the_record_formats_as_log_infos(records: list[logging.LogRecord]) -> None:
    scope = {"method": "POST", "route": _Route("/v1/queues/{queue_id}/tasks"),
             "client": ("127.0.0.1", 5000), "path": "/v1/queues/" + "a" * 32 + "/tasks",
             "query_string": b"wait_ms=5"}
    log_request(scope, 201, 0.0051937)
    log_request({"method": "GET", "path": "/nowhere"}, 404, 0.25)
    ours, unmatched = records[0], records[1]
    records.clear()
    theirs = _stdlib_record(records, "POST", "/v1/queues/{queue_id}/tasks", 201, 5.19,
                            "127.0.0.1")
    for fmt in (JsonFormatter(), TextFormatter()):
        ours.created = theirs.created
        ours.msecs = theirs.msecs
        assert fmt.format(ours) == fmt.format(theirs)
    out = orjson.loads(JsonFormatter().format(unmatched))
    assert out["message"] == "GET <unmatched> 404 250.00 ms" and "client" not in out
    assert out["event"] == "http_request" and out["logger"] == "orbit.access"
    assert "wait_ms" not in JsonFormatter().format(ours) + TextFormatter().format(ours)


def test_nothing_is_made_below_the_level(records: list[logging.LogRecord]) -> None:
    log.setLevel(logging.WARNING)
    log_request({"method": "GET", "path": "/healthz"}, 200, 0.001)
    assert records == []
    log.setLevel(logging.INFO)
    log_request({"method": "GET", "path": "/healthz"}, 200, 0.001)
    assert len(records) == 1
