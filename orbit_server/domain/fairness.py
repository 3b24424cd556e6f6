"""Fair dispatch between the values of one key (docs/flow-control.md "Fair dispatch"): a
task's value for the queue's fair key name, and the order a claim takes its candidate rows
in: one row of each value in turn, starting after the value served last, priority order
within a value. Pure.

Values sort as strings; a task of a fair queue without the key has the value "" and one
submitted before the queue was fair has none (null, ``BEFORE``): both take their turn like
a value, the null group first in the cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import zip_longest
from operator import itemgetter
from typing import Any

# A task submitted while its queue was not fair (tasks.fair_value null): a group of its own.
BEFORE = None


def fair_value(keys: Iterable[str], key_name: str | None) -> str | None:
    """The value a task with ``keys`` is stored with while its queue's fair key name is
    ``key_name``: its first key of that name (``customer:42``), "" when it has none, None
    when the queue is not fair."""
    if key_name is None:
        return None
    prefix = key_name + ":"
    for key in keys:  # a loop, not next(generator): a third of the time, once per fair submit
        if key.startswith(prefix):
            return key
    return ""


_BEFORE = (0, "")  # the place of the group without a value (BEFORE) in the cycle
_DISPATCH_ORDER = itemgetter("dispatch_rank", "available_at_ms")


def _order(value: str | None) -> tuple[int, str]:
    return _BEFORE if value is None else (1, value)


def rotate(rows: Sequence[Mapping[str, Any]], after: tuple[int, str] | None
           ) -> list[Mapping[str, Any]]:
    """``rows`` (each with ``fair_value``, in dispatch order within a value, duplicates by
    ``id`` dropped) taken one per value in turn: the values in their cyclic order starting
    with the first after ``after`` (``position`` of the value served last; None: from the
    start), the first row of each, then the second of each, ..."""
    groups: dict[tuple[int, str], list[Mapping[str, Any]]] = {}
    seen: set[Any] = set()
    for row in rows:
        if row["id"] in seen:
            continue
        seen.add(row["id"])
        value = row["fair_value"]
        groups.setdefault(_BEFORE if value is None else (1, value), []).append(row)
    for group in groups.values():
        if len(group) > 1:
            group.sort(key=_DISPATCH_ORDER)
    names = sorted(groups)
    if after is not None:
        names = [n for n in names if n > after] + [n for n in names if n <= after]
    # The first row of each value in turn, then the second of each, ...
    return [row for turn in zip_longest(*(groups[n] for n in names)) for row in turn
            if row is not None]


def position(row: Mapping[str, Any]) -> tuple[int, str]:
    """Where ``row``'s value stands in the cycle (the cursor after serving it)."""
    return _order(row["fair_value"])
