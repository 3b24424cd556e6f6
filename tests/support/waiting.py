"""One time unit and one way to wait, for the whole test suite.

``UNIT`` is one second of the tests, multiplied by ``ORBIT_TEST_TIME_UNIT`` (default 1.0):
set it above 1 on a slow or loaded machine and every timeout, poll interval and scenario
hold in the suite stretches by that factor (like python-websockets' ``MS`` in its tests).

- A duration given to a function of this module, or to a helper in ``tests/support`` that
  takes a ``timeout``, is in units: the function scales it.
- A duration given straight to another API (``asyncio.wait_for``, ``Popen.wait``,
  ``Thread.join``, a scenario's ``time.sleep``) is written ``n * UNIT``.
- What a test configures the system under test with (a lease, a session TTL) stays in real
  milliseconds, except where a scenario must keep its proportion to a hold of the test (a
  renewal every 150 ms under a 400 ms lease): then both are scaled (``ms``).
- A measured time asserted against an upper bound ("it answered promptly") is bounded
  generously on the unit: ``elapsed < 10 * UNIT``. A lower bound is the claim itself (the
  server held the poll for its 300 ms) and stays as configured.

``wait_until`` and ``wait_until_async`` poll a predicate until it returns a true value and
return that value; both are bounded in time (``timeout``) and in count (one call per
``interval``, plus one), and fail with an AssertionError that names what they waited for.
``hold`` blocks a thread until a gate opens and says when it has begun, so that a test
waits for "the thread is held" instead of sleeping.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["UNIT", "hold", "ms", "wait_until", "wait_until_async"]

T = TypeVar("T")


def _unit_from_env() -> float:
    raw = os.environ.get("ORBIT_TEST_TIME_UNIT", "1.0")
    try:
        factor = float(raw)
    except ValueError:
        raise ValueError(f"ORBIT_TEST_TIME_UNIT must be a number, not {raw!r}") from None
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"ORBIT_TEST_TIME_UNIT must be a positive number, not {raw!r}")
    return factor


UNIT = _unit_from_env()
"""Seconds in one second of the tests."""


def ms(milliseconds: float) -> int:
    """``milliseconds`` scaled by the unit, as whole milliseconds (for a configured duration
    that a scenario's hold must stay in proportion to)."""
    return max(1, round(milliseconds * UNIT))


Describe = str | Callable[[], str]


class _Polls:
    """The bounds of one wait: a monotonic deadline and a number of polls."""

    def __init__(self, timeout: float, interval: float) -> None:
        if not (timeout >= 0 and interval > 0):
            raise ValueError(f"timeout {timeout} must be >= 0 and interval {interval} > 0")
        self.timeout_s = timeout * UNIT
        self.interval_s = interval * UNIT
        self.deadline = time.monotonic() + self.timeout_s
        self.left = math.ceil(timeout / interval) + 1

    def pause(self) -> float | None:
        """Seconds to sleep before the next poll, or None when the wait is over."""
        self.left -= 1
        remaining = self.deadline - time.monotonic()
        if self.left <= 0 or remaining <= 0:
            return None
        return min(self.interval_s, remaining)

    def failure(self, what: Describe, last: object) -> AssertionError:
        name = what() if callable(what) else what
        return AssertionError(f"waited {self.timeout_s:.2f} s for {name}; "
                              f"last value: {last!r}")


def wait_until(predicate: Callable[[], T], *, timeout: float, what: Describe,
               interval: float = 0.02) -> T:
    """Call ``predicate`` until it returns a true value and return that value.

    ``timeout`` and ``interval`` are in units. After ``timeout`` (or ``timeout / interval``
    + 1 calls) it raises AssertionError naming ``what`` (a text, or a callable that makes
    one at failure time) and the last value. An exception from ``predicate`` ends the wait.
    """
    polls = _Polls(timeout, interval)
    while True:
        value = predicate()
        if value:
            return value
        pause = polls.pause()
        if pause is None:
            raise polls.failure(what, value)
        time.sleep(pause)


async def wait_until_async(predicate: Callable[[], T | Awaitable[T]], *, timeout: float,
                           what: Describe, interval: float = 0.02) -> T:
    """``wait_until`` for a coroutine: ``predicate`` may return a value or an awaitable, and
    the waits between calls let the event loop run."""
    polls = _Polls(timeout, interval)
    while True:
        value: Any = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[no-any-return]
        pause = polls.pause()
        if pause is None:
            raise polls.failure(what, value)
        await asyncio.sleep(pause)


def hold(gate: threading.Event, started: threading.Event, timeout: float = 10.0) -> None:
    """Block the calling thread (a store thread, a worker) until ``gate`` opens, at most
    ``timeout`` units; ``started`` is set first, so the test can wait until it is held."""
    started.set()
    gate.wait(timeout * UNIT)
