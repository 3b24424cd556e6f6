"""Time-ordered 32-character lowercase hex IDs: 48 bits of milliseconds, 80 random bits.

Sorting IDs sorts by creation time, which keeps B-tree inserts at the right edge.
"""

from __future__ import annotations

import os
import re

_ID_RE = re.compile(r"[0-9a-f]{32}")


def new_id(now_ms: int) -> str:
    """A fresh ID for an entity created at ``now_ms`` (wall-clock milliseconds)."""
    return f"{now_ms & 0xFFFF_FFFF_FFFF:012x}{os.urandom(10).hex()}"


def is_id(value: object) -> bool:
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def new_secret() -> str:
    """A 256-bit secret, hex encoded. High entropy, so a plain SHA-256 is a sound hash."""
    return os.urandom(32).hex()
