"""Periodic schedules: create, list, read, pause, resume, delete (producers of the queue and
admins), and ``fire_due``, the firing loop's one transaction (orbit_server/app.py drives it).

A firing is exactly once per (schedule, tick) across replicas, restarts and clock steps:
the due rows are read with ``FOR UPDATE SKIP LOCKED`` (another replica's pass skips them),
the schedule's ``next_fire_at_ms`` is written back compare-and-set, the firing row's primary
key is (schedule, tick), and the task's operation key is derived from the same pair
(domain.schedules.firing_key). Which tick fires, and what happens to ticks missed while no
server ran, is domain.schedules.plan_firing's decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id, new_id
from orbit_wire.model import Role

from .. import domain
from ..auth import Principal, queue_not_found, require_role, require_visible_queue
from ..cron import Cron
from ..domain import workflows as wf
from ..domain.schedules import (
    WORKFLOW_KEY,
    MissedTicks,
    ScheduleState,
    firing_key,
    parse_schedule,
    plan_firing,
)
from ..store import schedules as stored
from ..store.fairness import fairness_of_queue
from ..store.queues import queue_exists
from ..store.retry import transactional
from ..store.views import fragment
from .context import TxContext
from .effects import Effects
from .policies import PolicyCache
from .tasks import insert_tasks
from .workflows import parse_specs, submit_graph

_PRODUCERS = (Role.ADMIN, Role.PRODUCER)
FIRE_BATCH = 100  # due schedules per firing transaction
RECENT_FIRINGS = 20  # firings shown with a schedule
NEXT_FIRES = 5  # upcoming ticks shown with a schedule


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class ScheduleService:
    def __init__(self, tx: TxContext, policies: PolicyCache | None = None) -> None:
        self._tx = tx
        self._policies = policies if policies is not None else PolicyCache(tx)

    def create(self, principal: Principal, queue_id: str, body: object) -> dict[str, Any]:
        """A new schedule; its first tick is the first after now (none fires retroactively)."""
        require_role(principal, _PRODUCERS)
        require_visible_queue(principal, queue_id)
        spec, task_obj = parse_schedule(body)
        if spec.workflow is not None:  # its graph, as a submit would check it
            parse_specs(wf.parse_workflow(spec.workflow, "schedule.workflow"))
        cron = Cron(spec.cron, spec.timezone, spec.with_seconds)
        now = self._tx.clock()
        row = {
            "id": new_id(now), "queue_id": queue_id, "name": spec.name, "cron": spec.cron,
            "timezone": spec.timezone, "task": orjson.dumps(task_obj).decode(),
            "missed_ticks": spec.missed_ticks.value,
            "state": (ScheduleState.PAUSED if spec.paused else ScheduleState.ACTIVE).value,
            "next_fire_at_ms": cron.next_after(now), "last_tick_at_ms": None,
            "last_task_id": None, "fired": 0, "created_by": principal.actor,
            "created_at_ms": now, "updated_at_ms": now,
        }
        with self._tx.write() as conn:
            if not queue_exists(conn, queue_id):
                raise queue_not_found(queue_id)
            stored.insert_schedule(conn, row)
        return schedule_view(row, now)

    def list_schedules(self, principal: Principal, queue_id: str) -> dict[str, Any]:
        require_role(principal, _PRODUCERS)
        require_visible_queue(principal, queue_id)
        with self._tx.read() as conn:
            rows = stored.schedules_of_queue(conn, queue_id)
            now = self._tx.clock()
            return {"schedules": [schedule_view(r, now) for r in rows]}

    def get(self, principal: Principal, schedule_id: str) -> dict[str, Any]:
        """The schedule with its most recent firings (newest first)."""
        with self._tx.read() as conn:
            row = _schedule_row(conn, principal, schedule_id)
            firings = stored.recent_firings(conn, schedule_id, RECENT_FIRINGS)
            workflow = is_workflow(row)
            return {**schedule_view(row, self._tx.clock()),
                    "firings": [firing_view(f, workflow) for f in firings]}

    def pause(self, principal: Principal, schedule_id: str) -> dict[str, Any]:
        """No tick fires while PAUSED; idempotent."""
        return self._set_state(principal, schedule_id, ScheduleState.PAUSED)

    def resume(self, principal: Principal, schedule_id: str) -> dict[str, Any]:
        """ACTIVE again from the first tick after now: ticks during the pause never fire."""
        return self._set_state(principal, schedule_id, ScheduleState.ACTIVE)

    def _set_state(self, principal: Principal, schedule_id: str,
                   state: ScheduleState) -> dict[str, Any]:
        now = self._tx.clock()
        with self._tx.write() as conn:
            row = _schedule_row(conn, principal, schedule_id, lock=True)
            if row["state"] != state.value:
                values: dict[str, Any] = {"state": state.value, "updated_at_ms": now}
                if state is ScheduleState.ACTIVE:
                    cron = Cron.stored(row["cron"], row["timezone"])
                    values["next_fire_at_ms"] = cron.next_after(
                        max(now, row["last_tick_at_ms"] or 0))
                stored.set_schedule(conn, schedule_id, values)
                row = {**row, **values}
            return schedule_view(row, now)

    def delete(self, principal: Principal, schedule_id: str) -> dict[str, Any]:
        """Remove the schedule and its firing rows; the tasks it submitted (and their audit
        rows, which name the schedule) stay."""
        with self._tx.write() as conn:
            _schedule_row(conn, principal, schedule_id, lock=True)
            stored.delete_schedule(conn, schedule_id)
        return {"schedule_id": schedule_id, "deleted": True}

    def fire_due(self) -> tuple[Effects, int | None]:
        """Fire every due ACTIVE schedule (up to FIRE_BATCH) in one transaction. Returns the
        effects (the queues that got a task) and the earliest next fire instant of any
        ACTIVE schedule after this pass (None: no active schedule)."""
        now = self._tx.clock()
        effects = Effects()
        with self._tx.read() as conn:  # most passes find nothing due: no write transaction
            earliest = stored.earliest_active_fire(conn)
        if earliest is None or earliest > now:
            return effects, earliest
        try:
            earliest = self._fire(now, effects)
        except IntegrityError:
            # Another replica recorded this tick first: run again, and find it recorded.
            raise OrbitError(ErrorCode.UNAVAILABLE, "schedule firing raced; retry",
                             retryable=True) from None
        return effects, earliest

    def _fire(self, now: int, effects: Effects) -> int | None:
        with self._tx.write() as conn:
            due = stored.due_schedules(conn, now, FIRE_BATCH)
            for row in due:
                try:
                    fired = _fire_one(conn, row, now, self._policies)
                except OrbitError as exc:
                    if exc.code is not ErrorCode.BAD_REQUEST:
                        raise
                    # A stored schedule this server cannot read (a zone its tzdata lacks, a
                    # task spec out of its bounds): leave it, fire the others.
                    continue
                if fired:
                    effects.ready_queues.add(row["queue_id"])
                    effects.counted().submitted.append((row["queue_id"], 1))
            return stored.earliest_active_fire(conn)


def _fire_one(conn: Connection, row: Mapping[Any, Any], now: int,
              policies: PolicyCache) -> bool:
    """Plan and record one schedule's firing; True when it submitted a new task."""
    cron = Cron.stored(row["cron"], row["timezone"])
    plan = plan_firing(row["next_fire_at_ms"], now, cron.latest_at_or_before(now),
                       cron.next_after(now), MissedTicks(row["missed_ticks"]))
    if plan.next_fire_at_ms == row["next_fire_at_ms"] and plan.tick_at_ms is None:
        return False
    created = False
    fired: tuple[int, str] | None = None  # (tick, task ID) when this pass fires one
    task_id = row["last_task_id"]
    tick = plan.tick_at_ms
    record = tick if tick is not None else (cron.latest_at_or_before(now) if plan.missed
                                            else None)
    if record is not None and not stored.firing_recorded(conn, row["id"], record):
        if tick is not None:
            task_id, created = _submit_for_tick(conn, row, tick, now, policies)
            fired = (tick, task_id)
        # A tick passed over (missed_ticks=skip, too late) is recorded without a task.
        stored.insert_firing(conn, {
            "schedule_id": row["id"], "tick_at_ms": record,
            "task_id": task_id if tick is not None else None, "fired_at_ms": now,
            "missed": plan.missed,
        })
    if not stored.advance_schedule(conn, row, plan.next_fire_at_ms, now, fired):
        # Another writer advanced it first: undo this transaction's firing and let it be.
        raise OrbitError(ErrorCode.UNAVAILABLE, "schedule raced; retry", retryable=True)
    return created


def _submit_for_tick(conn: Connection, row: Mapping[Any, Any], tick: int,
                     now: int, policies: PolicyCache) -> tuple[str, bool]:
    """The task (or workflow) of one tick, keyed by (schedule, tick); an existing one is
    reused. Returns its ID (a workflow's) and whether it was created."""
    stored_obj = orjson.loads(row["task"])
    if WORKFLOW_KEY in stored_obj:
        body = {**stored_obj[WORKFLOW_KEY], "operation_key": firing_key(row["id"], tick)}
        graph = wf.parse_workflow(body, "schedule.workflow")
        view, made = submit_graph(conn, policies, row["queue_id"], graph, parse_specs(graph),
                                  f"schedule:{row['id']}", now, Effects())
        return str(view["workflow_id"]), made
    # A task stored before null was refused may hold nulls: they meant the default, as
    # leaving the field out does now.
    task_obj = {k: v for k, v in stored_obj.items() if v is not None}
    task_obj["operation_key"] = firing_key(row["id"], tick)
    spec = domain.parse_task_spec(task_obj, "schedule.task")
    detail = orjson.dumps({"schedule_id": row["id"], "tick_at_ms": tick}).decode()
    [(view, created)], _ = insert_tasks(conn, row["queue_id"], [spec],
                                        f"schedule:{row['id']}", now, detail,
                                        policies=policies,
                                        fair_key=fair_key_of(conn, row["queue_id"]))
    return str(view["id"]), created


def fair_key_of(conn: Connection, queue_id: str) -> str | None:
    """The queue's fair key name, read in the firing's transaction (rare enough to skip the
    in-memory table)."""
    row = fairness_of_queue(conn, queue_id)
    return None if row is None else str(row["key_name"])


def _schedule_row(conn: Connection, principal: Principal, schedule_id: str,
                  lock: bool = False) -> Mapping[Any, Any]:
    require_role(principal, _PRODUCERS)
    row = None
    if is_id(schedule_id):
        row = stored.schedule_row(conn, schedule_id, lock)
    if row is None or not principal.may_use_queue(row["queue_id"]):
        # The same answer for "not yours": nothing is revealed of other queues.
        raise OrbitError(ErrorCode.NOT_FOUND, f"schedule {schedule_id} does not exist")
    return row


def next_fires(row: Mapping[Any, Any], now: int) -> list[dict[str, Any]] | None:
    """The schedule's next NEXT_FIRES ticks, in ms and in its zone's local time: from its
    stored next instant while ACTIVE, from now while PAUSED (if resumed now). None when
    this server cannot read the expression or the zone."""
    try:
        cron = Cron.stored(row["cron"], row["timezone"])
    except OrbitError:
        return None
    after = row["next_fire_at_ms"] - 1 if row["state"] == ScheduleState.ACTIVE.value else now
    return [{"at_ms": tick, "local": cron.local(tick)}
            for tick in cron.next_ticks(after, NEXT_FIRES)]


_WORKFLOW_PREFIX = f'{{"{WORKFLOW_KEY}":'


def is_workflow(row: Mapping[Any, Any]) -> bool:
    """Whether the schedule fires a workflow (its stored body is ``{"workflow": ...}``)."""
    return str(row["task"]).startswith(_WORKFLOW_PREFIX)


def schedule_view(row: Mapping[Any, Any], now: int) -> dict[str, Any]:
    workflow = is_workflow(row)
    text = str(row["task"])
    return {
        "id": row["id"], "queue_id": row["queue_id"], "name": row["name"],
        "cron": row["cron"], "with_seconds": len(row["cron"].split()) == 6,
        "timezone": row["timezone"], "task": None if workflow else fragment(text),
        # A workflow schedule's body (docs/http-api.md "Workflows"); its firings' task_id
        # fields then name the workflows they submitted (workflow_id).
        "workflow": fragment(text[len(_WORKFLOW_PREFIX):-1]) if workflow else None,
        "missed_ticks": row["missed_ticks"], "state": row["state"],
        "next_fire_at_ms": row["next_fire_at_ms"], "last_tick_at_ms": row["last_tick_at_ms"],
        "last_task_id": row["last_task_id"], "fired": row["fired"],
        "created_by": row["created_by"], "created_at_ms": row["created_at_ms"],
        "updated_at_ms": row["updated_at_ms"], "next_fires": next_fires(row, now),
    }


def firing_view(row: Mapping[Any, Any], workflow: bool = False) -> dict[str, Any]:
    out = {"tick_at_ms": row["tick_at_ms"], "task_id": None if workflow else row["task_id"],
           "fired_at_ms": row["fired_at_ms"], "missed": bool(row["missed"])}
    if workflow:
        out["workflow_id"] = row["task_id"]
    return out
