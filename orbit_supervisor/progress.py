"""A handler's progress on the worker: checked, coalesced, and its silence timed (pure).

A child's ``ProgressNote`` is untrusted: ``checked_progress`` applies the wire's rules
(fraction a number in [0, 1], details JSON text by the value rules within
MAX_PROGRESS_BYTES) and refuses the note otherwise; the pool drops and logs it.

``AttemptProgress`` (one per attempt, on its record) keeps the latest state, the fields of
each note merged over the previous ones (None leaves a field as it was), with what the
server has heard of it:

- a renewal takes the state when it is *sent* (``for_renewal``) if it changed since the
  last renewal that carried one; the answer confirms it (``renewal_answered``), and a
  renewal that fails or is dropped leaves it for the next one;
- a finish carries the state unless a confirmed renewal carried this very state
  (``for_finish``).

The full state goes each time (not only the changed fields), so the server keeps the latest
whatever it does with a field left out. Progress never makes a request by itself: it rides
the renewals, at most once each, and the finish.

``alive_at`` is the handler's last sign of life, its start on a child or its last note
(valid or not: a child that talks is not stuck); with the reservation's
``progress_timeout_ms`` it gives the instant the session kills it (PROGRESS_TIMEOUT).
"""

from __future__ import annotations

import math
from typing import Any

from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.frames import Progress
from orbit_wire.jsonvalue import check_text
from orbit_wire.limits import MAX_PROGRESS_BYTES

__all__ = ["AttemptProgress", "checked_progress"]


def checked_progress(fraction: Any, details_json: Any) -> Progress:
    """The note's progress by the wire's rules; ValueRejected names what is wrong."""
    checked: float | None = None
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise ValueRejected(ErrorCode.BAD_FRAME, "progress fraction is not a number")
        checked = float(fraction)
        if not math.isfinite(checked) or not 0.0 <= checked <= 1.0:
            raise ValueRejected(ErrorCode.BAD_FRAME, "progress fraction is not in [0, 1]")
    if details_json is not None:
        if not isinstance(details_json, str):
            raise ValueRejected(ErrorCode.BAD_FRAME, "progress details are not JSON text")
        # Null is refused as the server refuses it: None already means "keep the details".
        check_text(details_json, what="progress details", max_bytes=MAX_PROGRESS_BYTES)
    return Progress(fraction=checked, details_json=details_json)


class AttemptProgress:
    """One attempt's latest progress and its handler's last sign of life."""

    __slots__ = ("_alive_at", "_carried", "_confirmed", "_state", "_version")

    def __init__(self) -> None:
        self._state: Progress | None = None
        self._version = 0  # notes merged so far
        self._carried = 0  # the version the renewal in flight carries (0: none)
        self._confirmed = 0  # the version a confirmed renewal carried
        self._alive_at: float | None = None

    def __repr__(self) -> str:
        return (f"AttemptProgress(version={self._version}, confirmed={self._confirmed}, "
                f"alive_at={self._alive_at})")

    @property
    def latest(self) -> Progress | None:
        """The merged state of every note so far (None: none came)."""
        return self._state

    @property
    def alive_at(self) -> float | None:
        return self._alive_at

    def alive(self, now: float) -> None:
        """A sign of life at ``now``: the handler started on a child, or its child spoke."""
        if self._alive_at is None or now > self._alive_at:
            self._alive_at = now

    def note(self, progress: Progress, now: float) -> None:
        """A checked note that arrived at ``now``."""
        self.alive(now)
        if progress.fraction is None and progress.details_json is None:
            return  # a sign of life only: nothing new to tell the server
        old = self._state
        if old is not None:
            progress = Progress(
                fraction=progress.fraction if progress.fraction is not None else old.fraction,
                details_json=(progress.details_json if progress.details_json is not None
                              else old.details_json))
        self._state = progress
        self._version += 1

    def deadline(self, timeout_ms: int | None) -> float | None:
        """When the handler is stuck with ``timeout_ms`` (None: never, or not started)."""
        if timeout_ms is None or self._alive_at is None:
            return None
        return self._alive_at + timeout_ms / 1000.0

    def for_renewal(self) -> Progress | None:
        """The state a renewal about to be sent carries (None: nothing new since the last
        renewal that carried one). At most one renewal is in flight per attempt."""
        if self._version <= max(self._carried, self._confirmed):
            return None
        self._carried = self._version
        return self._state

    def renewal_answered(self, ok: bool) -> None:
        """The renewal in flight was answered (``ok``: applied) or dropped (not ok)."""
        if ok and self._carried > self._confirmed:
            self._confirmed = self._carried
        self._carried = 0

    def for_finish(self) -> Progress | None:
        """The state a finish carries: unless a confirmed renewal carried it already."""
        if self._version <= self._confirmed:
            return None
        return self._state
