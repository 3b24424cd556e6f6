"""``Effects``: what the adapters must do after a transaction of the use cases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Counted:
    """What one transaction did, for this replica's metrics (orbit_server/metrics.py): the
    adapters count it once the transaction committed, so a retried transaction (store.retry)
    is never counted twice. Label values only: queues, outcomes, codes, reasons."""

    submitted: list[tuple[str, int]] = field(default_factory=list)  # (queue, tasks created)
    # (queue, first attempt?, ms from the task's available instant to the attempt's start)
    started: list[tuple[str, bool, int]] = field(default_factory=list)
    # (queue, outcome, code or "", decision) of every attempt closed (reports and expiries)
    ended: list[tuple[str, str, str, str]] = field(default_factory=list)
    kills: list[tuple[str, str]] = field(default_factory=list)  # (queue, kill reason)
    evidence: list[tuple[str, str]] = field(default_factory=list)  # (queue, evidence reason)
    expired: list[str] = field(default_factory=list)  # queue of each lease the reaper ended
    reviews: list[tuple[str, str]] = field(default_factory=list)  # (queue, action)
    retries: list[str] = field(default_factory=list)  # queue of each ended task run again
    timed_out: list[tuple[str, str]] = field(default_factory=list)  # (queue, failure code)
    # Leases granted with the dispatch (docs/protocol.md, "Grants"): the queue of each grant
    # made; (queue, rule) of each given back unspent (declined, or never received); the
    # queue of each whose lease the reaper ended before the worker confirmed it.
    grants: list[str] = field(default_factory=list)
    grants_given_back: list[tuple[str, str]] = field(default_factory=list)
    grants_expired_unconfirmed: list[str] = field(default_factory=list)
    # (queue, "stored" or the code its refused details broke) of each progress report kept.
    progress: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Effects:
    """What the adapters must do after a transaction (``OrbitServer.apply`` does it all)."""

    terminal_tasks: list[str] = field(default_factory=list)  # wake long-poll waiters
    # Task views read in the same transaction for waited-on terminal tasks (apply_ops with
    # ``watched``): a woken long poll answers with it instead of reading the task again.
    terminal_views: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready_queues: set[str] = field(default_factory=set)  # run a dispatch pass
    cancels: list[tuple[str, str, int]] = field(default_factory=list)  # (instance, attempt, epoch)
    # Credentials revoked (or whose secret was replaced): close their worker sessions here.
    revoked_credentials: list[str] = field(default_factory=list)
    next_due_ms: int | None = None  # earliest future instant worth looking again
    # Made on first use (``counted()``): a transaction with nothing to count pays nothing.
    counts: Counted | None = None

    def due(self, at_ms: int | None) -> None:
        """Keep ``at_ms`` as the next instant worth a reaper pass if it is the earliest."""
        if at_ms is not None and (self.next_due_ms is None or at_ms < self.next_due_ms):
            self.next_due_ms = at_ms

    def counted(self) -> Counted:
        """The metrics facts of this transaction (made on first use)."""
        if self.counts is None:
            self.counts = Counted()
        return self.counts
