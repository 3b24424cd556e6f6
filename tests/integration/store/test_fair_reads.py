"""A fair claim's reads on a real store: on SQLite the values and their ranges come from two
statements per capability (store/fair_sqlite.py), on MySQL/MariaDB from two per value; both
give the same values in the same cyclic order (from the start, after a value, wrapping
around, bounded, with "more left"), the same rows of each value, and a claim of n tasks
reads no more than n values."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event
from store_support import CAP, World

from orbit_server.store import fair_sqlite, fairness, queries
from orbit_server.store.prepared import prepared_select

VALUES = ["", "customer:a", "customer:b", "customer:c", "customer:d", "customer:e"]


def _seed(world: World) -> dict[str, list[str]]:
    """A fair queue with three tasks of each value (the last one delayed, so not claimable
    yet), the "" value's tasks without the key; their ids by value, oldest first."""
    world.service.fair.set_fair(world.admin, world.queue_id, {"key": "customer"})
    by_value: dict[str, list[str]] = {}
    for value in VALUES:
        keys = {"limits": [value]} if value else {}
        ids = world.submit_many(2, **keys)
        ids.append(world.submit(delay_ms=60_000, **keys)["id"])
        by_value[value] = ids
    return by_value


def _params() -> dict[str, Any]:
    return {"queue_id": "", "handler": CAP.handler, "handler_version": CAP.handler_version,
            "payload_version": CAP.payload_version}


def _per_value_ranges(world: World, params: dict[str, Any], values: list[str],
                      share: int) -> list[dict[str, Any]]:
    """The ranges as MySQL/MariaDB read them: one DISPATCH_FAIR statement per value."""
    query = prepared_select(queries.DISPATCH_FAIR)
    with world.engine.connect() as conn:
        return [dict(zip(query.keys, r, strict=True)) for value in values
                for r in query.all(conn, {**params, "fair_value": value,
                                          "now": world.clock.now, "n": share})]


@pytest.mark.parametrize("after,most,expected", [
    (None, 10, (VALUES, False)),
    (None, 3, (VALUES[:3], True)),
    ("customer:b", 10, (VALUES[3:] + VALUES[:3], False)),  # wraps around to "" .. b
    ("customer:b", 4, (VALUES[3:] + VALUES[:1], True)),
    ("customer:b", 3, (VALUES[3:], True)),  # the values after fill it: more before
    ("customer:e", 2, (VALUES[:2], True)),  # nothing after the last: from the first
    ("customer:zz", 10, (VALUES, False)),
])
def test_both_reads_give_the_values_in_turn_order(world: World, after: str | None, most: int,
                                                   expected: tuple[list[str], bool]) -> None:
    _seed(world)
    params = {**_params(), "queue_id": world.queue_id}
    with world.engine.connect() as conn:
        assert fairness._values(conn, params, after, most) == expected
        if world.engine.dialect.name == "sqlite":
            assert fair_sqlite.fair_values(conn, params, after, most) == expected


def test_both_reads_give_the_same_rows_of_each_value(world: World) -> None:
    by_value = _seed(world)
    params = {**_params(), "queue_id": world.queue_id}
    for share in (1, 2, 5):
        per_value = _per_value_ranges(world, params, VALUES[1:4], share)
        # Oldest first within a value; the delayed task is not claimable.
        assert [r["id"] for r in per_value] == [
            i for v in VALUES[1:4] for i in by_value[v][:min(share, 2)]]
        if world.engine.dialect.name == "sqlite":
            with world.engine.connect() as conn:
                one = fair_sqlite.fair_ranges(conn, params, VALUES[1:4], world.clock.now,
                                              share)
            assert one == per_value
    with world.engine.connect() as conn:
        assert fair_sqlite.fair_ranges(conn, params, [], world.clock.now, 3) == []


def test_a_small_claim_reads_no_more_values_than_it_takes(world: World) -> None:
    _seed(world)
    with world.engine.connect() as conn:
        rows, more = fairness.fair_rows(conn, world.queue_id, [CAP], world.clock.now, 2, None)
    assert {r["fair_value"] for r in rows} == set(VALUES[:2]) and more
    seeks: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "fair_value >" in statement or "fair_value IS NOT NULL" in statement:
            seeks.append(statement)

    b = world.hello()
    event.listen(world.engine, "before_cursor_execute", record)
    try:
        got = world.service.workers.reserve(b, 1)
    finally:
        event.remove(world.engine, "before_cursor_execute", record)
    assert len(got) == 1
    if world.engine.dialect.name == "sqlite":
        return  # its statements go to the driver directly (the read is checked above)
    # MySQL/MariaDB: a claim of one seeks one value and the one after (more are left).
    assert len(seeks) == 2, seeks
