"""The pure schedule rules with a fake clock: request validation, the firing key, and which
tick fires (on time, late under each missed-tick policy, a clock stepped back)."""

from __future__ import annotations

import pytest

from orbit_server.domain.schedules import (
    ON_TIME_GRACE_MS,
    FiringPlan,
    MissedTicks,
    firing_key,
    parse_schedule,
    plan_firing,
)
from orbit_wire.errors import OrbitError

TASK = {"handler": "h", "handler_version": "1", "payload_version": "1", "payload": {}}
MIN = 60_000
T = 1_800_000_000_000  # a tick (a whole minute)


def test_parse_defaults_and_fields() -> None:
    spec, task = parse_schedule({"cron": " */5  *  * * *", "task": TASK})
    assert spec.cron == "*/5 * * * *" and spec.timezone == "UTC"
    assert spec.missed_ticks is MissedTicks.SKIP and not spec.paused and spec.name is None
    assert task == TASK and spec.task.priority == 5
    spec, _ = parse_schedule({"cron": "0 9 * * 1", "timezone": "Europe/Paris", "name": "daily",
                              "missed_ticks": "one", "paused": True,
                              "task": {**TASK, "priority": 9}})
    assert spec.missed_ticks is MissedTicks.ONE and spec.paused and spec.task.priority == 9


@pytest.mark.parametrize("body", [
    [], {"task": TASK}, {"cron": "", "task": TASK}, {"cron": "x" * 129, "task": TASK},
    {"cron": "* * * * *"}, {"cron": "* * * * *", "task": {**TASK, "operation_key": "k"}},
    {"cron": "* * * * *", "task": {**TASK, "delay_ms": 5}},
    {"cron": "* * * * *", "task": {**TASK, "priority": 11}},
    {"cron": "* * * * *", "task": TASK, "missed_ticks": "all"},
    {"cron": "* * * * *", "task": TASK, "timezone": 5},
    {"cron": "* * * * *", "task": TASK, "paused": "yes"},
    {"cron": "* * * * *", "task": TASK, "every": 5},
])
def test_parse_refusals(body: object) -> None:
    with pytest.raises(OrbitError) as info:
        parse_schedule(body)
    assert info.value.code.value == "BAD_REQUEST"


def test_firing_key_is_stable_and_valid() -> None:
    key = firing_key("a" * 32, T)
    assert key == firing_key("a" * 32, T) != firing_key("a" * 32, T + MIN)
    assert len(key) <= 255 and " " not in key
    parse_schedule({"cron": "* * * * *", "task": TASK})  # the key passes the spec rules:
    from orbit_server.domain import parse_task_spec
    assert parse_task_spec({**TASK, "operation_key": key}).operation_key == key


def test_on_time_tick_fires_and_the_next_is_the_following() -> None:
    plan = plan_firing(T, T + 5, T, T + MIN, MissedTicks.SKIP)
    assert plan == FiringPlan(T, False, T + MIN)


def test_woken_early_or_clock_stepped_back_fires_nothing() -> None:
    # The stored instant is ahead of the clock: nothing fires, nothing moves.
    assert plan_firing(T, T - 1, T - MIN, T, MissedTicks.ONE) == FiringPlan(None, False, T)
    assert plan_firing(T, T - 3_600_000, T - 3_600_000, T - 3_600_000 + MIN,
                       MissedTicks.SKIP) == FiringPlan(None, False, T)
    assert plan_firing(T, T + 5, None, T + MIN, MissedTicks.ONE) == FiringPlan(None, False, T)


def test_late_within_the_grace_still_fires() -> None:
    late = T + ON_TIME_GRACE_MS
    assert plan_firing(T, late, T, T + 2 * MIN, MissedTicks.SKIP).tick_at_ms == T


def test_missed_ticks_skip_fires_nothing_late() -> None:
    now = T + 10 * MIN + 30_000  # ten ticks passed while no server ran
    plan = plan_firing(T, now, T + 10 * MIN, T + 11 * MIN, MissedTicks.SKIP, grace_ms=10_000)
    assert plan == FiringPlan(None, True, T + 11 * MIN)


def test_missed_ticks_one_fires_the_latest_once() -> None:
    now = T + 10 * MIN + 30_000
    plan = plan_firing(T, now, T + 10 * MIN, T + 11 * MIN, MissedTicks.ONE, grace_ms=10_000)
    assert plan == FiringPlan(T + 10 * MIN, True, T + 11 * MIN)
    # The next pass (same clock) sees nothing due: the catch-up is not repeated.
    again = plan_firing(plan.next_fire_at_ms, now, T + 10 * MIN, T + 11 * MIN, MissedTicks.ONE)
    assert again == FiringPlan(None, False, T + 11 * MIN)


def test_after_downtime_an_on_time_tick_fires_and_notes_the_missed() -> None:
    plan = plan_firing(T, T + 3 * MIN + 1, T + 3 * MIN, T + 4 * MIN, MissedTicks.SKIP)
    assert plan == FiringPlan(T + 3 * MIN, True, T + 4 * MIN)
