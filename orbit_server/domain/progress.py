"""A handler's progress as the server keeps it: the value rules applied again to a renew's
or finish's ``Progress`` (``check_progress``), and the attempt's latest progress
(``apply_progress``). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.frames import Progress
from orbit_wire.jsonvalue import check_text
from orbit_wire.limits import MAX_PROGRESS_BYTES

from .records import AttemptRec


@dataclass(frozen=True, slots=True)
class CheckedProgress:
    """A progress report after the server's checks. ``refused``: the code the details broke
    (they are dropped; the fraction, the renew or finish that carried them still count)."""

    fraction: float | None
    details: str | None
    refused: ErrorCode | None = None


def check_progress(progress: Progress) -> CheckedProgress:
    """The value rules on the details (JSON, not null, at most MAX_PROGRESS_BYTES encoded,
    nesting and integer bounds), as for a result. A bad one is refused alone, so a renew
    never loses its lease over a bad progress value."""
    details = progress.details_json
    if details is None:
        return CheckedProgress(progress.fraction, None)
    try:
        check_text(details, what="progress details", max_bytes=MAX_PROGRESS_BYTES)
    except ValueRejected as exc:
        return CheckedProgress(progress.fraction, None, exc.code)
    return CheckedProgress(progress.fraction, details)


def apply_progress(attempt: AttemptRec, progress: CheckedProgress, now_ms: int) -> None:
    """The attempt's latest progress: each field given replaces the stored one, a field left
    out (None) keeps it (details alone do not reset the fraction); the instant is the
    report's."""
    if progress.fraction is not None:
        attempt.progress_fraction = progress.fraction
    if progress.details is not None:
        attempt.progress_json = progress.details
    attempt.progress_at_ms = now_ms
