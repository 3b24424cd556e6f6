"""``Effects``: what the adapters must do after a transaction of the use cases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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

    def due(self, at_ms: int | None) -> None:
        """Keep ``at_ms`` as the next instant worth a reaper pass if it is the earliest."""
        if at_ms is not None and (self.next_due_ms is None or at_ms < self.next_due_ms):
            self.next_due_ms = at_ms
