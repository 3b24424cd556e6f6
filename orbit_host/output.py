"""What a template or child writes on its output pipe, and how the supervisor reads it back.

When the supervisor captures its children's output (``orbit-supervise`` does), each child's
stdout and stderr are one pipe, and every line on it becomes one log record carrying the
attempt the child runs. Orbit's own diagnostics from the child (a handler's traceback, an
invalid result) are written as one *diagnostic line* instead: the byte ``\\x1e`` then a JSON
object ``{"level", "event", "message", "exc"}``, so a multi-line traceback stays one record.
Anything else a handler prints is a plain line. Pure: bytes in, lines and fields out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["DIAGNOSTIC_MARK", "MAX_LINE_BYTES", "LineSplitter", "OutputLine", "diagnostic_line",
           "parse_line"]

DIAGNOSTIC_MARK = b"\x1e"  # ASCII record separator: never the start of printed text
MAX_LINE_BYTES = 64 * 1024  # a longer line is cut into records of this size
_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"})
_EVENT = re.compile(r"[a-z][a-z0-9_]{0,63}")


@dataclass(frozen=True, slots=True)
class OutputLine:
    level: str
    event: str
    message: str
    exc: str | None = None


def diagnostic_line(level: str, event: str, message: str, exc: str | None = None) -> bytes:
    """The bytes of one diagnostic line (the child's side)."""
    body: dict[str, Any] = {"level": level, "event": event, "message": message}
    if exc:
        body["exc"] = exc
    return DIAGNOSTIC_MARK + orjson.dumps(body) + b"\n"


def parse_line(raw: bytes, default_event: str) -> OutputLine:
    """One line (without its newline): a diagnostic line's fields when it is one, else the
    text as an INFO record of ``default_event``."""
    if raw.startswith(DIAGNOSTIC_MARK):
        try:
            body = orjson.loads(raw[1:])
        except orjson.JSONDecodeError:
            body = None
        if isinstance(body, dict):
            level, event = body.get("level"), body.get("event")
            message, exc = body.get("message"), body.get("exc")
            if (level in _LEVELS and isinstance(event, str) and _EVENT.fullmatch(event)
                    and isinstance(message, str) and (exc is None or isinstance(exc, str))):
                return OutputLine(str(level), event, message, exc)
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    return OutputLine("INFO", default_event, text)


class LineSplitter:
    """Bytes in, complete lines out; a partial line waits for its end (or ``flush``)."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_line

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        lines: list[bytes] = []
        start = 0
        while True:
            end = self._buf.find(b"\n", start)
            if end < 0:
                break
            lines.append(bytes(self._buf[start:end]))
            start = end + 1
        del self._buf[:start]
        while len(self._buf) >= self._max:
            lines.append(bytes(self._buf[:self._max]))
            del self._buf[:self._max]
        return lines

    def flush(self) -> list[bytes]:
        """The partial line left, if any (the writer is gone)."""
        rest, self._buf = bytes(self._buf), bytearray()
        return [rest] if rest else []
