"""Times for people: ``ago`` (relative instants) and ``duration`` (spans), from milliseconds.

Pure: the caller passes ``now_ms``, so tests drive it with any clock.
"""

from __future__ import annotations

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))


def duration(ms: int | float | None) -> str:
    """``850 ms``, ``3.2 s``, ``4 min 10 s``, ``2 h 5 min``, ``3 d 4 h``; ``-`` for None."""
    if ms is None:
        return "-"
    ms = max(0, int(ms))
    if ms < 1000:
        return f"{ms} ms"
    if ms < 10_000:
        return f"{ms / 1000:.1f} s"
    if ms < 60_000:
        return f"{ms // 1000} s"
    # Two units are enough to read; the second is dropped when it is zero.
    for i, (name, size) in enumerate(_UNITS[:-1]):
        if ms >= size:
            big, rest = divmod(ms, size)
            small_name, small_size = _UNITS[i + 1]
            small = rest // small_size
            return f"{big} {name} {small} {small_name}" if small else f"{big} {name}"
    return f"{ms // 1000} s"  # pragma: no cover - the loop always returns


def ago(at_ms: int | None, now_ms: int) -> str:
    """``just now``, ``3 s ago``, ``in 2 min``; ``-`` for None."""
    if at_ms is None:
        return "-"
    delta = now_ms - at_ms
    if abs(delta) < 1000:
        return "just now"
    text = duration(abs(delta)) if abs(delta) >= 10_000 else f"{abs(delta) // 1000} s"
    return f"{text} ago" if delta > 0 else f"in {text}"


def stamp(at_ms: int | None) -> str:
    """The instant in UTC, to the second: ``2026-12-02 03:10:05 UTC``."""
    if at_ms is None:
        return "-"
    days, ms = divmod(int(at_ms), 86_400_000)
    year, month, day = _civil_from_days(days)
    seconds = ms // 1000
    hh, mm, ss = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{year:04d}-{month:02d}-{day:02d} {hh:02d}:{mm:02d}:{ss:02d} UTC"


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` since 1970-01-01 in the proleptic Gregorian calendar
    (H. Hinnant's algorithm; datetime would do it too, but this module reads no clock
    library at all)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day
