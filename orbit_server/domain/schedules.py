"""Periodic schedules: what a schedule request may say (``parse_schedule``), the operation key
of a firing (``firing_key``), and which tick to fire when the firing loop looks at a
schedule (``plan_firing``, with the missed-tick policy). Pure: the cron arithmetic arrives
as the instants it computed (orbit_server/cron.py does it), the clock's reading as ``now``.

A schedule fires at most once per tick, whatever the number of replicas, restarts or clock
steps: each firing is keyed by (schedule, tick instant) - the task's operation key and the
primary key of its firing row - and a tick is only ever fired once it is due
(``tick <= now``) and after the schedule's stored ``next_fire_at_ms``, which only moves
forward.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Final

from msgspec import UNSET, Meta, Struct, UnsetType

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.names import whole

from .bodies import ScheduledTask
from .fields import Body, Label
from .spec import TaskSpec, parse_task_spec
from .workflows import ScheduledWorkflow

# A tick the loop reaches this late still counts as on time under MissedTicks.SKIP: the
# loop polls at least every second, and a busy store may delay it some more.
ON_TIME_GRACE_MS: Final = 60_000
MAX_CRON_LEN: Final = 128
MAX_TIMEZONE_LEN: Final = 64
# The schedule sets these itself, per firing.
_TASK_KEYS_REFUSED = ("operation_key", "delay_ms", "not_before_at_ms")


class MissedTicks(StrEnum):
    """What a schedule does with ticks that passed while no server ran (or the loop could
    not reach the database): ``skip`` them (default), or fire ``one`` catch-up task for the
    latest of them. Either way the schedule then continues with the first future tick."""

    SKIP = "skip"
    ONE = "one"


class ScheduleState(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A validated schedule request; ``task`` is checked here and stored as given (parsed
    again at every firing)."""

    cron: str
    timezone: str
    task: TaskSpec | None  # None: the schedule fires ``workflow``
    name: str | None
    missed_ticks: MissedTicks
    paused: bool
    with_seconds: bool = False
    # The workflow body a firing submits (docs/http-api.md "Workflows"), as given; its graph
    # is checked by the service (services/workflows.py) when the schedule is created.
    workflow: Mapping[str, object] | None = None


@dataclass(frozen=True, slots=True)
class FiringPlan:
    """What to do with one schedule: fire ``tick_at_ms`` (None: fire nothing), whether due
    ticks were passed over without a task (``missed``), and the stored next fire instant
    afterwards."""

    tick_at_ms: int | None
    missed: bool
    next_fire_at_ms: int


_PRINTABLE = whole(r"[\x20-\x7e]+")


class ScheduleRequest(Struct, frozen=True, forbid_unknown_fields=True):
    """A periodic schedule: the task (or the workflow) it submits at every tick of ``cron``
    in ``timezone``. The cron expression's and the zone's meaning, and a workflow's graph,
    are checked when it is created (400)."""

    cron: Annotated[str, Meta(
        min_length=1, max_length=MAX_CRON_LEN, pattern=_PRINTABLE,
        description="5 fields (minute hour day-of-month month day-of-week), or 6 with a "
        "seconds field first when with_seconds is true",
        extra={"message": f"is required: a cron expression of at most {MAX_CRON_LEN} ASCII "
               "characters, e.g. '*/5 * * * *'"})]
    task: ScheduledTask | UnsetType = UNSET
    workflow: Annotated[ScheduledWorkflow, Meta(
        description="instead of task: the workflow each tick submits")] | UnsetType = UNSET
    timezone: Annotated[str, Meta(
        min_length=1, max_length=MAX_TIMEZONE_LEN, pattern=_PRINTABLE, description="IANA zone",
        extra={"message": "must be an IANA time zone name, e.g. 'Europe/Paris'"})] = "UTC"
    name: Label | UnsetType = UNSET
    missed_ticks: MissedTicks = MissedTicks.SKIP
    paused: bool = False
    with_seconds: Annotated[bool, Meta(
        description="cron has 6 fields, seconds first (as in Quartz); a 6-field cron is "
        "refused without it")] = False


# What a schedule request may say: parse_schedule checks with it, openapi.py shows it.
SCHEDULE: Final = Body(ScheduleRequest, {
    "oneOf": [{"required": ["task"]}, {"required": ["workflow"]}]})
# How a workflow schedule's body is stored in the schedules.task column: under this one key,
# which no TaskSpec has (they refuse unknown fields).
WORKFLOW_KEY: Final = "workflow"


def parse_schedule(obj: object) -> tuple[ScheduleSpec, Mapping[object, object]]:
    """Validate a schedule request (docs/http-api.md "Schedules"); returns the spec and the
    task object as given, or ``{"workflow": body}`` (to store). The cron expression and
    the time zone are only checked for form here; orbit_server/cron.py checks that they mean
    something, and the workflow service a workflow's graph."""
    task_obj = obj.get("task") if isinstance(obj, Mapping) else None
    if isinstance(task_obj, Mapping):
        refused = [k for k in _TASK_KEYS_REFUSED if k in task_obj]
        if refused:
            raise _bad(f"task may not set {', '.join(refused)} (each firing sets its own)")
    body = SCHEDULE.load(obj, "schedule")
    if (body.task is UNSET) == (body.workflow is UNSET):
        raise _bad("task is required (or, instead, workflow): give exactly one")
    assert isinstance(obj, Mapping)  # a Struct loads from an object only
    workflow = obj.get("workflow")
    task: TaskSpec | None = None
    if isinstance(workflow, Mapping):
        nodes = workflow["nodes"]
        assert isinstance(nodes, list)
        for i, node in enumerate(nodes):
            parse_task_spec(node["task"], f"schedule.workflow.nodes[{i}].task")
        stored: Mapping[object, object] = {WORKFLOW_KEY: workflow}
    else:
        stored = obj["task"]
        task = parse_task_spec(stored, "schedule.task")
    spec = ScheduleSpec(cron=" ".join(body.cron.split()), timezone=body.timezone, task=task,
                        name=None if body.name is UNSET else body.name,
                        missed_ticks=body.missed_ticks, paused=body.paused,
                        with_seconds=body.with_seconds,
                        workflow=workflow if isinstance(workflow, Mapping) else None)
    return spec, stored


def firing_key(schedule_id: str, tick_at_ms: int) -> str:
    """The operation key of the task a tick submits: the same on every replica, so a tick
    fired twice (a lost race, a retried transaction, a replica with a stepped clock) finds
    the task it already made."""
    return f"schedule:{schedule_id}:{tick_at_ms}"


def plan_firing(next_fire_at_ms: int, now_ms: int, latest_tick_ms: int | None,
                following_tick_ms: int, missed_ticks: MissedTicks,
                grace_ms: int = ON_TIME_GRACE_MS) -> FiringPlan:
    """Which tick to fire at ``now_ms`` for a schedule whose stored next instant is
    ``next_fire_at_ms``.

    ``latest_tick_ms`` is the cron's last tick at or before ``now_ms`` (None if it has none),
    ``following_tick_ms`` its first tick after ``now_ms``. Ticks in
    [next_fire_at_ms, now_ms] are due. The latest due tick fires if it is on time (at most
    ``grace_ms`` late), or late under ``missed_ticks=one``; earlier due ticks never fire.
    When nothing is due - woken early, or a clock stepped back before the stored instant -
    nothing fires and the stored instant stays, so no tick ever fires twice.
    """
    if latest_tick_ms is None or latest_tick_ms < next_fire_at_ms or now_ms < next_fire_at_ms:
        return FiringPlan(None, False, next_fire_at_ms)
    passed_over = latest_tick_ms > next_fire_at_ms  # earlier due ticks, not fired
    if now_ms - latest_tick_ms <= grace_ms or missed_ticks is MissedTicks.ONE:
        return FiringPlan(latest_tick_ms, passed_over, following_tick_ms)
    return FiringPlan(None, True, following_tick_ms)


def _bad(message: str) -> OrbitError:
    return OrbitError(ErrorCode.BAD_REQUEST, f"schedule: {message}")
