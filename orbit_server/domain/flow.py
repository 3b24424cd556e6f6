"""Flow control at dispatch (docs/flow-control.md): which of the claimable tasks, in
dispatch order, may start without putting a key over a limit of its queue. Pure: the limits,
the keys' usage and the instant are arguments.

Every limit whose pattern matches a task's key applies (``customer:42`` and ``customer:*``
both). A limit bounds the key's open attempts (``max_running``) and its starts within any
window of ``rate_interval_ms`` (``rate_count``: a sliding window, so no window ever holds
more). A task that would go over is held and the next one is looked at: a held task does
not block those behind it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orbit_wire.flow import pattern_matches

LIMIT_FULL = "LIMIT_FULL"

__all__ = ["LIMIT_FULL", "Held", "Limit", "Usage", "admit", "admit_pairs", "limit_of_row",
           "matching", "rate_frees_at", "usage_since"]


@dataclass(frozen=True, slots=True)
class Limit:
    pattern: str
    max_running: int | None = None
    rate_count: int | None = None
    rate_interval_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """A key's open attempts, and its starts within the limit's rate window up to now."""

    running: int = 0
    recent_starts: int = 0
    oldest_recent_ms: int | None = None  # the earliest of those starts


def rate_frees_at(limit: Limit, usage: Usage, now: int) -> int | None:
    """When a key held by this limit's rate may start again: its oldest start in the window
    leaves it (a start made now, when this claim filled it); None without a rate."""
    if limit.rate_interval_ms is None:
        return None
    oldest = usage.oldest_recent_ms if usage.recent_starts else None
    return (now if oldest is None else oldest) + limit.rate_interval_ms


_UNUSED = Usage()


@dataclass(frozen=True, slots=True)
class Held:
    """Why a task is held: the key, the limit's pattern, and which bound is full."""

    key: str
    pattern: str
    bound: str  # "max_running" or "rate"
    limit: int

    def waiting(self) -> dict[str, object]:
        """The ``waiting`` fact of a PENDING task held by this limit."""
        return {"reason": LIMIT_FULL, "key": self.key, "limit": self.pattern,
                "bound": self.bound, "max": self.limit}


def limit_of_row(row: Mapping[Any, Any]) -> Limit:
    def num(name: str) -> int | None:
        value = row.get(name)
        return None if value is None else int(value)
    return Limit(str(row["pattern"]), num("max_running"), num("rate_count"),
                 num("rate_interval_ms"))


def matching(keys: Iterable[str], patterns: Iterable[str]) -> list[tuple[str, str]]:
    """Every (key, pattern) pair where the pattern matches the key."""
    pats = list(patterns)
    return [(key, p) for key in keys for p in pats if pattern_matches(p, key)]


def usage_since(limit: Limit, now: int) -> int:
    """The instant after which a start counts against the limit's rate (now: none does)."""
    if limit.rate_count is None or limit.rate_interval_ms is None:
        return now
    return now - limit.rate_interval_ms


def admit(task_keys: Sequence[Sequence[str]], limits: Mapping[str, Limit],
          usage: Mapping[tuple[str, str], Usage], count: int
          ) -> tuple[list[int], dict[int, Held]]:
    """The positions of the tasks (their keys, in dispatch order) that may start now, at
    most ``count``, and why each task looked at and left is held. ``usage`` is by (key,
    pattern) for every matching pair; a pair without usage counts as unused."""
    return admit_pairs([matching(keys, limits) for keys in task_keys], limits, usage, count)


def admit_pairs(task_pairs: Sequence[Sequence[tuple[str, str]]], limits: Mapping[str, Limit],
                usage: Mapping[tuple[str, str], Usage], count: int
                ) -> tuple[list[int], dict[int, Held]]:
    """``admit`` of tasks given by their (key, pattern) pairs (``matching``, in the order
    ``matching`` gives them, every pattern one of ``limits``)."""
    room: dict[tuple[str, str], int] = {}  # each pair's starts left, as this claim admits
    admitted: list[int] = []
    held: dict[int, Held] = {}
    for i, pairs in enumerate(task_pairs):
        if len(admitted) >= count:
            break
        full = None
        for pair in pairs:
            left = room.get(pair)
            if left is None:
                left = room[pair] = _room(limits[pair[1]], usage.get(pair, _UNUSED))
            if left <= 0:
                full = pair
                break
        if full is not None:
            limit, used = limits[full[1]], usage.get(full, _UNUSED)
            held[i] = _held(full, limit, used, _room(limit, used) - room[full])
            continue
        for pair in pairs:
            room[pair] -= 1
        admitted.append(i)
    return admitted, held


_UNBOUNDED = 2**62


def _room(limit: Limit, used: Usage) -> int:
    """How many more starts the limit lets a key with this usage make now."""
    room = _UNBOUNDED
    if limit.max_running is not None:
        room = limit.max_running - used.running
    if limit.rate_count is not None:
        room = min(room, limit.rate_count - used.recent_starts)
    return room


def _held(pair: tuple[str, str], limit: Limit, used: Usage, extra: int) -> Held:
    """Why a pair with no room left holds a task (``extra``: starts this claim admitted)."""
    key, pattern = pair
    if limit.max_running is not None and used.running + extra >= limit.max_running:
        return Held(key, pattern, "max_running", limit.max_running)
    assert limit.rate_count is not None  # no room, and not for max_running
    return Held(key, pattern, "rate", limit.rate_count)
