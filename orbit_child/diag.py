"""Orbit's own diagnostics from the template and the children, on stderr (the local log).

Plain text (``orbit-child: message`` and a traceback below it) unless the supervisor reads
this process's output (``set_captured``): then one diagnostic line each
(orbit_host/output.py), so the supervisor logs a traceback as one record with its attempt.
"""

from __future__ import annotations

import sys

from orbit_host.output import diagnostic_line

_captured = False


def set_captured(on: bool) -> None:
    global _captured
    _captured = on


def report(who: str, level: str, event: str, message: str, exc: str | None = None) -> None:
    """Write one diagnostic; never raises (stderr may be closed or broken)."""
    if _captured:
        text = diagnostic_line(level, event, message, exc).decode()
    else:
        text = f"{who}: {message}\n" + (exc or "")
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
