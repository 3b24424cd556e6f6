"""Flow control inside a dispatch transaction (docs/flow-control.md): of the claimable rows
a claim read, the ones that may start without putting a key over a limit, and the holds
that count the ones that do. Called by ``reservations`` only for a queue that has limits
(``LimitTable``): a queue without limits pays one dictionary look-up.

The limit rows a claim applies are locked (FOR UPDATE on MySQL/MariaDB) before the keys'
usage is read, and the holds are written in the same transaction as the attempts, so two
replicas never both take a key's last slot or its last start of a rate window.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection

from ..domain.flow import (
    Held,
    Limit,
    Usage,
    admit,
    admit_pairs,
    limit_of_row,
    matching,
    rate_frees_at,
    usage_since,
)
from ..store import limits as stored
from ..store.limits import PRUNE_AGE_MS

# A claim with limits reads this many more claimable rows than it wants, so tasks held by
# a limit do not block the ones behind them (beyond the window they wait for the next claim).
HELD_WINDOW = 64
PRUNE_BATCH = 512  # more than a claim adds (MAX_RESERVATIONS_PER_FRAME); MySQL/MariaDB


def row_keys(row: Mapping[str, Any]) -> tuple[str, ...]:
    text = row.get("limit_keys")
    return tuple(orjson.loads(text)) if text else ()


@functools.lru_cache(maxsize=4096)
def _pairs_of(text: str, patterns: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``matching`` of a task's stored keys (its ``limit_keys`` text) and these patterns:
    the rows of one claim mostly share a few key sets, so each is parsed and matched once."""
    return tuple(matching(orjson.loads(text), patterns))


@functools.lru_cache(maxsize=4096)
def _held_keys(text: str, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The distinct keys of a task's stored keys that a limit of ``patterns`` matches, in
    order: the keys an attempt of the task holds."""
    return tuple(sorted({key for key, _p in _pairs_of(text, patterns)}))


def row_pairs(row: Mapping[str, Any], patterns: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Each (key of the task, pattern of ``patterns`` matching it)."""
    text = row.get("limit_keys")
    return _pairs_of(text, patterns) if text else ()


def admit_rows(conn: Connection, queue_id: str, rows: Sequence[dict[str, Any]],
               count: int, limits: Mapping[str, Limit], now: int
               ) -> tuple[list[dict[str, Any]], dict[str, Held], int | None]:
    """Of ``rows`` (dispatch order), at most ``count`` that may start now, why each row
    looked at and left is held (by task ID), and when the first task held by a rate may
    start (None: none is). Locks the limits that apply, prunes their keys' old holds."""
    patterns = tuple(limits)
    task_pairs = [row_pairs(row, patterns) for row in rows]
    pairs = {pair for these in task_pairs for pair in these}
    if not pairs:
        return list(rows[:count]), {}, None
    locked = {row["pattern"]: limit_of_row(row)
              for row in stored.lock_limits(conn, queue_id, {p for _k, p in pairs})}
    if len(locked) < len({p for _k, p in pairs}):  # a limit deleted meanwhile
        pairs = {(k, p) for k, p in pairs if p in locked}
        task_pairs = [tuple((k, p) for k, p in these if p in locked) for these in task_pairs]
    usage = _usage(conn, queue_id, pairs, locked, now)
    admitted, held = admit_pairs(task_pairs, locked, usage, count)
    frees = [rate_frees_at(locked[h.pattern], usage.get((h.key, h.pattern), Usage()), now)
             for h in held.values() if h.bound == "rate"]
    wake = min((f for f in frees if f is not None), default=None)
    return ([rows[i] for i in admitted],
            {str(rows[i]["id"]): reason for i, reason in held.items()}, wake)


def _usage(conn: Connection, queue_id: str, pairs: set[tuple[str, str]],
           limits: Mapping[str, Limit], now: int) -> dict[tuple[str, str], Usage]:
    """Each (key, pattern)'s usage: old holds pruned first (a bounded batch), then one
    statement per distinct rate window (mostly one)."""
    keys = sorted({k for k, _p in pairs})
    if not keys:
        return {}
    longest = max((limits[p].rate_interval_ms or 0) for _k, p in pairs)
    stored.prune_holds(conn, queue_id, keys, now - longest, now - max(longest, PRUNE_AGE_MS),
                       PRUNE_BATCH)
    by_since: dict[int, list[tuple[str, str]]] = {}
    for key, pattern in pairs:
        by_since.setdefault(usage_since(limits[pattern], now), []).append((key, pattern))
    usage: dict[tuple[str, str], Usage] = {}
    for since, group in by_since.items():
        found = stored.keys_usage(conn, queue_id, sorted({k for k, _p in group}), since)
        for key, pattern in group:
            usage[(key, pattern)] = Usage(*found.get(key, (0, 0, None)))
    return usage


def record_holds(conn: Connection, queue_id: str,
                 started: Sequence[tuple[Mapping[str, Any], str]],
                 limits: Mapping[str, Limit], now: int) -> None:
    """A hold for each (key under a limit, attempt) of the (task row, attempt ID) pairs
    reserved now, in one statement."""
    patterns = tuple(limits)
    stored.insert_holds(conn, [(queue_id, key, attempt_id, now)
                               for row, attempt_id in started
                               if (text := row.get("limit_keys"))
                               for key in _held_keys(text, patterns)])


def held_now(conn: Connection, queue_id: str, keys: Sequence[str],
             limits: Mapping[str, Limit], now: int) -> Held | None:
    """Why a PENDING task with ``keys`` would be held now, read without locks (the
    ``waiting`` fact), or None."""
    pairs = matching(keys, limits)
    if not pairs:
        return None
    usage = {(k, p): Usage(*stored.key_usage(conn, queue_id, k, usage_since(limits[p], now)))
             for k, p in pairs}
    _admitted, held = admit([tuple(keys)], limits, usage, 1)
    return held.get(0)
