"""Cron arithmetic in a time zone, with croniter: the ticks the pure schedule rules
(domain/schedules.py) reason about, as wall-clock milliseconds since the epoch.

A tick is computed in the schedule's IANA zone (``0 9 * * *`` in Europe/Paris is 09:00
local, summer and winter); croniter handles the DST gaps and repeats. Five fields (minute
precision), or six with a seconds field FIRST, as in Quartz, only when the schedule asks
for seconds (``with_seconds``): a six-field expression is otherwise refused, since cron
dialects disagree on where the seconds go and a misread one fires sixty times too often.
Stored expressions of six fields are seconds-first (migration 0014 moved older ones).
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from orbit_wire.errors import ErrorCode, OrbitError

__all__ = ["Cron"]


def _bad(message: str) -> OrbitError:
    return OrbitError(ErrorCode.BAD_REQUEST, f"schedule: {message}")


class Cron:
    """One expression in one zone. Raises OrbitError BAD_REQUEST for either being invalid,
    and for a seconds field not asked for (or asked for and missing)."""

    __slots__ = ("expr", "with_seconds", "zone")

    def __init__(self, expr: str, timezone: str, with_seconds: bool = False) -> None:
        try:
            self.zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise _bad(f"unknown time zone {timezone!r}") from None
        fields = expr.split()
        if len(fields) == 6 and not with_seconds:
            raise _bad(
                f"{expr!r} has 6 fields: a seconds field is only taken when asked for "
                "(with_seconds: true; orbit schedules create --with-seconds), and then it "
                "comes first, as in Quartz: '*/10 * * * * *' fires every 10 seconds. Without "
                "seconds use 5 fields: '*/10 * * * *' fires every 10 minutes")
        if with_seconds and len(fields) != 6:
            raise _bad(f"{expr!r}: with_seconds needs 6 fields, seconds first "
                       "('*/10 * * * * *': every 10 seconds)")
        if len(fields) not in (5, 6) or not croniter.is_valid(
                expr, second_at_beginning=with_seconds):
            raise _bad(f"{expr!r} is not a cron expression (minute hour day-of-month month "
                       "day-of-week, or with_seconds and a seconds field first)")
        self.expr = expr
        self.with_seconds = with_seconds
        try:
            self.next_after(0)
        except OrbitError:  # e.g. "0 0 31 2 *"
            raise _bad(f"{expr!r} never fires") from None

    @classmethod
    def stored(cls, expr: str, timezone: str) -> Cron:
        """A schedule's stored expression: six fields are seconds-first, as created."""
        return cls(expr, timezone, with_seconds=len(expr.split()) == 6)

    def next_after(self, at_ms: int) -> int:
        """The first tick strictly after ``at_ms``."""
        return self._step(at_ms, forward=True)

    def next_ticks(self, at_ms: int, count: int) -> list[int]:
        """The first ``count`` ticks strictly after ``at_ms``, in order."""
        ticks: list[int] = []
        for _ in range(count):
            at_ms = self.next_after(at_ms)
            ticks.append(at_ms)
        return ticks

    def local(self, at_ms: int) -> str:
        """The instant in the schedule's zone, ISO 8601 with its offset at that instant
        (``2026-03-29T03:00:00+02:00``)."""
        when = datetime.fromtimestamp(at_ms / 1000, tz=UTC).astimezone(self.zone)
        return when.isoformat(timespec="milliseconds" if at_ms % 1000 else "seconds")

    def latest_at_or_before(self, at_ms: int) -> int | None:
        """The last tick at or before ``at_ms`` (None before the first)."""
        try:
            return self._step(at_ms + 1, forward=False)
        except OrbitError:
            return None

    def _step(self, at_ms: int, *, forward: bool) -> int:
        start = datetime.fromtimestamp(at_ms / 1000, tz=UTC).astimezone(self.zone)
        try:
            it = croniter(self.expr, start, second_at_beginning=self.with_seconds)
            tick = it.get_next(datetime) if forward else it.get_prev(datetime)
        except (CroniterBadCronError, CroniterBadDateError, ValueError):
            raise _bad(f"{self.expr!r} has no tick near {at_ms}") from None
        return int(tick.timestamp() * 1000)
