"""The pure rules of fair dispatch (domain/fairness.py): a task's stored value, and the turn
order a claim takes its candidate rows in."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

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


def _rotate_by_rounds(rows: list[dict[str, Any]], after: tuple[int, str] | None
                      ) -> list[str]:
    """The turn order spelled out: round after round, the next row of each value in cyclic
    order after ``after``, each value's rows in dispatch order, repeats dropped."""
    unique = list({r["id"]: r for r in rows}.values())  # each id where it first appears
    by_value: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in unique:
        by_value.setdefault(position(row), []).append(row)
    names = sorted(by_value)
    if after is not None:
        names = [n for n in names if n > after] + [n for n in names if n <= after]
    queues = [sorted(by_value[n], key=lambda r: (r["dispatch_rank"], r["available_at_ms"]))
              for n in names]
    out: list[str] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0)["id"])
    return out


_VALUES = st.sampled_from([None, "", "customer:a", "customer:b", "customer:c"])


@given(rows=st.lists(st.builds(_row, st.sampled_from([f"t{i}" for i in range(12)]), _VALUES,
                               st.integers(0, 2), st.integers(0, 3)), max_size=20),
       after=st.none() | _VALUES.map(lambda v: position({"fair_value": v})))
def test_rotation_is_one_row_per_value_per_round(rows: list[dict[str, Any]],
                                                 after: tuple[int, str] | None) -> None:
    # One row per id (a repeat is the same row read twice), in the order the ranges read.
    first = {r["id"]: r for r in reversed(rows)}
    rows = [first[r["id"]] for r in rows]
    assert [r["id"] for r in rotate(rows, after)] == _rotate_by_rounds(rows, after)
