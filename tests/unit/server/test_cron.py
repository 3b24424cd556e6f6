"""orbit_server/cron.py without a server: the seconds field only when asked for (and then
first, as in Quartz), and the next fire times in a named zone across DST changes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from orbit_server.cron import Cron
from orbit_wire.errors import ErrorCode, OrbitError


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def _utc(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_daily_ticks_keep_local_time_across_the_spring_change() -> None:
    # Paris moves from +01:00 to +02:00 on 2026-03-29: 09:00 local is 08:00Z, then 07:00Z.
    cron = Cron("0 9 * * *", "Europe/Paris")
    ticks = cron.next_ticks(_ms("2026-03-27T12:00:00+00:00"), 5)
    assert [cron.local(t) for t in ticks] == [
        "2026-03-28T09:00:00+01:00", "2026-03-29T09:00:00+02:00", "2026-03-30T09:00:00+02:00",
        "2026-03-31T09:00:00+02:00", "2026-04-01T09:00:00+02:00"]
    assert [_utc(t) for t in ticks] == [
        "2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z",
        "2026-03-31T07:00:00Z", "2026-04-01T07:00:00Z"]


def test_hourly_ticks_through_the_autumn_repeat_are_one_hour_apart() -> None:
    # On 2026-10-25 Paris goes from 03:00+02:00 back to 02:00+01:00: the hour 02:00 comes
    # twice, and an hourly schedule fires at each (every real hour, none twice, none lost).
    cron = Cron("0 * * * *", "Europe/Paris")
    ticks = cron.next_ticks(_ms("2026-10-24T22:30:00+00:00"), 5)
    assert [cron.local(t) for t in ticks] == [
        "2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00", "2026-10-25T04:00:00+01:00"]
    assert [b - a for a, b in itertools.pairwise(ticks)] == [3_600_000] * 4


def test_a_tick_in_the_spring_gap_fires_once_that_day() -> None:
    # 02:30 does not exist in Paris on 2026-03-29: that day fires once, after the gap.
    cron = Cron("30 2 * * *", "Europe/Paris")
    ticks = cron.next_ticks(_ms("2026-03-27T12:00:00+00:00"), 4)
    assert [cron.local(t) for t in ticks] == [
        "2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00"]


def test_a_seconds_field_is_refused_unless_asked_for_and_names_both_readings() -> None:
    with pytest.raises(OrbitError) as info:
        Cron("*/10 * * * * *", "UTC")
    assert info.value.code is ErrorCode.BAD_REQUEST
    message = info.value.message
    assert "with_seconds" in message and "--with-seconds" in message
    assert "first" in message and "every 10 seconds" in message and "every 10 minutes" in message


def test_with_seconds_needs_six_fields() -> None:
    with pytest.raises(OrbitError) as info:
        Cron("*/10 * * * *", "UTC", with_seconds=True)
    assert info.value.code is ErrorCode.BAD_REQUEST and "6 fields" in info.value.message


def test_seconds_come_first_when_asked_for() -> None:
    every_ten = Cron("*/10 * * * * *", "UTC", with_seconds=True)
    start = _ms("2026-03-27T12:00:03+00:00")
    assert [_utc(t) for t in every_ten.next_ticks(start, 3)] == [
        "2026-03-27T12:00:10Z", "2026-03-27T12:00:20Z", "2026-03-27T12:00:30Z"]
    assert every_ten.latest_at_or_before(start) == _ms("2026-03-27T12:00:00+00:00")
    # Seconds 15 of every tenth minute: the first field is the seconds, the second minutes.
    quartz = Cron("15 */10 * * * *", "UTC", with_seconds=True)
    assert [_utc(t) for t in quartz.next_ticks(start, 2)] == [
        "2026-03-27T12:00:15Z", "2026-03-27T12:10:15Z"]


def test_a_stored_expression_reads_six_fields_as_seconds_first() -> None:
    stored = Cron.stored("*/10 * * * * *", "UTC")
    assert stored.with_seconds
    assert stored.next_after(_ms("2026-03-27T12:00:03+00:00")) == _ms("2026-03-27T12:00:10Z")
    assert not Cron.stored("*/10 * * * *", "UTC").with_seconds


@pytest.mark.parametrize(("expr", "zone"), [
    ("not cron", "UTC"), ("* * * * *", "Mars/Olympus"), ("0 0 31 2 *", "UTC"),
    ("* * * * * * *", "UTC"),
])
def test_bad_expressions_and_zones_are_refused(expr: str, zone: str) -> None:
    with pytest.raises(OrbitError) as info:
        Cron(expr, zone)
    assert info.value.code is ErrorCode.BAD_REQUEST
