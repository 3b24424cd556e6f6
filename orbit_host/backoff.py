"""Delays between tries, as one pure generator (like python-websockets' ``backoff()``).

Each ``next()`` is the pause before the next try. The base delay grows from ``first``:
doubling per try (``doubling``, the default) or by ``first`` per try (``linear``), capped
at ``cap``. With ``jitter`` above 0 each delay is drawn in ``[base x (1 - jitter), base]``
from one ``draw()`` (uniform in [0, 1)), so that many processes cut off at once do not come
back at once; the result is never below ``at_least``. Pure: randomness comes in as
``draw``, and the caller does the sleeping. Its users:

- the supervisor's reconnects: doubling from ``--reconnect-min-delay`` up to the max,
  jitter 0.5, never below the minimum (a fresh generator after each welcome);
- a child that dies before it is ready, and a lost handler template: doubling, no jitter;
- a store transaction that lost to another writer: linear, jitter 0.9.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

__all__ = ["MAX_STEP", "delays"]

MAX_STEP = 32  # doublings counted at most: 2**32 x any first delay is past any cap

Growth = Literal["doubling", "linear"]


def delays(first: float, cap: float, *, growth: Growth = "doubling", jitter: float = 0.0,
           draw: Callable[[], float] | None = None, at_least: float = 0.0
           ) -> Iterator[float]:
    """Yield the pauses before each next try, forever; see the module docstring.
    ``jitter`` (0 to 1) needs ``draw``."""
    if not 0.0 <= jitter <= 1.0:
        raise ValueError("jitter must be in [0, 1]")
    if jitter and draw is None:
        raise ValueError("a jitter needs a draw")
    step = 0
    while True:
        grown = 2.0 ** step if growth == "doubling" else float(step + 1)
        base = min(cap, first * grown)
        step = min(step + 1, MAX_STEP)
        if jitter and draw is not None:
            base *= 1.0 - jitter + jitter * draw()
        yield max(at_least, base)
