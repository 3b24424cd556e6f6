"""A CPU-bound handler: count the primes below ``limit`` by trial division, in pure Python.

Each task keeps one core busy; with ``--workers 2`` on two cores both stay busy, because
every handler runs in its own process (no shared interpreter lock between them).
"""

from __future__ import annotations

import os
from typing import Any

from orbit_child import Execution, Handlers, TaskType, WorkerFailure

HANDLER_ENV = "ORBIT_EXAMPLE_HANDLER"
HANDLER_NAME = os.environ.get(HANDLER_ENV) or "example.primes"
MAX_LIMIT = 10_000_000


def primes_type(name: str) -> TaskType[dict[str, int], dict[str, int]]:
    """The declaration shared with the producer (__main__): counting has no side effect."""
    return TaskType(name, "v1", "v1", idempotent=True)


HANDLERS = Handlers()


def count_primes(limit: int) -> int:
    count = 0
    for n in range(2, limit):
        d = 2
        while d * d <= n:
            if n % d == 0:
                break
            d += 1
        else:
            count += 1
    return count


@HANDLERS.task(primes_type(HANDLER_NAME))
def primes(execution: Execution) -> Any:
    limit = execution.payload.get("limit") if isinstance(execution.payload, dict) else None
    if not isinstance(limit, int) or not 2 <= limit <= MAX_LIMIT:
        raise WorkerFailure("OBJECT_REJECTED", {"reason": f"limit must be in 2..{MAX_LIMIT}"})
    return {"limit": limit, "primes": count_primes(limit)}

