"""Many compare-and-set UPDATEs of one table as ONE statement, for MySQL/MariaDB.

PyMySQL's ``executemany`` sends an UPDATE once per row, one network round trip each; a
worker's batch of 256 finishes would wait for 512 of them. Here a group of rows that change
the same columns becomes

    UPDATE (SELECT %s AS v0, %s AS v1, ... UNION ALL SELECT %s, %s, ...) v
    STRAIGHT_JOIN t ON t.id = v.v0
    SET t.c1 = v.v1, ... WHERE t.state = v.v3 AND t.epoch = v.v4

one derived row per updated row, holding its id, its new values and the values its own
compare-and-set condition expects. The matched-row count (MySQL reports matched rows:
SQLAlchemy's MySQL dialects set CLIENT.FOUND_ROWS) tells the caller whether every row still
had the state it was read with. The join reads each target row by primary key, so the
statement's work is linear in its rows; the ``CASE id WHEN ... END`` form it replaced made
the server compare every row with every WHEN, once per column (docs/benchmarks.md, "Batched
updates on MariaDB"). STRAIGHT_JOIN keeps the derived rows as the driving side whatever the
table's statistics say. SQLite keeps its ``executemany`` (local calls, no round trips).
Values travel as bound parameters, escaped by the driver.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

__all__ = ["CHUNK", "cas_update_many", "worth_batching"]

# Rows per statement: a few thousand parameters, far below max_allowed_packet.
CHUNK = 256
_BY_ID = operator.itemgetter("_id")


def worth_batching(conn: Connection, rows: int) -> bool:
    """True on MySQL/MariaDB for more than one row."""
    return rows > 1 and conn.dialect.name in ("mysql", "mariadb")


def cas_update_many(conn: Connection, table: str, changed: Sequence[str],
                    conditions: Mapping[str, str], rows: Sequence[Mapping[str, Any]]) -> int:
    """UPDATE ``table`` for every row: set ``changed`` columns to the row's values where
    ``id`` = row["_id"] and each ``column`` = row[param] for ``column, param`` in
    ``conditions``. Returns the total number of rows that matched."""
    total = 0
    for start in range(0, len(rows), CHUNK):
        total += _one_statement(conn, table, changed, conditions, rows[start:start + CHUNK])
    return total


def _one_statement(conn: Connection, table: str, changed: Sequence[str],
                   conditions: Mapping[str, str], rows: Sequence[Mapping[str, Any]]) -> int:
    keys = ("_id", *changed, *conditions.values())
    sql = _statement(table, tuple(changed), tuple(conditions), len(rows))
    # Rows in primary-key order: the order the rows' locks are taken in, as a range would.
    ordered = sorted(rows, key=_BY_ID)
    params = tuple(row[key] for row in ordered for key in keys)
    return int(conn.exec_driver_sql(sql, params).rowcount)


@functools.lru_cache(maxsize=256)
def _statement(table: str, changed: tuple[str, ...], checked: tuple[str, ...],
               count: int) -> str:
    """The SQL for ``count`` rows (a chunk's size, or a group's remainder, repeats)."""
    width = 1 + len(changed) + len(checked)
    first = "SELECT " + ", ".join(f"%s AS `v{i}`" for i in range(width))
    more = " UNION ALL SELECT " + ", ".join("%s" for _ in range(width))
    sets = ", ".join(f"t.`{column}` = v.`v{1 + i}`" for i, column in enumerate(changed))
    where = " AND ".join(f"t.`{column}` = v.`v{1 + len(changed) + i}`"
                         for i, column in enumerate(checked))
    return (f"UPDATE ({first}{more * (count - 1)}) v STRAIGHT_JOIN `{table}` t "
            f"ON t.`id` = v.`v0` SET {sets}" + (f" WHERE {where}" if where else ""))
