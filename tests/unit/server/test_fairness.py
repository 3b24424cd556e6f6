"""The pure rules of fair dispatch (domain/fairness.py): a task's stored value, and the turn
order a claim takes its candidate rows in."""

from __future__ import annotations

from typing import Any

from orbit_server.domain.fairness import fair_value, position, rotate


def _row(task_id: str, value: str | None, rank: int = 5, at: int = 0) -> dict[str, Any]:
    return {"id": task_id, "fair_value": value, "dispatch_rank": rank, "available_at_ms": at}


def test_the_stored_value_is_the_first_key_of_the_name() -> None:
    assert fair_value(["region:eu", "customer:42", "customer:7"], "customer") == "customer:42"
    assert fair_value(["region:eu"], "customer") == ""  # fair queue, no such key
    assert fair_value(["customer:42"], None) is None  # queue not fair
    assert fair_value(["customers:1"], "customer") == ""  # a longer name is another name


def test_values_take_turns_and_priority_orders_within_one() -> None:
    rows = [_row(f"a{i}", "customer:a", at=i) for i in range(5)]
    rows += [_row("b0", "customer:b", at=9), _row("b1", "customer:b", rank=0, at=10)]
    rows += [_row("n0", None, at=-1), _row("e0", "", at=3)]
    order = [r["id"] for r in rotate(rows, None)]
    # The null group first, then "", then the values; one each per round; within a value
    # the lower rank (higher priority) first.
    assert order == ["n0", "e0", "a0", "b1", "a1", "b0", "a2", "a3", "a4"]


def test_the_rotation_starts_after_the_value_served_last_and_drops_repeats() -> None:
    rows = [_row("a0", "customer:a"), _row("b0", "customer:b"), _row("c0", "customer:c"),
            _row("b0", "customer:b"), _row("n0", None)]
    after_b = position(_row("x", "customer:b"))
    assert [r["id"] for r in rotate(rows, after_b)] == ["c0", "n0", "a0", "b0"]
    after_null = position(_row("x", None))
    assert [r["id"] for r in rotate(rows, after_null)] == ["a0", "b0", "c0", "n0"]
    assert rotate([], None) == []
