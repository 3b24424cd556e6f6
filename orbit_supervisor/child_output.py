"""The supervisor's end of a template's or child's output pipe (stdout and stderr in one).

Each line becomes one log record on ``orbit.child`` (``orbit.template``) with the attempt
the child runs (``attempt_id``, ``task_id``) and its ``pid``: a plain line as
``child_output`` at INFO, a diagnostic line (orbit_host/output.py) with its own level,
event and traceback (``exc``). The pool attaches the attempt when it hands one to the
child and calls ``drain`` before it detaches it: the child flushes its output before it
answers, so every line written during an attempt is logged with that attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from orbit_host.logs import fields
from orbit_host.output import LineSplitter, parse_line

__all__ = ["OutputReader", "output_pipe"]

_READ = 65536
_MAX_READS = 16  # per wake-up, so one chatty child cannot hold the loop


def output_pipe() -> tuple[int, int]:
    """(read end, non-blocking, close-on-exec; write end, for the template to pass on)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    return r, w


class OutputReader:
    """Reads one pipe on the loop; ``close`` drains what is left and lets it go."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, logger: logging.Logger,
                 default_event: str) -> None:
        self._loop = loop
        self._fd: int | None = fd
        self._log = logger
        self._default_event = default_event
        self._lines = LineSplitter()
        self.pid: int | None = None
        self.attempt_id: str | None = None
        self.task_id: str | None = None
        loop.add_reader(fd, self._on_readable)

    def attach(self, attempt_id: str | None, task_id: str | None) -> None:
        self.attempt_id, self.task_id = attempt_id, task_id

    def drain(self) -> None:
        """Log every complete line already in the pipe (non-blocking)."""
        self._read(max_reads=None)

    def close(self) -> None:
        """Drain, log the partial line left, stop reading. Idempotent."""
        if self._fd is None:
            return
        self._read(max_reads=None)
        self._end()

    def _on_readable(self) -> None:
        self._read(max_reads=_MAX_READS)

    def _read(self, max_reads: int | None) -> None:
        reads = 0
        while self._fd is not None and (max_reads is None or reads < max_reads):
            try:
                data = os.read(self._fd, _READ)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._end()
                return
            reads += 1
            for line in self._lines.feed(data):
                self._emit(line)

    def _end(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        for line in self._lines.flush():
            self._emit(line)
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(fd)
        with contextlib.suppress(OSError):
            os.close(fd)

    def _emit(self, raw: bytes) -> None:
        line = parse_line(raw, self._default_event)
        level = logging.getLevelName(line.level)
        if not self._log.isEnabledFor(level):
            return
        message = line.message
        if line.event == self._default_event:  # a diagnostic names its attempt itself
            if self.attempt_id is not None:
                message = f"attempt {self.attempt_id}: {message}"
            elif self.pid is not None:
                message = f"{self._default_event.split('_')[0]} {self.pid}: {message}"
        self._log.log(level, "%s", message, extra=fields(
            line.event, attempt_id=self.attempt_id, task_id=self.task_id, pid=self.pid,
            exc=line.exc))
