"""Fair dispatch rows (docs/flow-control.md "Fair dispatch"): a queue's fair key name (read,
written, removed) and the turns its tasks are numbered with.

A fair task is numbered when it is ready to run: its value's last turn (per priority rank,
``fair_turns``) plus one, never below the rank's floor (the highest turn a claim started,
``fair_floors``), so a value that comes back or a new one takes its next turn at once and
not after the backlog of the others. Its turn places it in ``ix_tasks_dispatch``, where a
fair claim reads the numbered tasks as one range in (rank, turn) order (``claims``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, RowMapping, bindparam, delete, select, text

from .prepared import padded, sqlite_fetch_all, sqlite_write_rows
from .tables import fair_turns, queue_fairness

__all__ = ["advance_floors", "delete_fairness", "fair_keys_of_queues", "fairness_of_queue",
           "number", "renumber", "upsert_fairness"]

_QUEUE = queue_fairness.c.queue_id == bindparam("queue_id")
FAIRNESS_OF_QUEUE = select(queue_fairness).where(_QUEUE)
DELETE_FAIRNESS = delete(queue_fairness).where(_QUEUE)
FAIR_KEYS_OF_QUEUES = select(queue_fairness.c.queue_id, queue_fairness.c.key_name).where(
    queue_fairness.c.queue_id.in_(bindparam("ids", expanding=True)))


def fairness_of_queue(conn: Connection, queue_id: str) -> RowMapping | None:
    """The queue's fair setting (key_name, updated_at_ms, updated_by), or None."""
    return conn.execute(FAIRNESS_OF_QUEUE, {"queue_id": queue_id}).mappings().first()


def fair_keys_of_queues(conn: Connection, queue_ids: Sequence[str]) -> dict[str, str]:
    """The fair key name of each of ``queue_ids`` that is fair (the queue views' ``fair``)."""
    if not queue_ids:
        return {}
    return {str(r[0]): str(r[1]) for r in conn.execute(FAIR_KEYS_OF_QUEUES,
                                                       {"ids": list(queue_ids)}).all()}


def upsert_fairness(conn: Connection, row: Mapping[str, Any]) -> None:
    """Make the queue fair by ``key_name`` (replacing another name)."""
    existing = conn.execute(FAIRNESS_OF_QUEUE.with_for_update(),
                            {"queue_id": row["queue_id"]}).first()
    if existing is None:
        conn.execute(queue_fairness.insert(), dict(row))
        return
    conn.execute(queue_fairness.update().where(
        queue_fairness.c.queue_id == row["queue_id"]).values(
        key_name=row["key_name"], updated_at_ms=row["updated_at_ms"],
        updated_by=row["updated_by"]))


def delete_fairness(conn: Connection, queue_id: str) -> bool:
    """The queue no longer fair, its waiting tasks back in plain order (their turns
    cleared, in one statement over the queue's PENDING tasks); whether it was. The turn
    counters are kept: turned on again, its values take their turns after those given."""
    if conn.execute(DELETE_FAIRNESS, {"queue_id": queue_id}).rowcount == 0:
        return False
    conn.execute(_UNNUMBER_QUEUE, {"queue_id": queue_id})
    return True


# Turns per (queue, rank, value) and floors per (queue, rank), raised in SQL so that two
# replicas numbering the same value at once never hand out the same turn. A value's next
# turns start after its last one and after the rank's floor.
_BASE = ("COALESCE((SELECT turn FROM fair_floors WHERE queue_id = :queue_id"
         " AND dispatch_rank = :rank), 0) + :k")
_RAISE_TURNS = ("INSERT INTO fair_turns (queue_id, dispatch_rank, fair_value, last_turn)"
                f" VALUES (:queue_id, :rank, :value, {_BASE})")
_LAST_TURNS_SQL = ("SELECT dispatch_rank, fair_value, last_turn FROM fair_turns"
                   " WHERE queue_id = ? AND fair_value IN (")
_FLOORS_SQL = "SELECT dispatch_rank, turn FROM fair_floors WHERE queue_id = ?"
_SET_TURNS_SQLITE = ("INSERT INTO fair_turns (queue_id, dispatch_rank, fair_value, last_turn)"
                     " VALUES (?, ?, ?, ?) ON CONFLICT (queue_id, dispatch_rank, fair_value)"
                     " DO UPDATE SET last_turn = excluded.last_turn")
_RAISE_TURNS_MYSQL = text(
    _RAISE_TURNS
    + " ON DUPLICATE KEY UPDATE last_turn = GREATEST(last_turn + :k, VALUES(last_turn))")
_RAISE_FLOORS = ("INSERT INTO fair_floors (queue_id, dispatch_rank, turn)"
                 " VALUES (:queue_id, :rank, :turn)")
_RAISE_FLOORS_SQLITE = (_RAISE_FLOORS + " ON CONFLICT (queue_id, dispatch_rank)"
                        " DO UPDATE SET turn = max(turn, excluded.turn)")
_RAISE_FLOORS_MYSQL = (_RAISE_FLOORS
                       + " ON DUPLICATE KEY UPDATE turn = GREATEST(turn, VALUES(turn))")
_LAST_TURNS = select(fair_turns.c.dispatch_rank, fair_turns.c.fair_value,
                     fair_turns.c.last_turn).where(
    fair_turns.c.queue_id == bindparam("queue_id"),
    fair_turns.c.fair_value.in_(bindparam("values", expanding=True)))
_UNNUMBER_QUEUE = text("UPDATE tasks SET fair_turn = NULL WHERE queue_id = :queue_id"
                       " AND state = 'PENDING' AND fair_turn IS NOT NULL")
_RENUMBER = "UPDATE tasks SET fair_turn = :fair_turn WHERE id = :id"


def number(conn: Connection, queue_id: str, rows: Iterable[tuple[dict[str, Any], str]]
           ) -> None:
    """Give each of ``rows`` (fair task rows of ``queue_id`` with ``dispatch_rank``, each
    with its fair value) its turn in ``fair_turn``: per (rank, value), in the order given,
    the value's next turns after its last one and the rank's floor."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row, value in rows:
        groups.setdefault((row["dispatch_rank"], value), []).append(row)
    if not groups:
        return
    keys = sorted(groups)  # two replicas lock the same rows in the same order
    raised = [{"queue_id": queue_id, "rank": rank, "value": value,
               "k": len(groups[rank, value])} for rank, value in keys]
    if conn.dialect.name == "sqlite":  # one writer: read, count on, write back
        last = _next_turns_sqlite(conn, queue_id, keys, raised)
    else:
        conn.execute(_RAISE_TURNS_MYSQL, raised)
        last = {(r[0], r[1]): r[2] for r in conn.execute(
            _LAST_TURNS, {"queue_id": queue_id, "values": sorted({v for _r, v in keys})})}
    for key in keys:
        group = groups[key]
        first = last[key] - len(group) + 1
        for i, row in enumerate(group):
            row["fair_turn"] = first + i


def _next_turns_sqlite(conn: Connection, queue_id: str, keys: Sequence[tuple[int, str]],
                       raised: Sequence[Mapping[str, Any]]) -> dict[tuple[int, str], int]:
    """SQLite's numbering: the values' last turns and the ranks' floors in two reads, the
    new last turns in one batched write, however many values. Safe without locks: SQLite
    has one writer, and this transaction holds it."""
    values = padded(sorted({value for _rank, value in keys}))
    had = {(r[0], r[1]): r[2] for r in sqlite_fetch_all(
        conn, _LAST_TURNS_SQL + ",".join("?" * len(values)) + ")", [queue_id, *values])}
    floors = dict(sqlite_fetch_all(conn, _FLOORS_SQL, [queue_id]))
    last = {key: max(had.get(key, 0), floors.get(key[0], 0)) + params["k"]
            for key, params in zip(keys, raised, strict=True)}
    sqlite_write_rows(conn, _SET_TURNS_SQLITE, [(queue_id, rank, value, turn)
                                                for (rank, value), turn in last.items()])
    return last


def renumber(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write the turn (``fair_turn``, or None) of rows already stored."""
    if rows:
        _write(conn, _RENUMBER, _RENUMBER,
               [{"id": r["id"], "fair_turn": r["fair_turn"]} for r in rows])


def advance_floors(conn: Connection, queue_id: str, turns: Mapping[int, int]) -> None:
    """A claim started these turns (rank -> highest): raise each rank's floor to them."""
    if not turns:
        return
    _write(conn, _RAISE_FLOORS_SQLITE, _RAISE_FLOORS_MYSQL,
           [{"queue_id": queue_id, "rank": rank, "turn": turn}
            for rank, turn in sorted(turns.items())])


def _write(conn: Connection, sqlite_sql: str, mysql_sql: str,
           params: list[dict[str, Any]]) -> None:
    """One statement (named parameters) per parameter set: on SQLite through the driver."""
    if conn.dialect.name == "sqlite":
        sqlite_write_rows(conn, sqlite_sql, params)
    else:
        conn.execute(text(mysql_sql), params)
