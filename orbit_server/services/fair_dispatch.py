"""Fair dispatch inside a claim (docs/flow-control.md "Fair dispatch"). For a queue whose
``FairTable`` entry names a key, the candidate rows are its numbered tasks in (rank, turn)
order and its ready tasks without a turn (after a delay, a retry's backoff, a workflow
release, or queued before the queue was fair), which are numbered here first; limits then
admit them in that order, and the turns a claim starts raise the floors. For a queue that
is not fair, numbered tasks left from a time it was are given back to plain order as a
claim finds them (``unnumbered_rows``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from ..domain.fairness import claim_order, fair_value, started_turns
from ..store import claims, fairness
from .binding import WorkerBinding
from .fair_table import FairTable
from .flow import row_keys


def fair_rows(conn: Connection, binding: WorkerBinding, now: int, want: int, key_name: str
              ) -> tuple[list[dict[str, Any]], bool]:
    """The claim's candidate rows in fair order, each numbered, and whether a range read
    may have left rows unread (the claim then does not report the queue drained)."""
    queue_id, caps = binding.queue_id, binding.capabilities
    rows = claims.numbered_rows(conn, queue_id, caps, now, want)
    fresh = claims.claimable_rows(conn, queue_id, caps, now, want)
    more = len(rows) >= want or len(fresh) >= want
    if binding.labels:  # tasks that require labels: their own ranges
        rows.extend(claims.keyed_rows(conn, queue_id, caps, binding.labels, now, want,
                                      numbered=True))
        fresh.extend(claims.keyed_rows(conn, queue_id, caps, binding.labels, now, want))
    if fresh:  # each by its value for the queue's key name now
        fresh.sort(key=claims.in_dispatch_order)
        fairness.number(conn, queue_id, [(row, fair_value(row_keys(row), key_name))
                                         for row in fresh])
        fairness.renumber(conn, fresh)
        rows.extend(fresh)
    if fresh or binding.labels or len(caps) > 1:  # else one range, already in this order
        rows.sort(key=claim_order)
    return rows, more


def unnumbered_rows(conn: Connection, binding: WorkerBinding, now: int, want: int,
                    fair: FairTable) -> list[dict[str, Any]]:
    """For a queue that is not fair: the numbered tasks it still holds (up to ``want`` per
    range), their turns cleared so they stand in plain order again; looked for at every
    claim while some are found, otherwise once a second."""
    queue_id, caps = binding.queue_id, binding.capabilities
    if not fair.numbered_due(queue_id, now):
        return []
    rows = claims.numbered_rows(conn, queue_id, caps, now, want)
    if binding.labels:
        rows.extend(claims.keyed_rows(conn, queue_id, caps, binding.labels, now, want,
                                      numbered=True))
    fair.numbered_looked(queue_id, now, found=bool(rows))
    for row in rows:
        row["fair_turn"] = None
    fairness.renumber(conn, rows)
    return rows


def served(conn: Connection, queue_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """The claim reserved ``rows``: the next turns given start after theirs."""
    fairness.advance_floors(conn, queue_id, started_turns(rows))
