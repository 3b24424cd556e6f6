"""Core statements compiled once per dialect and run through the driver with plain tuples.

The hot paths write hundreds of rows per transaction. Compiling a Core statement once and
handing the DBAPI ``executemany`` a list of tuples skips SQLAlchemy's per-row parameter
processing, which otherwise costs more than SQLite's own work. The SQL is still rendered by
the dialect, so it stays portable (qmark on SQLite, format on PyMySQL); on SQLite it goes
to the driver's cursor directly.

``PreparedSelect`` does the same for the worker request's look-ups on SQLite (a few rows
each, where SQLAlchemy's execution context and IN-list expansion cost more than the query):
the SQL is rendered once per IN-list length. Other dialects run the Core statement. It takes
an ``UPDATE ... RETURNING`` too (SQLite-only statements: MariaDB has no UPDATE RETURNING).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, Table
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement, Delete, Select, Update

T = TypeVar("T")


class Prepared:
    """``stmt`` compiled with ``column_keys`` (the columns an INSERT/UPDATE sets)."""

    __slots__ = ("_cache", "column_keys", "stmt")

    def __init__(self, stmt: ClauseElement, column_keys: Sequence[str] | None = None) -> None:
        self.stmt = stmt
        self.column_keys = None if column_keys is None else list(column_keys)
        # dialect name -> (SQL, how a row's positional values are taken, None if by name;
        # whether the placeholders are in column_keys order)
        self._cache: dict[str, tuple[str, Callable[[Any], tuple[Any, ...]] | None, bool]] = {}

    def _compiled(self, conn: Connection
                  ) -> tuple[str, Callable[[Any], tuple[Any, ...]] | None, bool]:
        dialect = conn.dialect
        hit = self._cache.get(dialect.name)
        if hit is None:
            compiled: Any = self.stmt.compile(dialect=dialect, column_keys=self.column_keys)
            order = tuple(compiled.positiontup or ())
            take = _values_in(order) if compiled.positional else None
            hit = (str(compiled), take, take is not None and list(order) == self.column_keys)
            self._cache[dialect.name] = hit
        return hit

    def run(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        """Execute once per row (one ``executemany``); returns the total rowcount."""
        if not rows:
            return 0
        sql, take, _keyed = self._compiled(conn)
        params: Any = [dict(r) for r in rows] if take is None else [take(r) for r in rows]
        return _execute_rows(conn, sql, params)

    def run_values(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> int:
        """``run`` of rows given as tuples of their ``column_keys`` values, in that order
        (with positional placeholders in that order, as on SQLite, no mapping per row)."""
        if not rows:
            return 0
        sql, take, keyed = self._compiled(conn)
        if take is None:  # named placeholders (PyMySQL's pyformat)
            assert self.column_keys is not None
            keys = self.column_keys
            return _execute_rows(conn, sql, [dict(zip(keys, r, strict=True)) for r in rows])
        if not keyed:
            raise TypeError(f"{self.stmt} does not bind its columns in column_keys order")
        return _execute_rows(conn, sql, rows)


def _execute_rows(conn: Connection, sql: str, params: Any) -> int:
    if conn.dialect.name == "sqlite":
        return _on_sqlite_cursor(conn, sql, params, _write_rows)
    result = conn.exec_driver_sql(sql, params if len(params) > 1 else params[0])
    return int(result.rowcount)


def _values_in(order: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A row's values in ``order``, as a tuple (itemgetter: hundreds of rows per call)."""
    if len(order) == 1:
        name = order[0]
        return lambda row: (row[name],)
    return operator.itemgetter(*order)


class SparseInsert:
    """An INSERT of ``table`` whose ``optional`` columns (nullable, no default) are mostly
    NULL in new rows: those that every row of a call leaves NULL are left out of its
    statement, so the driver binds and escapes fewer values (a new attempt has twenty such
    columns). One Prepared per set of columns present, made on first use."""

    __slots__ = ("_by_present", "_required", "optional", "table")

    def __init__(self, table: Table, columns: Sequence[str], optional: Sequence[str]) -> None:
        for name in optional:
            column = table.c[name]
            if not column.nullable or column.default is not None or column.server_default:
                raise ValueError(f"{table.name}.{name} is not NULL when left out")
        self.table = table
        self.optional = tuple(optional)
        self._required = tuple(c for c in columns if c not in self.optional)
        self._by_present: dict[tuple[str, ...], Prepared] = {}

    def run(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        if not rows:
            return 0
        # .get: a row may leave out an optional column altogether (rows written by older code).
        if len(rows) == 1:  # the common case, a lone task or attempt: one pass over its row
            row = rows[0]
            present = tuple(c for c in self.optional if row.get(c) is not None)
        else:
            present = tuple(c for c in self.optional
                            if any(r.get(c) is not None for r in rows))
        return self.with_columns(present).run(conn, rows)

    def with_columns(self, present: tuple[str, ...]) -> Prepared:
        """The statement for rows with these optional columns (``self.optional`` order)."""
        prepared = self._by_present.get(present)
        if prepared is None:
            prepared = self._by_present[present] = Prepared(self.table.insert(),
                                                            (*self._required, *present))
        return prepared


# How one value of a rendered SELECT is taken: (_PARAM, name, 0) params[name];
# (_ITEM, name, i) params[name][i] (an IN list); (_CONST, value, 0) a literal of the statement.
_PARAM, _ITEM, _CONST = 0, 1, 2


class PreparedSelect:
    """A SELECT (or UPDATE or DELETE ... RETURNING) whose rows come back as plain tuples, in
    the order of ``keys``; or an UPDATE or DELETE run for its count alone (``write``: a
    DELETE ... RETURNING costs SQLite twice the same DELETE's work)."""

    __slots__ = ("_rendered", "keys", "stmt")

    def __init__(self, stmt: Select[Any] | Update | Delete) -> None:
        self.stmt = stmt
        self.keys: tuple[str, ...] = tuple(map(str, stmt.exported_columns.keys()))
        # (IN-list lengths) -> (SQLite SQL, how to take each positional value)
        self._rendered: dict[tuple[int, ...], tuple[str, list[tuple[int, Any, int]]]] = {}

    def all(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        if conn.dialect.name != "sqlite":
            return list(conn.execute(self.stmt, params).all())
        sql, values = self._sqlite(conn, params)
        return _on_sqlite_cursor(conn, sql, [values], _fetch_all)

    def write(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Run the statement without reading rows; the rowcount."""
        if conn.dialect.name != "sqlite":
            return int(conn.execute(self.stmt, params).rowcount)
        sql, values = self._sqlite(conn, params)
        return _on_sqlite_cursor(conn, sql, [values], _write_rows)

    def _sqlite(self, conn: Connection, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
        shape = tuple(len(v) for v in params.values() if isinstance(v, list | tuple))
        hit = self._rendered.get(shape)
        if hit is None:
            hit = self._rendered[shape] = self._render(conn, params)
        sql, order = hit
        return sql, [params[a] if kind == _PARAM else params[a][i] if kind == _ITEM else a
                     for kind, a, i in order]

    def _render(self, conn: Connection, params: Mapping[str, Any]
                ) -> tuple[str, list[tuple[int, Any, int]]]:
        compiled: Any = self.stmt.compile(dialect=conn.dialect)
        expanded = compiled.construct_expanded_state(dict(params))
        if expanded.processors:  # a bind type that converts values: not a plain tuple
            raise TypeError(f"{self.stmt} has bind processors; use Core execution")
        item_of = {name: (orig, i) for orig, names in expanded.parameter_expansion.items()
                   for i, name in enumerate(names)}
        order: list[tuple[int, Any, int]] = []
        for name in expanded.positiontup:
            if name in item_of:
                order.append((_ITEM, *item_of[name]))
            elif name in params:
                order.append((_PARAM, name, 0))
            else:
                order.append((_CONST, expanded.parameters[name], 0))
        return expanded.statement, order


@functools.cache
def prepared_select(stmt: Select[Any] | Update | Delete) -> PreparedSelect:
    """The PreparedSelect of a statement built once (queries.py), shared by its callers."""
    return PreparedSelect(stmt)


def first_row(conn: Connection, stmt: Select[Any], params: Mapping[str, Any]
              ) -> dict[str, Any] | None:
    """The first row of a statement built once (a primary-key look-up), as a dict of its
    columns, or None. Values are the driver's own: for columns without result conversions."""
    query = prepared_select(stmt)
    rows = query.all(conn, params)
    return dict(zip(query.keys, rows[0], strict=True)) if rows else None


def sqlite_fetch_all(conn: Connection, sql: str,
                     params: Mapping[str, Any] | Sequence[Any]) -> list[Any]:
    """The rows of one SQLite statement (named or positional parameters) as the driver's
    tuples."""
    return _on_sqlite_cursor(conn, sql, [params], _fetch_all)


def padded(values: Sequence[T]) -> list[T]:
    """``values`` with the last repeated up to a power of two: a statement with an IN list
    of them is then rendered (and cached by SQLAlchemy or the driver) for a few lengths
    only."""
    out = list(values)
    size = 1
    while size < len(out):
        size *= 2
    return out + out[-1:] * (size - len(out))


def sqlite_write_rows(conn: Connection, sql: str, params: list[Any]) -> int:
    """One SQLite statement run once per parameter set (named or positional); the rowcount."""
    return _on_sqlite_cursor(conn, sql, params, _write_rows)


def _write_rows(cursor: Any, sql: str, params: list[Any]) -> int:
    if len(params) > 1:
        cursor.executemany(sql, params)
    else:
        cursor.execute(sql, params[0])
    return int(cursor.rowcount)


def _fetch_all(cursor: Any, sql: str, params: list[Any]) -> list[Any]:
    cursor.execute(sql, params[0])
    return list(cursor.fetchall())


def sqlite_driver_execute(conn: Connection, sql: str) -> None:
    """Run one parameterless statement (a BEGIN) on ``conn``'s SQLite driver connection."""
    _on_sqlite_cursor(conn, sql, [], _execute_only)


def _execute_only(cursor: Any, sql: str, _params: list[Any]) -> None:
    cursor.execute(sql)


def _on_sqlite_cursor(conn: Connection, sql: str, params: list[Any],
                      run: Callable[[Any, str, list[Any]], T]) -> T:
    """SQLite: straight to the driver's cursor, inside the connection's transaction, because
    these plain statements do not need SQLAlchemy's per-statement execution context, which
    costs a worker request a share of its store time (docs/benchmarks.md, "Store settings").
    Driver errors are raised as SQLAlchemy's, so the retry and fault translation
    (store.retry) treat them as for any other statement."""
    dbapi_conn: Any = conn.connection.dbapi_connection
    cursor = dbapi_conn.cursor()
    try:
        return run(cursor, sql, params)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(sql, params, exc, conn.dialect.loaded_dbapi.Error,
                                  dialect=conn.dialect) from exc
    finally:
        cursor.close()
