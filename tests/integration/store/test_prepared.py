"""store.prepared.Prepared on both stores: rows go in with one call and the rowcount comes
back; a driver error is raised as SQLAlchemy's (so store.retry classifies it as for any
other statement), and the transaction it happened in is rolled back as a whole."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from store_support import World

from orbit_server.store.rows import INSERT_RECEIPT
from orbit_server.store.tables import receipts


def _receipt(msg_id: str) -> dict[str, object]:
    return {"instance_id": "0" * 32, "msg_id": msg_id, "op": "drain", "answer": "{}",
            "created_at_ms": 1}


def _count(world: World) -> int:
    with world.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(receipts)).scalar_one())


def test_rows_and_rowcount(world: World) -> None:
    with world.engine.begin() as conn:
        assert INSERT_RECEIPT.run(conn, [_receipt("a")]) == 1
        assert INSERT_RECEIPT.run(conn, [_receipt("b"), _receipt("c")]) == 2
        assert INSERT_RECEIPT.run(conn, []) == 0
    assert _count(world) == 3


def test_a_driver_error_is_sqlalchemys_and_rolls_back(world: World) -> None:
    with pytest.raises(IntegrityError), world.engine.begin() as conn:
        INSERT_RECEIPT.run(conn, [_receipt("x")])
        INSERT_RECEIPT.run(conn, [_receipt("y"), _receipt("x")])  # duplicate key
    assert _count(world) == 0
