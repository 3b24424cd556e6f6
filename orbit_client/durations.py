"""Durations and instants as people type them on the command line: ``500ms``, ``30s``,
``5m``, ``2h``, ``1d`` (a bare number is milliseconds), and instants as ISO 8601 with an
offset (``2026-12-02T09:00:00+01:00``) or milliseconds since the epoch. Pure."""

from __future__ import annotations

import re
from datetime import datetime

from orbit_wire.errors import ErrorCode, OrbitError

__all__ = ["parse_duration_ms", "parse_instant_ms"]

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_RE = re.compile(r"(\d+)(ms|s|m|h|d)?")


def parse_duration_ms(text: str, what: str = "duration") -> int:
    """``30s`` → 30000. BAD_REQUEST naming ``what`` for anything else."""
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"{what} must be a whole number with an optional unit "
                         f"(ms, s, m, h, d), e.g. 30s; got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2) or "ms"]


def parse_instant_ms(text: str, what: str = "instant") -> int:
    """ISO 8601 with a UTC offset (or ``Z``), or integer ms since the epoch → epoch ms."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"{what} must be ISO 8601 with an offset (2026-12-02T09:00:00Z) "
                         f"or ms since the epoch; got {text!r}")
    return int(when.timestamp() * 1000)
