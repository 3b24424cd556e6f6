"""A handler's progress in the child: its arguments checked, its messages spaced.

``check_progress`` applies the rules of ``execution.progress`` (docs/handlers.md,
"Progress and checkpoints"): ``fraction`` a number in [0, 1], ``details`` a JSON value by
the value rules whose encoded text is at most MAX_PROGRESS_BYTES. A bad argument raises in
the handler (TypeError for a wrong type, ValueError for a bad value), never later.

``ProgressSender`` keeps the pipe to the supervisor quiet: at most one ``ProgressNote`` per
``PROGRESS_EVERY`` seconds. A note given sooner is kept (merged with what is still pending:
the latest value of each field wins) and goes out with the next call after the interval or
at ``flush``, which the loop calls before the attempt's answer, so a failing handler's last
details reach the supervisor first. Time comes from the clock it is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.limits import MAX_PROGRESS_BYTES

from .results import encode_json_value

__all__ = ["PROGRESS_EVERY", "ProgressSender", "check_progress"]

# Seconds between two progress messages of one child, at least.
PROGRESS_EVERY = 0.050


def check_progress(fraction: Any, details: Any) -> tuple[float | None, str | None]:
    """The checked fraction and the details' JSON text (None: not given)."""
    checked: float | None = None
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float | Decimal):
            raise TypeError("execution.progress: fraction must be a number in [0, 1] or None, "
                            f"not {type(fraction).__name__}")
        checked = float(fraction)
        if not math.isfinite(checked) or not 0.0 <= checked <= 1.0:
            raise ValueError(f"execution.progress: fraction must be in [0, 1], not {fraction!r}")
    text: str | None = None
    if details is not None:
        try:
            text = encode_json_value(details, what="progress details")
        except ValueRejected as exc:
            # What cannot be encoded at all is a wrong type; the rest breaks a value rule.
            kind = TypeError if exc.code is ErrorCode.INVALID_JSON else ValueError
            raise kind(f"execution.progress: {exc.message}") from None
        if text == "null":  # None (not given) already means "keep the details"
            raise ValueError("execution.progress: details must not be JSON null")
        size = len(text.encode())
        if size > MAX_PROGRESS_BYTES:
            raise ValueError(f"execution.progress: details are {size} bytes encoded; at most "
                             f"{MAX_PROGRESS_BYTES}")
    return checked, text


class ProgressSender:
    """Spaces one attempt's progress messages; ``send(fraction, details_json)`` writes one."""

    __slots__ = ("_clock", "_details", "_every", "_fraction", "_last_sent", "_pending",
                 "_send")

    def __init__(self, send: Callable[[float | None, str | None], None],
                 clock: Callable[[], float], every: float = PROGRESS_EVERY) -> None:
        self._send, self._clock, self._every = send, clock, every
        self._last_sent: float | None = None
        self._pending = False
        self._fraction: float | None = None
        self._details: str | None = None

    @property
    def pending(self) -> bool:
        return self._pending

    def note(self, fraction: float | None, details_json: str | None) -> None:
        """A checked note: merged into what is pending, sent now if the interval allows."""
        if fraction is not None:
            self._fraction = fraction
        if details_json is not None:
            self._details = details_json
        self._pending = True
        now = self._clock()
        if self._last_sent is None or now - self._last_sent >= self._every:
            self._write(now)

    def flush(self) -> None:
        """Send what is pending now (before the attempt's answer)."""
        if self._pending:
            self._write(self._clock())

    def _write(self, now: float) -> None:
        fraction, details = self._fraction, self._details
        self._pending = False
        self._fraction = self._details = None
        self._last_sent = now
        self._send(fraction, details)
