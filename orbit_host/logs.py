"""The one log record format of ``orbit-server`` and ``orbit-supervise`` (docs/observability.md).

``--log-format json`` writes one JSON object per line: ``ts`` (Unix seconds, ms precision),
``level``, ``logger``, ``event`` (a stable snake_case name), ``message`` (for people), then
the record's fields (``task_id``, ``attempt_id``, ``instance_id``, ``queue_id`` and others,
passed with ``extra=fields(...)``) and ``exc`` (a traceback, as one string). ``text`` (the
default) writes ``<time> <LEVEL> <logger>: <message>`` for people, followed by the task and
attempt IDs the record carries that its message does not show (``(task T, attempt A)``), so
every line about an attempt names its task too. A record without an event (a library's) gets
its logger's name in snake case.

Plain stdlib logging with an orjson formatter: a record costs a dict and one ``dumps``, and
nothing at all below the level (no processor chain runs for a dropped record).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO, Any

import orjson

__all__ = ["LOG_FORMATS", "JsonFormatter", "TextFormatter", "configure_logging", "fields"]

LOG_FORMATS = ("text", "json")

# What every LogRecord carries by itself; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName", "event"}


def fields(event: str, **values: Any) -> dict[str, Any]:
    """``extra=`` for a record: its event name and fields (None values are left out)."""
    out = {k: v for k, v in values.items() if v is not None}
    out["event"] = event
    return out


def _default_event(name: str) -> str:
    return name.replace(".", "_").replace("-", "_").lower() or "root"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback is the ``exc`` string)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3), "level": record.levelname,
            "logger": record.name,
            "event": getattr(record, "event", None) or _default_event(record.name),
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and value is not None:
                out[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = record.stack_info
        return orjson.dumps(out, default=str).decode()


# The IDs a text line names when its record carries them: (field, word).
_TEXT_IDS = (("task_id", "task"), ("attempt_id", "attempt"))


class TextFormatter(logging.Formatter):
    """``2026-01-02 03:04:05,678 INFO orbit.server: message (task T)`` (a traceback below
    it); the record's task and attempt IDs follow the message unless it shows them."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._second: tuple[int, str] = (-1, "")  # the last second formatted, and its text

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        # The date and time change once a second: formatted then, not for every record.
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        kept, text = self._second
        if second != kept:
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (second, text)
        return f"{text},{int(record.msecs):03d}"  # the stdlib's default_msec_format

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        shown = [f"{word} {value}" for key, word in _TEXT_IDS
                 if isinstance(value := getattr(record, key, None), str) and value
                 and value not in record.message]
        return f"{text} ({', '.join(shown)})" if shown else text

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        exc = getattr(record, "exc", None)  # a child's traceback, carried as a field
        return f"{text}\n{exc.rstrip()}" if isinstance(exc, str) and exc else text


def configure_logging(level: str, fmt: str, stream: IO[str] | None = None) -> None:
    """Send every logger's records (uvicorn's and the libraries' included) to ``stream``
    (stderr) in ``fmt``, from ``level`` up."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
