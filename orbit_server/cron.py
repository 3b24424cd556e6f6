"""Cron arithmetic in a time zone, with croniter: the ticks the pure schedule rules
(domain/schedules.py) reason about, as wall-clock milliseconds since the epoch.

A tick is computed in the schedule's IANA zone (``0 9 * * *`` in Europe/Paris is 09:00
local, summer and winter); croniter handles the DST gaps and repeats. Five fields
(minute precision) or six (a trailing seconds field, croniter's convention).
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from orbit_wire.errors import ErrorCode, OrbitError

__all__ = ["Cron"]


class Cron:
    """One expression in one zone. Raises OrbitError BAD_REQUEST for either being invalid."""

    __slots__ = ("expr", "zone")

    def __init__(self, expr: str, timezone: str) -> None:
        try:
            self.zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             f"schedule: unknown time zone {timezone!r}") from None
        fields = expr.split()
        if len(fields) not in (5, 6) or not croniter.is_valid(expr):
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             f"schedule: {expr!r} is not a cron expression (5 fields, or 6 "
                             "with seconds last)")
        self.expr = expr
        try:
            self.next_after(0)
        except OrbitError:  # e.g. "0 0 31 2 *"
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             f"schedule: {expr!r} never fires") from None

    def next_after(self, at_ms: int) -> int:
        """The first tick strictly after ``at_ms``."""
        return self._step(at_ms, forward=True)

    def latest_at_or_before(self, at_ms: int) -> int | None:
        """The last tick at or before ``at_ms`` (None before the first)."""
        try:
            return self._step(at_ms + 1, forward=False)
        except OrbitError:
            return None

    def _step(self, at_ms: int, *, forward: bool) -> int:
        start = datetime.fromtimestamp(at_ms / 1000, tz=UTC).astimezone(self.zone)
        try:
            it = croniter(self.expr, start)
            tick = it.get_next(datetime) if forward else it.get_prev(datetime)
        except (CroniterBadCronError, CroniterBadDateError, ValueError):
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             f"schedule: {self.expr!r} has no tick near {at_ms}") from None
        return int(tick.timestamp() * 1000)
