"""The task list's pure rules: filter parsing, the cursor, cutting a page from state ranges
(with and without the scan budget), the waiting fact and the once-per-interval warnings."""

from __future__ import annotations

from typing import Any

import pytest

from orbit_server.domain.listing import (
    SCAN_BUDGET,
    Position,
    TaskFilter,
    WarnOnce,
    cut_page,
    decode_cursor,
    encode_cursor,
    parse_filter,
    waiting_fact,
)
from orbit_wire.errors import OrbitError
from orbit_wire.model import Capability, TaskState

CAP = Capability("h", "v1", "v1")


def row(created: int, i: int, handler: str = "h") -> dict[str, Any]:
    return {"id": f"{i:032x}", "created_at_ms": created, "handler": handler,
            "handler_version": "v1", "payload_version": "v1", "finished_at_ms": None}


def test_cursor_round_trip_and_order_binding() -> None:
    filt = TaskFilter()
    pos = Position(1_800_000_000_000, "ab" * 16)
    text = encode_cursor(filt, pos)
    assert decode_cursor(text, True) == pos
    with pytest.raises(OrbitError):
        decode_cursor(text, False)
    for bad in ("", "!!!", "bi4xLjI", encode_cursor(filt, pos)[:-2], "x" * 200):
        with pytest.raises(OrbitError):
            decode_cursor(bad, True)


def test_parse_filter_reads_repeats_and_commas() -> None:
    filt = parse_filter({"state": ["failed,needs_review", "FAILED"], "limit": ["7"],
                         "order": ["oldest"], "handler": ["x"]})
    assert filt.states == (TaskState.FAILED, TaskState.NEEDS_REVIEW)
    assert filt.limit == 7 and not filt.newest_first and filt.scanned_filters
    assert filt.scan_size == SCAN_BUDGET
    assert parse_filter({}).wanted_states() == tuple(TaskState)
    assert parse_filter({}).scan_size == 51


def test_cut_page_merges_state_ranges_in_order() -> None:
    filt = TaskFilter(limit=3)
    a = [row(10, 5), row(8, 3), row(6, 1), row(5, 0)]  # each range newest first
    b = [row(9, 4), row(7, 2)]
    page, nxt = cut_page(filt, [a, b])
    assert [r["created_at_ms"] for r in page] == [10, 9, 8]
    assert nxt == Position(8, f"{3:032x}")
    page, nxt = cut_page(TaskFilter(limit=10), [a, b])
    assert len(page) == 6 and nxt is None


def test_cut_page_with_a_scanned_filter_stops_at_the_budget() -> None:
    filt = TaskFilter(limit=2, handler="rare")
    rows = [row(SCAN_BUDGET + 10 - i, i, "rare" if i in (3, 9) else "h")
            for i in range(SCAN_BUDGET + 10)]
    page, nxt = cut_page(filt, [rows[:SCAN_BUDGET]])
    assert [r["id"] for r in page] == [f"{3:032x}", f"{9:032x}"]
    # The page is full and the scan found no further match: go on after the scanned rows.
    assert nxt == Position(11, f"{SCAN_BUDGET - 1:032x}")
    page, nxt = cut_page(TaskFilter(limit=1, handler="rare"), [rows[:SCAN_BUDGET]])
    assert nxt == Position(SCAN_BUDGET + 10 - 3, f"{3:032x}")  # a match lies past the page
    empty, nxt = cut_page(filt, [rows[10:10 + SCAN_BUDGET]])
    assert empty == [] and nxt == Position(1, f"{SCAN_BUDGET + 9:032x}")  # budget spent
    short, nxt = cut_page(filt, [rows[5:20]])
    assert [r["id"] for r in short] == [f"{9:032x}"] and nxt is None  # the range ended


def test_waiting_fact() -> None:
    assert waiting_fact("RUNNING", CAP, 5, {}) is None
    assert waiting_fact("PENDING", CAP, 5, {CAP: None}) is None
    assert waiting_fact("PENDING", CAP, 5, {}) == {
        "reason": "NO_LIVE_WORKER", "capability": CAP.to_dict(), "since": 5}
    assert waiting_fact("PENDING", CAP, 5, {CAP: 9})["since"] == 9
    assert waiting_fact("PENDING", CAP, 5, {CAP: 2})["since"] == 5


def test_waiting_fact_of_a_task_that_requires_labels() -> None:
    gpu = {"gpu": "a100"}
    # A live worker has the labels: nothing to say.
    assert waiting_fact("PENDING", CAP, 5, {CAP: None}, gpu, [{}, {"gpu": "a100"}]) is None
    # Live workers offer the capability, none has the labels: which labels, since submit.
    assert waiting_fact("PENDING", CAP, 5, {CAP: None}, gpu, [{}, {"gpu": "h100"}]) == {
        "reason": "NO_MATCHING_WORKER", "capability": CAP.to_dict(), "requires": gpu,
        "since": 5}
    # No live worker at all: the usual fact, labels or not.
    assert waiting_fact("PENDING", CAP, 5, {CAP: 9}, gpu)["reason"] == "NO_LIVE_WORKER"
    assert waiting_fact("RUNNING", CAP, 5, {CAP: None}, gpu, []) is None


def test_warn_once_per_capability_and_interval() -> None:
    warn = WarnOnce(300.0)
    a = {"queue_id": "q", "capability": CAP.to_dict()}
    b = {"queue_id": "q", "capability": {**CAP.to_dict(), "handler_version": "v2"}}
    assert warn.due([a, b], 0.0) == [a, b]
    assert warn.due([a, b], 299.0) == []
    assert warn.due([a], 300.0) == [a]
    assert warn.due([b], 301.0) == [b]
    assert warn.due([b], 600.0) == []  # within b's new interval
    assert warn.due([b], 601.0) == [b]
    warn.due([], 10_000.0)
    assert warn.due([a], 10_001.0) == [a]  # forgotten, then warned again
