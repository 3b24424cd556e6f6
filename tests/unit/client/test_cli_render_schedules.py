"""The schedules' human views with a fixed clock: the list's next fire time in each
schedule's zone, and one schedule's next five fire times (local and UTC) and firings."""

from __future__ import annotations

import io

from rich.console import Console

from orbit_client.cli.render_schedules import schedule_view, schedules_table

NOW = 1_774_612_800_000  # 2026-03-27 12:00:00 UTC
SID = "0193" + "a" * 28
TASK_ID = "0193" + "b" * 28


def text_of(renderable: object, width: int = 160) -> str:
    sink = io.StringIO()
    Console(file=sink, width=width, color_system=None).print(renderable)
    return sink.getvalue()


def _schedule(**extra: object) -> dict[str, object]:
    fires = [(1_774_684_800_000, "2026-03-28T09:00:00+01:00"),
             (1_774_767_600_000, "2026-03-29T09:00:00+02:00")]
    return {
        "id": SID, "queue_id": "q" * 32, "name": "morning", "cron": "0 9 * * *",
        "with_seconds": False, "timezone": "Europe/Paris",
        "task": {"handler": "report.daily", "handler_version": "v1", "payload_version": "v1",
                 "payload": {}},
        "missed_ticks": "skip", "state": "ACTIVE", "next_fire_at_ms": fires[0][0],
        "last_tick_at_ms": None, "last_task_id": None, "fired": 0, "created_by": "producer:x",
        "created_at_ms": NOW - 60_000, "updated_at_ms": NOW - 60_000,
        "next_fires": [{"at_ms": at, "local": local} for at, local in fires], **extra}


def test_the_list_shows_each_schedule_with_its_next_local_fire_time() -> None:
    text = text_of(schedules_table([_schedule()], NOW))
    assert SID in text and "morning" in text and "0 9 * * * Europe/Paris" in text
    assert "2026-03-28T09:00:00+01:00 (in 20 h)" in text and "report.daily" in text
    paused = text_of(schedules_table([_schedule(state="PAUSED")], NOW))
    assert "2026-03-28T09:00:00+01:00" not in paused  # a paused schedule fires nothing
    assert text_of(schedules_table([], NOW)).strip() == "No schedules."


def test_one_schedule_shows_its_next_fire_times_and_firings() -> None:
    firings = [{"tick_at_ms": NOW - 1000, "task_id": TASK_ID, "fired_at_ms": NOW - 900,
                "missed": True}]
    text = text_of(schedule_view(_schedule(firings=firings, with_seconds=True,
                                           cron="0 0 9 * * *"), NOW))
    assert "Next fire times (Europe/Paris)" in text and "(seconds first)" in text
    assert "2026-03-29T09:00:00+02:00" in text and "2026-03-29 07:00:00 UTC" in text
    assert "Recent firings" in text and TASK_ID in text and "missed ticks passed over" in text
    paused = text_of(schedule_view(_schedule(state="PAUSED"), NOW))
    assert "Next fire times if resumed now" in paused
    unreadable = text_of(schedule_view(_schedule(next_fires=None), NOW))
    assert "cannot read" in unreadable
