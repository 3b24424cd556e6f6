"""``heap.settle`` in a fresh interpreter (it changes the process's collector for good): the
start-up heap frozen, young collections every YOUNG_THRESHOLD allocations, and cycles made
afterwards still collected."""

from __future__ import annotations

import json
import subprocess
import sys

from orbit_host.heap import YOUNG_THRESHOLD

PROBE = """
import gc, json, weakref
from orbit_host import heap
before = gc.get_threshold()
heap.settle()
class Node: pass
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({"before": before, "after": gc.get_threshold(),
                  "frozen": gc.get_freeze_count(), "cycle_collected": gone() is None}))
"""


def test_settle_freezes_the_start_up_heap_and_still_collects_cycles() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, check=True)
    seen = json.loads(done.stdout)
    assert seen["before"][0] < YOUNG_THRESHOLD
    assert seen["after"] == [YOUNG_THRESHOLD, *seen["before"][1:]]
    assert seen["frozen"] > 1000  # the modules and objects start-up made
    assert seen["cycle_collected"]
