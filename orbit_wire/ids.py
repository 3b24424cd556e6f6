"""Time-ordered 32-character lowercase hex IDs: 48 bits of milliseconds, then 80 bits that
start random at each new millisecond and count up by one within it.

Sorting IDs sorts by creation time, which keeps B-tree inserts at the right edge. Counting up
within a millisecond (a batch of a thousand tasks is made in one or two) keeps the IDs of one
batch in creation order too, so rows made and later handled together stay on neighbouring
index pages instead of scattering over the batch's range: a worker request finishing and
starting neighbouring tasks rewrites fewer pages. The random start keeps IDs made by other
processes in the same millisecond apart; a clock that steps back keeps the last millisecond
until it catches up, so IDs of one process never go backwards.
"""

from __future__ import annotations

import os
import re
import threading

_ID_RE = re.compile(r"[0-9a-f]{32}")
_MS_MASK = 0xFFFF_FFFF_FFFF
_TAIL_BITS = 80
# A fresh millisecond starts below half the tail's range, so counting up never wraps.
_START_BITS = _TAIL_BITS - 1

class IdMaker:
    """Makes the IDs of one process (``new_id`` is the process's); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_tail = 0

    def new_id(self, now_ms: int) -> str:
        """A fresh ID for an entity created at ``now_ms`` (wall-clock milliseconds)."""
        ms = now_ms & _MS_MASK
        with self._lock:
            if ms > self._last_ms:
                self._last_ms = ms
                self._last_tail = int.from_bytes(os.urandom(10), "big") >> (
                    _TAIL_BITS - _START_BITS)
            else:
                self._last_tail += 1
            return f"{self._last_ms:012x}{self._last_tail:020x}"


new_id = IdMaker().new_id


def is_id(value: object) -> bool:
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def new_secret() -> str:
    """A 256-bit secret, hex encoded. High entropy, so a plain SHA-256 is a sound hash."""
    return os.urandom(32).hex()
