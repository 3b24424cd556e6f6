"""Human views of schedules: the list as a table, one schedule with its next fire times (in
its own time zone, as the server computed them) and its recent firings.

Pure, as render.py: answers and ``now_ms`` in, rich renderables out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .render import _table as table_of
from .render import capability
from .timefmt import ago, stamp


def _capability_of(schedule: Mapping[str, Any]) -> str:
    task = schedule.get("task")
    return capability(task) if isinstance(task, Mapping) else "?"


def _cron(schedule: Mapping[str, Any]) -> str:
    seconds = " (seconds first)" if schedule.get("with_seconds") else ""
    return f"{schedule.get('cron')}{seconds} {schedule.get('timezone')}"


def schedules_table(schedules: Sequence[Mapping[str, Any]], now_ms: int) -> RenderableType:
    """``orbit schedules list``: full IDs (to copy into the next command)."""
    if not schedules:
        return Text("No schedules.")
    table = table_of("id", "name", "cron", "state", "handler", "next fire", "fired")
    table.columns[0].no_wrap = True
    for s in schedules:
        fires = s.get("next_fires") or []
        upcoming = (f"{fires[0].get('local')} ({ago(fires[0].get('at_ms'), now_ms)})"
                    if fires and s.get("state") == "ACTIVE" else "-")
        table.add_row(str(s.get("id")), str(s.get("name") or "-"), _cron(s),
                      str(s.get("state")), _capability_of(s), upcoming, str(s.get("fired", 0)))
    return table


def schedule_view(schedule: Mapping[str, Any], now_ms: int) -> RenderableType:
    """``orbit schedules get``: the schedule, its next five fire times, its recent firings."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    paused = schedule.get("state") == "PAUSED"
    for name, value in (
        ("schedule", str(schedule.get("id"))),
        ("name", str(schedule.get("name") or "-")),
        ("cron", _cron(schedule)),
        ("state", str(schedule.get("state"))),
        ("task", _capability_of(schedule)),
        ("missed ticks", str(schedule.get("missed_ticks"))),
        ("fired", f"{schedule.get('fired', 0)} task(s); last tick "
                  f"{stamp(schedule.get('last_tick_at_ms'))}"),
        ("created", f"{ago(schedule.get('created_at_ms'), now_ms)} by "
                    f"{schedule.get('created_by')}"),
    ):
        facts.add_row(name, value)
    parts: list[RenderableType] = [facts, Text("")]
    fires: Sequence[Mapping[str, Any]] | None = schedule.get("next_fires")
    title = ("Next fire times if resumed now" if paused else "Next fire times") + (
        f" ({schedule.get('timezone')})")
    if fires is None:
        parts.append(Text("Next fire times: this server cannot read the expression or zone."))
    else:
        upcoming = table_of("local time", "UTC", "in", title=title)
        for fire in fires:
            at_ms = fire.get("at_ms")
            upcoming.add_row(str(fire.get("local")), stamp(at_ms), ago(at_ms, now_ms))
        parts.append(upcoming)
    firings: Sequence[Mapping[str, Any]] = schedule.get("firings") or []
    if firings:
        recent = table_of("tick", "task", "fired", "note", title="Recent firings")
        recent.columns[1].no_wrap = True
        for f in firings:
            recent.add_row(stamp(f.get("tick_at_ms")), str(f.get("task_id") or "-"),
                           ago(f.get("fired_at_ms"), now_ms),
                           "missed ticks passed over" if f.get("missed") else "")
        parts += [Text(""), recent]
    return Group(*parts)
