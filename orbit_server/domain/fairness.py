"""Fair dispatch between the values of one key (docs/flow-control.md "Fair dispatch"): a
task's value for the queue's fair key name, and the order a claim takes its candidate rows
in: priority first, then turn (each value's tasks are numbered in turns as they become
ready), then the instant they became ready. Pure.

A task of a fair queue without the key has the value "": those take their turns as one
value. The value is not stored: a task is numbered by its keys and the queue's key name at
the time (at submit, or when a fair claim finds it ready without a turn).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# The value of a task without the key.
NO_VALUE = ""


def fair_value(keys: Iterable[str], key_name: str) -> str:
    """The value a task with ``keys`` takes its turns by while its queue is fair by
    ``key_name``: its first key of that name (``customer:42``), "" when it has none."""
    prefix = key_name + ":"
    for key in keys:  # a loop, not next(generator): a third of the time, once per fair submit
        if key.startswith(prefix):
            return key
    return NO_VALUE


def claim_order(row: Mapping[str, Any]) -> tuple[int, int, int]:
    """Where a numbered row stands in a fair claim: (rank, turn, available_at)."""
    return row["dispatch_rank"], row["fair_turn"], row["available_at_ms"]


def started_turns(rows: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    """The highest turn among ``rows`` per rank: the floors a claim of them raises."""
    out: dict[int, int] = {}
    for row in rows:
        rank, turn = row["dispatch_rank"], row["fair_turn"]
        if turn is not None and turn > out.get(rank, 0):
            out[rank] = turn
    return out
