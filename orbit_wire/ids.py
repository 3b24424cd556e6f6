"""Time-ordered 32-character lowercase hex IDs: 48 bits of milliseconds, a 40-bit random tag
of the process, and a 40-bit sequence number the process counts up.

Sorting IDs sorts by creation time, which keeps B-tree inserts at the right edge. The
sequence keeps the IDs one process makes within a millisecond in creation order too (a batch
of a thousand tasks is made in one or two milliseconds), so rows made and later handled
together stay on neighbouring index pages instead of scattering over the batch's range: a
worker request finishing and starting neighbouring tasks rewrites fewer pages. The random tag
keeps IDs of different processes apart; a forked child draws its own.
"""

from __future__ import annotations

import itertools
import os

from .names import ID_RE

_MS_MASK = 0xFFFF_FFFF_FFFF
_SEQ_MASK = (1 << 40) - 1


class IdMaker:
    """Makes the IDs of one process (``new_id`` is the process's). Safe across threads:
    taking the next sequence number is one atomic step."""

    _tag: str
    _seq: itertools.count[int]

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        """Draw a new tag and sequence start (a forked child must not repeat its parent)."""
        self._tag = f"{int.from_bytes(os.urandom(5), 'big'):010x}"
        self._seq = itertools.count(int.from_bytes(os.urandom(4), "big"))

    def new_id(self, now_ms: int) -> str:
        """A fresh ID for an entity created at ``now_ms`` (wall-clock milliseconds)."""
        return f"{now_ms & _MS_MASK:012x}{self._tag}{next(self._seq) & _SEQ_MASK:010x}"


_process = IdMaker()
new_id = _process.new_id
os.register_at_fork(after_in_child=_process.reseed)


def is_id(value: object) -> bool:
    return isinstance(value, str) and ID_RE.fullmatch(value) is not None


def new_secret() -> str:
    """A 256-bit secret, hex encoded. High entropy, so a plain SHA-256 is a sound hash."""
    return os.urandom(32).hex()
