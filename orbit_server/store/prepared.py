"""Core statements compiled once per dialect and run through the driver with plain tuples.

The hot paths write hundreds of rows per transaction. Compiling a Core statement once and
handing the DBAPI ``executemany`` a list of tuples skips SQLAlchemy's per-row parameter
processing, which otherwise costs more than SQLite's own work. The SQL is still rendered by
the dialect, so it stays portable (qmark on SQLite, format on PyMySQL); on SQLite it goes
to the driver's cursor directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement


class Prepared:
    """``stmt`` compiled with ``column_keys`` (the columns an INSERT/UPDATE sets)."""

    __slots__ = ("_cache", "column_keys", "stmt")

    def __init__(self, stmt: ClauseElement, column_keys: Sequence[str] | None = None) -> None:
        self.stmt = stmt
        self.column_keys = None if column_keys is None else list(column_keys)
        self._cache: dict[str, tuple[str, tuple[str, ...] | None]] = {}

    def _compiled(self, conn: Connection) -> tuple[str, tuple[str, ...] | None]:
        dialect = conn.dialect
        hit = self._cache.get(dialect.name)
        if hit is None:
            compiled: Any = self.stmt.compile(dialect=dialect, column_keys=self.column_keys)
            order = tuple(compiled.positiontup or ()) if compiled.positional else None
            hit = (str(compiled), order)
            self._cache[dialect.name] = hit
        return hit

    def run(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        """Execute once per row (one ``executemany``); returns the total rowcount."""
        if not rows:
            return 0
        sql, order = self._compiled(conn)
        params: Any
        if order is None:
            params = [dict(r) for r in rows]
        else:
            params = [tuple([r[name] for name in order]) for r in rows]
        if conn.dialect.name == "sqlite":
            return _run_on_sqlite_cursor(conn, sql, params)
        result = conn.exec_driver_sql(sql, params if len(params) > 1 else params[0])
        return int(result.rowcount)


def _run_on_sqlite_cursor(conn: Connection, sql: str, params: list[Any]) -> int:
    """SQLite: straight to the driver's cursor, inside the connection's transaction. About a
    tenth of a worker request's store time is SQLAlchemy's per-statement execution context,
    which these plain writes do not need. Driver errors are raised as SQLAlchemy's, so the
    retry and fault translation (store.retry) treat them as for any other statement."""
    dbapi_conn: Any = conn.connection.dbapi_connection
    cursor = dbapi_conn.cursor()
    try:
        if len(params) > 1:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params[0])
        return int(cursor.rowcount)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(sql, params, exc, conn.dialect.loaded_dbapi.Error,
                                  dialect=conn.dialect) from exc
    finally:
        cursor.close()
