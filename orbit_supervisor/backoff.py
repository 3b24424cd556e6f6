"""The reconnect backoff as a pure generator (like python-websockets' ``backoff()``).

Each ``next()`` is the delay before the next connection attempt: exponential from
``min_delay`` (doubling per attempt, capped at ``max_delay``) with jitter, so that many
supervisors cut off at once do not come back at once. The jitter draws one ``rng()``
(uniform in [0, 1)) per delay and keeps each delay in [base / 2, base], never below
``min_delay``. The session starts a fresh generator when a welcome arrives (a successful
connection resets the backoff).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

MAX_STEP = 32  # doublings counted at most: 2**32 x any min_delay is past any max_delay


def backoff(min_delay: float, max_delay: float,
            rng: Callable[[], float]) -> Iterator[float]:
    """Yield reconnect delays in seconds forever; see the module docstring."""
    step = 0
    while True:
        base = min(max_delay, min_delay * 2.0 ** step)
        step = min(step + 1, MAX_STEP)
        yield max(min_delay, base * (0.5 + 0.5 * rng()))
