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

Times are float seconds from a monotonic clock, passed in by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

RENEW_MIN_GAP = 0.020  # seconds between two renewals of one attempt, at least


@dataclass(slots=True)
class Lease:
    """Call ``grant`` on each confirmed start/renew/resume, ``renew_sent`` when a renewal goes
    out, and ``check(now)`` from the timer; ``deadline()`` is when to call ``check`` next."""

    requested_ms: int  # the task's lease TTL: a grant shorter than this hit a timeout/deadline
    margin: float = 0.0  # seconds before the granted expiry to kill (at most TTL / 10)
    expires_at: float | None = None
    renew_at: float | None = None
    last_renew_sent: float | None = None
    renewing: bool = False  # a renewal is queued or in flight
    renewals: int = 0  # confirmed renewals
    capped: bool = False  # the last grant was cut by the attempt timeout or task deadline
    lost: bool = False
    final: bool = False  # stop_renewing(): the expiry stands, no renewal is due any more

    def grant(self, sent_at: float, lease_ms: int, now: float) -> bool:
        """Adopt a lease the server granted to a request sent at ``sent_at``.

        Returns False when the lease is (or is now) lost: the caller must kill the execution.
        """
        if self.lost:
            return False
        # The margin is capped by the task's TTL, not by this grant: grants shrink towards an
        # attempt timeout, and the kill must still land before the server's expiry there.
        margin = min(self.margin, self.requested_ms / 10_000.0)
        self.expires_at = sent_at + lease_ms / 1000.0 - margin
        self.capped = lease_ms < self.requested_ms
        if now >= self.expires_at:
            self.lost = True
            return False
        self._schedule_renewal(now)
        return True

    def renewal_confirmed(self, sent_at: float, lease_ms: int, now: float) -> bool:
        """A renewal answered ok; same contract as ``grant``."""
        self.renewing = False
        if self.lost:
            return False
        self.renewals += 1
        return self.grant(sent_at, lease_ms, now)

    def renewal_failed(self, now: float) -> None:
        """A renewal answered with a transient error: try again after the minimum gap."""
        self.renewing = False
        if not self.lost:
            self.renew_at = now + RENEW_MIN_GAP

    def renewal_due(self, now: float) -> bool:
        return (not self.lost and not self.final and not self.renewing
                and self.renew_at is not None and now >= self.renew_at)

    def stop_renewing(self) -> None:
        self.final = True

    def renew_sent(self, now: float) -> None:
        self.last_renew_sent = now

    def check(self, now: float) -> bool:
        """Return True exactly once: the first time ``now`` reaches the local expiry."""
        if self.lost or self.expires_at is None or now < self.expires_at:
            return False
        self.lost = True
        return True

    def deadline(self) -> float | None:
        """The earliest instant at which ``check`` or ``renewal_due`` may change answer."""
        if self.lost or self.expires_at is None:
            return None
        if self.renew_at is not None and not self.renewing and not self.final:
            return min(self.renew_at, self.expires_at)
        return self.expires_at

    def _schedule_renewal(self, now: float) -> None:
        assert self.expires_at is not None
        at = now + (self.expires_at - now) / 3.0
        if self.last_renew_sent is not None:
            at = max(at, self.last_renew_sent + RENEW_MIN_GAP)
        self.renew_at = at
