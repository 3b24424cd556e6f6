"""Schedule rows and their firing rows (services/schedules.py): made, listed, read (locked for
a change), paused or resumed, deleted; the firing loop's due rows (``ix_schedules_due``,
``FOR UPDATE SKIP LOCKED``), the recorded ticks, and the compare-and-set that moves a
schedule's next instant on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Integer, RowMapping, bindparam, delete, func, select, update

from ..domain.schedules import ScheduleState
from .tables import schedule_firings, schedules

__all__ = ["advance_schedule", "delete_schedule", "due_schedules", "earliest_active_fire",
           "firing_recorded", "insert_firing", "insert_schedule", "recent_firings",
           "schedule_row", "schedules_of_queue", "set_schedule"]

_ACTIVE = ScheduleState.ACTIVE.value
_THIS: Any = schedules.c.id == bindparam("_id")
INSERT_SCHEDULE = schedules.insert()
INSERT_FIRING = schedule_firings.insert()
SCHEDULES_OF_QUEUE = (select(schedules).where(schedules.c.queue_id == bindparam("queue_id"))
                      .order_by(schedules.c.created_at_ms, schedules.c.id))
RECENT_FIRINGS = (
    select(schedule_firings).where(schedule_firings.c.schedule_id == bindparam("_id"))
    .order_by(schedule_firings.c.tick_at_ms.desc()).limit(bindparam("n", type_=Integer))
)
SCHEDULE_BY_ID = select(schedules).where(_THIS)
SCHEDULE_FOR_UPDATE = SCHEDULE_BY_ID.with_for_update()
DELETE_FIRINGS = delete(schedule_firings).where(schedule_firings.c.schedule_id == bindparam("_id"))
DELETE_SCHEDULE = delete(schedules).where(_THIS)
DUE_SCHEDULES = (
    select(schedules)
    .where(schedules.c.state == _ACTIVE, schedules.c.next_fire_at_ms <= bindparam("now"))
    .order_by(schedules.c.next_fire_at_ms).limit(bindparam("n", type_=Integer))
    .with_for_update(skip_locked=True)  # another replica is firing these
)
EARLIEST_ACTIVE_FIRE = select(func.min(schedules.c.next_fire_at_ms)).where(
    schedules.c.state == _ACTIVE)
FIRING_OF_TICK = select(schedule_firings.c.tick_at_ms).where(
    schedule_firings.c.schedule_id == bindparam("_id"),
    schedule_firings.c.tick_at_ms == bindparam("tick"))


def insert_schedule(conn: Connection, row: Mapping[str, Any]) -> None:
    conn.execute(INSERT_SCHEDULE, dict(row))


def schedules_of_queue(conn: Connection, queue_id: str) -> list[RowMapping]:
    """The queue's schedules, oldest first."""
    return list(conn.execute(SCHEDULES_OF_QUEUE, {"queue_id": queue_id}).mappings())


def recent_firings(conn: Connection, schedule_id: str, n: int) -> list[RowMapping]:
    """The schedule's ``n`` latest firing rows, newest tick first."""
    return list(conn.execute(RECENT_FIRINGS, {"_id": schedule_id, "n": n}).mappings())


def schedule_row(conn: Connection, schedule_id: str, lock: bool = False) -> RowMapping | None:
    """The schedule's row (``lock``: locked until the transaction ends), or None."""
    stmt = SCHEDULE_FOR_UPDATE if lock else SCHEDULE_BY_ID
    return conn.execute(stmt, {"_id": schedule_id}).mappings().first()


def set_schedule(conn: Connection, schedule_id: str, values: Mapping[str, Any]) -> None:
    """Set ``values`` (column -> value) on the schedule's row."""
    conn.execute(update(schedules).where(schedules.c.id == schedule_id).values(**values))


def delete_schedule(conn: Connection, schedule_id: str) -> None:
    """Delete the schedule's firing rows, then the schedule."""
    conn.execute(DELETE_FIRINGS, {"_id": schedule_id})
    conn.execute(DELETE_SCHEDULE, {"_id": schedule_id})


def due_schedules(conn: Connection, now: int, n: int) -> list[RowMapping]:
    """Up to ``n`` ACTIVE schedules due at ``now``, earliest first, each locked by us (rows
    another replica is firing are skipped)."""
    return list(conn.execute(DUE_SCHEDULES, {"now": now, "n": n}).mappings())


def earliest_active_fire(conn: Connection) -> int | None:
    """The earliest next tick of any ACTIVE schedule (``ix_schedules_due``)."""
    earliest: int | None = conn.scalar(EARLIEST_ACTIVE_FIRE)
    return earliest


def firing_recorded(conn: Connection, schedule_id: str, tick_at_ms: int) -> bool:
    """Whether the schedule's tick has its firing row."""
    return conn.execute(FIRING_OF_TICK, {"_id": schedule_id,
                                         "tick": tick_at_ms}).first() is not None


def insert_firing(conn: Connection, row: Mapping[str, Any]) -> None:
    conn.execute(INSERT_FIRING, dict(row))


def advance_schedule(conn: Connection, row: Mapping[Any, Any], next_fire_at_ms: int,
                     now: int, fired: tuple[int, str] | None) -> bool:
    """Move the schedule of ``row`` to ``next_fire_at_ms`` if its stored next instant is
    still the one ``row`` read (compare-and-set); with ``fired`` (tick, task ID) also record
    that tick's firing. False when another writer moved it first."""
    extra: dict[str, Any] = {}
    if fired is not None:
        extra = {"last_tick_at_ms": fired[0], "last_task_id": fired[1],
                 "fired": schedules.c.fired + 1}
    moved = conn.execute(
        update(schedules)
        .where(schedules.c.id == row["id"],
               schedules.c.next_fire_at_ms == row["next_fire_at_ms"])  # compare-and-set
        .values(next_fire_at_ms=next_fire_at_ms, updated_at_ms=now, **extra)
    ).rowcount
    return bool(moved == 1)
