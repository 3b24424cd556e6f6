"""When a request of starts and finishes may wait for more (pure: no I/O, no clock).

A request sent now carries what is queued; one sent a little later may also carry the finish
of a handler about to end, and the claim refilling both slots: one round trip and one server
transaction instead of two. ``BatchHold`` learns how long handlers and round trips take and
decides how long the session may hold such a request. The session asks only when nothing
but starts and finishes is queued and it is not stopping: renewals, resumes, drains and
resent claims never wait, and a held start has no lease ticking yet.
"""

from __future__ import annotations

from collections.abc import Iterable

# A short handler's finish is waited for up to one recent round trip, within these bounds.
BATCH_HOLD_MIN = 0.002
BATCH_HOLD_MAX = 0.020
# Handlers count as CPU-bound when they used at least this share of the CPU time they could
# get (all of a CPU, or their fair part when more ran than CPUs): only then does a finished
# slot held back idle no CPU.
CPU_BOUND_SHARE = 0.5
_EWMA_WEIGHT = 0.2  # of the newest sample in the running averages


def _average(old: float | None, sample: float) -> float:
    return sample if old is None else (1 - _EWMA_WEIGHT) * old + _EWMA_WEIGHT * sample


class BatchHold:
    """Recent handler durations and round trips, and the hold they allow.

    ``cpus`` is how many CPUs the children share (None: unknown, never oversubscribed)."""

    def __init__(self, cpus: int | None) -> None:
        self.cpus = cpus
        self.exec_ewma: float | None = None  # handler durations (Execute -> outcome)
        self.cpu_bound_ewma: float | None = None  # CPU used / CPU available, per handler
        self.rtt_ewma: float | None = None  # request round trips (sent -> response)
        self.queued_since: float | None = None  # when the oldest queued op was queued

    def handler_took(self, seconds: float, cpu_seconds: float | None, executing: int) -> None:
        """A handler ended after ``seconds``, having used ``cpu_seconds`` (None: unknown)
        while ``executing`` handlers (itself included) shared the CPUs."""
        self.exec_ewma = _average(self.exec_ewma, seconds)
        if cpu_seconds is not None and seconds > 0 and self.cpus is not None:
            available = min(1.0, self.cpus / max(1, executing))  # of one CPU, per handler
            used = min(1.0, cpu_seconds / seconds / available) if available > 0 else 1.0
            self.cpu_bound_ewma = _average(self.cpu_bound_ewma, used)

    def cpu_bound(self) -> bool:
        """Whether recent handlers kept their CPUs busy (I/O-bound ones do not)."""
        return self.cpu_bound_ewma is not None and self.cpu_bound_ewma >= CPU_BOUND_SHARE

    def round_trip(self, seconds: float) -> None:
        self.rtt_ewma = _average(self.rtt_ewma, seconds)

    def queued(self, now: float, anything: bool) -> None:
        """Whether ops are queued now (the oldest one's wait counts from the first call)."""
        if not anything:
            self.queued_since = None
        elif self.queued_since is None:
            self.queued_since = now

    def sent(self, now: float, left_queued: bool) -> None:
        """A request went out; ops it had no room for wait from now on."""
        self.queued_since = now if left_queued else None

    def window(self) -> float:
        """How long a short handler's finish may be waited for: one recent round trip,
        within the bounds. Sent now, the request would hold that finish back for its round
        trip anyway; held, both share one request, which also halves the server's work
        per task when it is the limit."""
        return min(max(self.rtt_ewma or 0.0, BATCH_HOLD_MIN), BATCH_HOLD_MAX)

    def until(self, now: float, running_since: Iterable[float], executing: int) -> float | None:
        """The instant to hold the queued starts and finishes until, or None to send now.

        ``running_since`` holds when each running handler started; ``executing`` counts the
        children running a handler (killed ones included)."""
        ewma = self.exec_ewma
        if ewma is None:
            return None
        started: list[float] | None = None  # read only when a rule needs it (hot path)
        if (self.cpus is not None and executing > self.cpus and self.queued_since is not None
                and self.cpu_bound()):
            # More CPU-bound handlers run than CPUs: holding idles no CPU and cuts the
            # requests (and the server's work per task). Until the oldest queued op has waited
            # BATCH_HOLD_MAX, if a handler is expected to finish by then (one already past
            # its expected duration counts: it may finish any moment); every finish
            # re-decides, and once no more handlers run than CPUs nothing is held.
            started = list(running_since)
            limit = self.queued_since + BATCH_HOLD_MAX
            if started and now < limit and min(started) + ewma <= limit:
                return limit
        # Otherwise only for a handler that started less than twice its recent duration
        # ago, while recent handlers took at most half the window.
        window = self.window()
        if ewma > window / 2:
            return None
        if started is None:
            started = list(running_since)
        expected = [since + min(2 * ewma, window) for since in started]
        later = [at for at in expected if at > now]
        return max(later) if later else None
