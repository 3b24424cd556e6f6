"""Many compare-and-set UPDATEs of one table as ONE statement, for MySQL/MariaDB.

PyMySQL's ``executemany`` sends an UPDATE once per row, one network round trip each; a
worker's batch of 256 finishes would wait for 512 of them. Here a group of rows that change
the same columns becomes

    UPDATE t SET c1 = CASE id WHEN %s THEN %s ... END, ...
    WHERE id IN (%s, ...) AND CASE id WHEN %s THEN state = %s AND epoch = %s ... END

which keeps each row's own compare-and-set condition: the matched-row count (MySQL reports
matched rows: SQLAlchemy's MySQL dialects set CLIENT.FOUND_ROWS) tells the caller whether
every row still had the state it was read with. SQLite keeps its ``executemany`` (local calls,
no round trips). Values travel as bound parameters, escaped by the driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

__all__ = ["CHUNK", "cas_update_many", "worth_batching"]

# Rows per statement: a few thousand parameters, far below max_allowed_packet.
CHUNK = 256


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
    params: list[Any] = []
    sets = []
    for column in changed:
        whens = " ".join("WHEN %s THEN %s" for _ in rows)
        sets.append(f"`{column}` = CASE `id` {whens} END")
        for row in rows:
            params.extend((row["_id"], row[column]))
    ids = ", ".join("%s" for _ in rows)
    params.extend(row["_id"] for row in rows)
    check = " AND ".join(f"`{column}` = %s" for column in conditions)
    whens = " ".join(f"WHEN %s THEN {check}" for _ in rows)
    for row in rows:
        params.append(row["_id"])
        params.extend(row[param] for param in conditions.values())
    sql = (f"UPDATE `{table}` SET {', '.join(sets)} "
           f"WHERE `id` IN ({ids}) AND CASE `id` {whens} ELSE 0 END")
    return int(conn.exec_driver_sql(sql, tuple(params)).rowcount)
