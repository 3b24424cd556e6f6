"""The pure rules of fair dispatch (domain/fairness.py): a task's stored value, the order a
fair claim takes its numbered rows in, and the floors a claim raises."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from orbit_server.domain.fairness import claim_order, fair_value, started_turns


def _row(task_id: str, turn: int | None, rank: int = 5, at: int = 0) -> dict[str, Any]:
    return {"id": task_id, "fair_turn": turn, "dispatch_rank": rank, "available_at_ms": at}


def test_the_stored_value_is_the_first_key_of_the_name() -> None:
    assert fair_value(["region:eu", "customer:42", "customer:7"], "customer") == "customer:42"
    assert fair_value(["region:eu"], "customer") == ""  # fair queue, no such key
    assert fair_value(["customers:1"], "customer") == ""  # a longer name is another name


def test_priority_first_then_turn_then_the_older() -> None:
    rows = [_row("a2", 2, at=1), _row("b1", 1, at=5), _row("a1", 1, at=0),
            _row("urgent", 9, rank=0, at=9)]
    assert [r["id"] for r in sorted(rows, key=claim_order)] == ["urgent", "a1", "b1", "a2"]


@given(st.lists(st.tuples(st.integers(0, 9), st.none() | st.integers(1, 50)), max_size=30))
def test_the_floors_are_the_highest_turn_started_per_rank(
        started: list[tuple[int, int | None]]) -> None:
    rows = [_row(f"t{i}", turn, rank=rank) for i, (rank, turn) in enumerate(started)]
    floors = started_turns(rows)
    for rank in range(10):
        turns = [t for r, t in started if r == rank and t is not None]
        assert floors.get(rank) == (max(turns) if turns else None)
