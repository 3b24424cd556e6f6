"""The local lease of one attempt, on the supervisor's monotonic clock (pure).

Rules (docs/protocol.md "Leases and fencing"):

- A grant of ``lease_ms`` answering a request that was *sent* at ``sent_at`` expires locally
  at ``sent_at + lease_ms - margin``. The server measured from when it *received* the
  request, which is later, so the local expiry is never later than the server's. The margin
  (at most a tenth of the task's lease TTL) moves the kill earlier still, so that the kill and its
  report reach the server while the lease holds: the attempt then records UNKNOWN/LEASE_LOST
  with the kill reason and the child's exit, rather than the server's bare LEASE_EXPIRED.
- Every grant replaces the previous expiry, also when it is shorter: the server stores the
  new absolute expiry, so a shorter lease is adopted at once.
- Once the local expiry has passed the lease is lost for good; a late confirmation never
  revives it (``grant`` returns False).
- The next renewal is due after one third of the remaining lease, and never sooner than
  ``RENEW_MIN_GAP`` after the previous renewal was sent.
- ``stop_renewing`` (a cancel is winding the attempt down: the server refuses renewals of a
  cancelled task) leaves the expiry as it is; nothing is renewed any more, so the lease's
  end bounds the cancel grace.
- At most one renewal is queued or in flight (``renewal_queued`` until it is answered or
  ``renewal_dropped``).

Its fields change only through its methods (they are read-only properties); what the
session learns about an attempt's lease is one call here, never a write from outside.

Times are float seconds from a monotonic clock, passed in by the caller.
"""

from __future__ import annotations

RENEW_MIN_GAP = 0.020  # seconds between two renewals of one attempt, at least

__all__ = ["RENEW_MIN_GAP", "Lease"]


class Lease:
    """Call ``grant`` on each confirmed start/renew/resume, ``renewal_queued`` when a renewal
    is queued and ``renew_sent`` when it goes out, and ``check(now)`` from the timer;
    ``deadline()`` is when to call ``check`` next."""

    __slots__ = ("_capped", "_expires_at", "_final", "_last_renew_sent", "_lost", "_margin",
                 "_renew_at", "_renewals", "_renewing", "_requested_ms")

    def __init__(self, requested_ms: int, margin: float = 0.0) -> None:
        # The task's lease TTL: a grant shorter than this hit a timeout or deadline.
        self._requested_ms = requested_ms
        self._margin = margin  # seconds before the granted expiry to kill (at most TTL / 10)
        self._expires_at: float | None = None
        self._renew_at: float | None = None
        self._last_renew_sent: float | None = None
        self._renewing = False  # a renewal is queued or in flight
        self._renewals = 0  # confirmed renewals
        self._capped = False  # the last grant was cut by the attempt timeout or task deadline
        self._lost = False
        self._final = False  # stop_renewing(): the expiry stands, no renewal is due any more

    def __repr__(self) -> str:
        return (f"Lease(requested_ms={self._requested_ms}, expires_at={self._expires_at}, "
                f"renew_at={self._renew_at}, renewing={self._renewing}, "
                f"renewals={self._renewals}, lost={self._lost}, final={self._final})")

    # ------------------------------------------------------------------ read-only

    @property
    def requested_ms(self) -> int:
        return self._requested_ms

    @property
    def margin(self) -> float:
        return self._margin

    @property
    def expires_at(self) -> float | None:
        """The local expiry (None before the first grant)."""
        return self._expires_at

    @property
    def renew_at(self) -> float | None:
        return self._renew_at

    @property
    def renewing(self) -> bool:
        """A renewal is queued or in flight."""
        return self._renewing

    @property
    def renewals(self) -> int:
        """Renewals confirmed."""
        return self._renewals

    @property
    def capped(self) -> bool:
        """The last grant was cut short by the attempt timeout or the task deadline."""
        return self._capped

    @property
    def lost(self) -> bool:
        return self._lost

    @property
    def final(self) -> bool:
        return self._final

    # ------------------------------------------------------------------ changes

    def grant(self, sent_at: float, lease_ms: int, now: float, *,
              margin: float | None = None) -> bool:
        """Adopt a lease the server granted to a request sent at ``sent_at``, killing
        ``margin`` seconds (when given: the margin measured now) before its end.

        Returns False when the lease is (or is now) lost: the caller must kill the execution.
        """
        if margin is not None:
            self._margin = margin
        if self._lost:
            return False
        # The margin is capped by the task's TTL, not by this grant: grants shrink towards an
        # attempt timeout, and the kill must still land before the server's expiry there.
        kill_before = min(self._margin, self._requested_ms / 10_000.0)
        expires_at = self._expires_at = sent_at + lease_ms / 1000.0 - kill_before
        self._capped = lease_ms < self._requested_ms
        if now >= expires_at:
            self._lost = True
            return False
        self._schedule_renewal(now)
        return True

    def renewal_confirmed(self, sent_at: float, lease_ms: int, now: float, *,
                          margin: float | None = None) -> bool:
        """A renewal answered ok; same contract as ``grant``."""
        self._renewing = False
        if self._lost:
            return False
        self._renewals += 1
        return self.grant(sent_at, lease_ms, now, margin=margin)

    def renewal_failed(self, now: float) -> None:
        """A renewal answered with a transient error: try again after the minimum gap."""
        self._renewing = False
        if not self._lost:
            self._renew_at = now + RENEW_MIN_GAP

    def renewal_queued(self) -> None:
        """A renewal was queued: no other is due until it is answered or dropped."""
        self._renewing = True

    def renewal_dropped(self) -> None:
        """The renewal queued or in flight is gone (unqueued, or answered with an error that
        ends renewing); the expiry stands."""
        self._renewing = False

    def renewal_due(self, now: float) -> bool:
        return (not self._lost and not self._final and not self._renewing
                and self._renew_at is not None and now >= self._renew_at)

    def stop_renewing(self) -> None:
        self._final = True

    def renew_sent(self, now: float) -> None:
        self._last_renew_sent = now

    def lose(self) -> None:
        """The lease is lost for good (the attempt is killed or over): nothing renews it,
        no grant revives it, and no timer is due for it any more."""
        self._lost = True

    def check(self, now: float) -> bool:
        """Return True exactly once: the first time ``now`` reaches the local expiry."""
        if self._lost or self._expires_at is None or now < self._expires_at:
            return False
        self._lost = True
        return True

    def deadline(self) -> float | None:
        """The earliest instant at which ``check`` or ``renewal_due`` may change answer."""
        if self._lost or self._expires_at is None:
            return None
        if self._renew_at is not None and not self._renewing and not self._final:
            return min(self._renew_at, self._expires_at)
        return self._expires_at

    def _schedule_renewal(self, now: float) -> None:
        assert self._expires_at is not None
        at = now + (self._expires_at - now) / 3.0
        if self._last_renew_sent is not None:
            at = max(at, self._last_renew_sent + RENEW_MIN_GAP)
        self._renew_at = at
