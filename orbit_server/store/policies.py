"""Registered capabilities and their declared policies (``capability_policies``, migration
0013): what a hello reads and writes, what a submit reads when its cache misses, and the
queue's list for ``GET /v1/queues/{queue_id}/capabilities``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, RowMapping, and_, bindparam, select

from orbit_wire.model import Capability

from .tables import capability_policies as table

__all__ = ["declare_policies", "insert_policies", "policies_of_queue", "policy_row"]

_COLUMNS = table.c
INSERT_POLICY = table.insert()
OF_QUEUE = (select(table).where(_COLUMNS.queue_id == bindparam("queue_id"))
            .order_by(_COLUMNS.handler, _COLUMNS.handler_version, _COLUMNS.payload_version))
_ONE = and_(_COLUMNS.queue_id == bindparam("_queue"), _COLUMNS.handler == bindparam("_handler"),
            _COLUMNS.handler_version == bindparam("_version"),
            _COLUMNS.payload_version == bindparam("_payload_version"))
ONE = select(table).where(_ONE)
# The first declaration of a registered capability: only while none is registered (a row
# another hello declared first is left alone, and that hello's transaction runs again).
DECLARE = table.update().where(_ONE, _COLUMNS.policy == "{}").values(
    policy=bindparam("_policy"), declared_at_ms=bindparam("_at"),
    instance_id=bindparam("_instance"))


def _key(queue_id: str, cap: Capability) -> dict[str, str]:
    return {"_queue": queue_id, "_handler": cap.handler, "_version": cap.handler_version,
            "_payload_version": cap.payload_version}


def policies_of_queue(conn: Connection, queue_id: str) -> list[RowMapping]:
    """The queue's registered capabilities, by handler and versions."""
    return list(conn.execute(OF_QUEUE, {"queue_id": queue_id}).mappings())


def policy_row(conn: Connection, queue_id: str, cap: Capability) -> RowMapping | None:
    return conn.execute(ONE, _key(queue_id, cap)).mappings().first()


def insert_policies(conn: Connection, rows: list[Mapping[str, Any]]) -> None:
    """Register capabilities (one executemany)."""
    if rows:
        conn.execute(INSERT_POLICY, [dict(r) for r in rows])


def declare_policies(conn: Connection, queue_id: str,
                     declared: list[tuple[Capability, str]], instance_id: str,
                     now: int) -> bool:
    """Set the first declared policy (JSON text) of registered capabilities; False when one
    was declared by another hello meanwhile."""
    changed = 0
    for cap, policy in declared:
        changed += conn.execute(DECLARE, {**_key(queue_id, cap), "_policy": policy,
                                          "_at": now, "_instance": instance_id}).rowcount
    return changed == len(declared)
