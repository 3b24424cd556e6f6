"""Dispatch claims on a shared database (MySQL/MariaDB), where several servers reserve at once.

Each capability's range is read with ``SELECT … FOR UPDATE SKIP LOCKED`` (queries.DISPATCH_ONE
carries the locking clause; SQLite ignores it, having one writer): a row another server is
claiming right now is skipped rather than waited for or handed out twice. MySQL allows no
locking clause inside a UNION, so several capabilities take one locking range each and the
oldest ``n`` are kept; the extra rows stay locked only until this transaction ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection

from orbit_wire.model import Capability

from . import queries


def lock_each(conn: Connection, queue_id: str, caps: Iterable[Capability], now: int,
              n: int) -> list[dict[str, Any]]:
    """The oldest-available ``n`` claimable task rows over ``caps``, each locked by us."""
    found: list[dict[str, Any]] = []
    for cap in caps:
        result = conn.execute(queries.DISPATCH_ONE, {
            "queue_id": queue_id, "handler": cap.handler,
            "handler_version": cap.handler_version, "payload_version": cap.payload_version,
            "now": now, "n": n,
        })
        names = tuple(result.keys())
        found.extend(dict(zip(names, r, strict=True)) for r in result.all())
    found.sort(key=lambda row: row["available_at_ms"])
    return found[:n]
