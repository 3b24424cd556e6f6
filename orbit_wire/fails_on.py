"""Exceptions a task type declares as explicit failures (``TaskType.fails_on``). Pure.

    lookup = TaskType("user.lookup", "v1", "v1",
                      fails_on=(LookupError, Retryable(TimeoutError)))

A handler of that type that raises a ``LookupError`` (or a subclass) is reported ``FAILED``
and not retried; a ``TimeoutError`` is ``FAILED`` and retryable, as if the handler had raised
``WorkerFailure(..., retryable=True)``. Any other exception stays an uncertain outcome
(``UNKNOWN / HANDLER_ERROR``). The first entry the exception is an instance of decides, so
list a subclass before its base when their flags differ.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import ErrorCode, OrbitError

__all__ = ["MAX_FAILS_ON", "FailsOn", "Retryable", "check_fails_on", "declared_failure"]

MAX_FAILS_ON = 32  # entries of one fails_on


@dataclass(frozen=True, slots=True)
class Retryable:
    """A ``fails_on`` entry whose failure the server may retry (within the task's attempts,
    deadline and history, like ``WorkerFailure(..., retryable=True)``)."""

    exception: type[Exception]

    def __post_init__(self) -> None:
        _check_type(self.exception)


FailsOn = tuple[type[Exception] | Retryable, ...]


def check_fails_on(entries: object) -> FailsOn:
    """``entries`` as a tuple, each an ``Exception`` subclass or a ``Retryable`` of one;
    raises OrbitError BAD_REQUEST otherwise. A bare class is taken as a one-entry tuple."""
    if isinstance(entries, (type, Retryable)):
        entries = (entries,)
    if not isinstance(entries, (tuple, list)):
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         "fails_on must be a tuple of exception types (or Retryable(type))")
    if len(entries) > MAX_FAILS_ON:
        raise OrbitError(ErrorCode.BAD_REQUEST, f"fails_on holds at most {MAX_FAILS_ON} types")
    for entry in entries:
        if not isinstance(entry, Retryable):
            _check_type(entry)
    return tuple(entries)


def declared_failure(fails_on: Iterable[type[Exception] | Retryable],
                     exc: BaseException) -> bool | None:
    """Whether ``exc`` is a declared failure: its retryable flag (the first entry it is an
    instance of), or None when it is not declared."""
    for entry in fails_on:
        if isinstance(entry, Retryable):
            if isinstance(exc, entry.exception):
                return True
        elif isinstance(exc, entry):
            return False
    return None


def _check_type(kind: object) -> None:
    # An Exception subclass only: SystemExit, KeyboardInterrupt and asyncio's CancelledError
    # are how a process or a task is told to stop, never a failure of the work.
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"fails_on entries must be Exception subclasses, not {kind!r}")
