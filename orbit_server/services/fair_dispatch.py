"""Fair dispatch inside a claim (docs/flow-control.md "Fair dispatch"): for a queue whose
``FairTable`` entry names a key, the candidate rows are its numbered fair tasks in (rank,
turn) order (``store.fairness.fair_rows``, plus the labelled ranges for a worker with
labels); the ready ones not numbered yet are numbered here first, and so are those queued
before the queue was fair (found in the plain range, looked at while there are some and
once a second otherwise). Limits then admit them in that order; the turns a claim starts
raise the floors. A queue that is not fair never reaches this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from ..domain.fairness import NO_VALUE, claim_order, started_turns
from ..store import claims, fairness
from .binding import WorkerBinding
from .fair_table import FairTable


def fair_rows(conn: Connection, binding: WorkerBinding, now: int, want: int, fair: FairTable
              ) -> tuple[list[dict[str, Any]], bool]:
    """The claim's candidate rows in fair order, each numbered, and whether a range read
    may have left rows unread (the claim then does not report the queue drained)."""
    queue_id, caps = binding.queue_id, binding.capabilities
    rows, more = fairness.fair_rows(conn, queue_id, caps, now, want)
    if binding.labels:  # tasks that require labels: their own ranges
        rows.extend(claims.keyed_rows(conn, queue_id, caps, binding.labels, now, want))
    if fair.plain_due(queue_id, now):
        before = [row for row in claims.claimable_rows(conn, queue_id, caps, now, want)
                  if row["fair_value"] is None]
        fair.plain_looked(queue_id, now, found=bool(before))
        rows.extend(before)
    by_id = {row["id"]: row for row in rows}
    fresh = [row for row in by_id.values() if row["fair_turn"] is None]
    if fresh:
        for row in fresh:
            if row["fair_value"] is None:
                row["fair_value"] = NO_VALUE
        fresh.sort(key=lambda row: (row["dispatch_rank"], row["available_at_ms"]))
        fairness.number(conn, queue_id, fresh)
        fairness.renumber(conn, fresh)
    return sorted(by_id.values(), key=claim_order), more


def served(conn: Connection, queue_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """The claim reserved ``rows``: the next turns given start after theirs."""
    fairness.advance_floors(conn, queue_id, started_turns(rows))
