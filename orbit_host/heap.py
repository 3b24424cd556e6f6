"""The cyclic garbage collector's settings for Orbit's long-running processes (orbit-server,
orbit-supervise), applied once they are set up and before they serve.

With CPython's default first-generation threshold (700 container allocations), the server
ran about 1,100 collections per 20,000 tasks of ``bench_server.py`` and spent some 35 µs of
CPU per task in them, each stopping every thread; the older generations' passes walked the
whole start-up heap (modules, SQLAlchemy's compiled statements, the app) again and again.
``settle`` moves what start-up made into the permanent generation (``gc.freeze``), which no
collection walks, and raises the first threshold so the young objects of many requests are
looked at together. Cycles are still collected (docs/deployment.md, "Sizing").
"""

from __future__ import annotations

import gc

# Container allocations (net of deallocations) between two young collections.
YOUNG_THRESHOLD = 20_000


def settle() -> None:
    """Collect once, freeze what is left (the start-up heap), and collect the young
    generation only every YOUNG_THRESHOLD container allocations from now on."""
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
