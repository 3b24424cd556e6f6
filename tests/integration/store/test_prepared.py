"""store.prepared on both stores. Prepared: rows go in with one call and the rowcount comes
back; a driver error is raised as SQLAlchemy's (so store.retry classifies it as for any
other statement), and the transaction it happened in is rolled back as a whole.
PreparedSelect: the same rows as the Core statement, whatever the IN-list lengths and the
literals the statement carries."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from store_support import World

from orbit_server.store import queries
from orbit_server.store.prepared import PreparedSelect, SparseInsert, prepared_select
from orbit_server.store.rows import INSERT_RECEIPT
from orbit_server.store.tables import receipts, tasks


def test_rows_and_rowcount(world: World) -> None:
    with world.engine.begin() as conn:
        assert INSERT_RECEIPT.run(conn, [world.receipt_row("a")]) == 1
        assert INSERT_RECEIPT.run(conn, [world.receipt_row("b"), world.receipt_row("c")]) == 2
        assert INSERT_RECEIPT.run(conn, []) == 0
    assert world.count(receipts) == 3


def test_a_driver_error_is_sqlalchemys_and_rolls_back(world: World) -> None:
    with pytest.raises(IntegrityError), world.engine.begin() as conn:
        INSERT_RECEIPT.run(conn, [world.receipt_row("x")])
        INSERT_RECEIPT.run(conn, [world.receipt_row("y"), world.receipt_row("x")])  # duplicate key
    assert world.count(receipts) == 0


def test_select_gives_the_core_statements_rows(world: World) -> None:
    with world.engine.begin() as conn:
        INSERT_RECEIPT.run(conn, [world.receipt_row(f"m{i}") for i in range(5)])
    query = prepared_select(queries.RECEIPTS_BY_MSG)
    assert query is prepared_select(queries.RECEIPTS_BY_MSG)  # rendered once, shared
    assert query.keys == ("msg_id", "op", "answer")
    with world.engine.connect() as conn:
        for wanted in (["m0"], ["m4", "m1", "nope"], [f"m{i}" for i in range(5)], ("m2",),
                       ("m3", "m0")):
            params = {"instance_id": "0" * 32, "msg_ids": wanted}
            core = sorted(tuple(r) for r in conn.execute(queries.RECEIPTS_BY_MSG,
                                                         {**params, "msg_ids": list(wanted)}))
            assert sorted(tuple(r) for r in query.all(conn, params)) == core
            assert {r[0] for r in core} == set(wanted) - {"nope"}


def test_select_keeps_the_statements_literals(world: World) -> None:
    """DISPATCH_ONE binds PENDING and OFFSET 0 itself: only PENDING tasks come back."""
    first, second = world.submit()["id"], world.submit()["id"]
    world.service.tasks.cancel_task(world.producer, second, None)
    params = {"queue_id": world.queue_id, "handler": "text.normalize", "handler_version": "v1",
              "payload_version": "v1", "now": world.clock() + 1, "n": 10}
    with world.engine.connect() as conn:
        rows = prepared_select(queries.DISPATCH_ONE).all(conn, params)
    ids = [dict(zip(prepared_select(queries.DISPATCH_ONE).keys, r, strict=True))["id"]
           for r in rows]
    assert ids == [first]


def test_select_driver_errors_are_sqlalchemys(world: World) -> None:
    broken = PreparedSelect(select(text("nope FROM receipts")))
    with pytest.raises((OperationalError, ProgrammingError)), world.engine.connect() as conn:
        broken.all(conn, {})


def test_sparse_insert_keeps_every_value_given(world: World) -> None:
    """SparseInsert leaves out only the optional columns every row of a call has NULL: a
    value one row gives is written, the others read NULL; a column with a default or NOT
    NULL cannot be optional."""
    table = receipts
    columns = list(world.receipt_row("s0"))  # every column but the generated key
    sparse = SparseInsert(table, columns, [])
    with world.engine.begin() as conn:
        assert sparse.run(conn, [world.receipt_row("s1")]) == 1
    with pytest.raises(ValueError, match="not NULL"):
        SparseInsert(table, columns, ["answer"])
    ids = world.submit_many(2)
    world.submit(operation_key="k-1", schedule_to_start_ms=60_000)
    with world.engine.connect() as conn:
        got = {r.operation_key: (r.schedule_to_start_ms, r.start_by_at_ms is not None,
                                 r.spec_digest is not None, r.result)
               for r in conn.execute(select(tasks.c.operation_key, tasks.c.schedule_to_start_ms,
                                            tasks.c.start_by_at_ms, tasks.c.spec_digest,
                                            tasks.c.result))}
    assert got == {None: (None, False, False, None), "k-1": (60_000, True, True, None)}
    assert len(ids) == 2
