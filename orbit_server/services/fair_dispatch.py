"""Fair dispatch inside a claim (docs/flow-control.md "Fair dispatch"): for a queue whose
``FairTable`` entry names a key, the candidate rows read one range per fair value
(``store.fairness.fair_rows``, plus the labelled ranges for a worker with labels) and put
in turn order (``domain.fairness.rotate``) before limits admit them; the value served last
is kept for the next claim. A queue that is not fair never reaches this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import Connection

from ..domain.fairness import position, rotate
from ..store import claims
from ..store.fairness import fair_rows as read_fair_rows
from .binding import WorkerBinding
from .fair_table import FairTable


def fair_rows(conn: Connection, binding: WorkerBinding, now: int, want: int, fair: FairTable
              ) -> tuple[list[dict[str, Any]], bool]:
    """The claim's candidate rows in turn order, and whether more fair values exist than
    were read (the claim then does not report the queue drained)."""
    last = fair.served_last(binding.queue_id)
    after = last[1] if last is not None and last[0] == 1 else None
    rows, more = read_fair_rows(conn, binding.queue_id, binding.capabilities, now, want,
                                after)
    if binding.labels:  # tasks that require labels: their own ranges, bucketed alike
        rows.extend(claims.labelled_rows(conn, binding.queue_id, binding.capabilities,
                                         binding.labels, now, want))
    # rotate hands back the rows it was given, which are dicts: no copies.
    return cast(list[dict[str, Any]], rotate(rows, last)), more


def served(fair: FairTable, queue_id: str, row: Mapping[str, Any]) -> None:
    """The claim reserved ``row`` last: the next claim starts after its value."""
    fair.served(queue_id, position(row))
