"""The pauses in force, kept in memory by every server (``TxContext.pauses``): each claim
narrows its worker's capabilities by them before the dispatch statement runs, and every
PENDING task's ``waiting`` fact names the pause that holds it.

The board is replaced by the pause and resume use cases here (read back in their own
transaction) and by the refresh every server runs at least once per heartbeat interval
(``PauseService.refresh``), which is how a pause taken through another replica arrives.
Nothing paused (the usual case) costs a claim one truthiness check.
"""

from __future__ import annotations

from dataclasses import replace

from ..domain.pauses import PauseSet
from .binding import WorkerBinding


class PauseBoard:
    def __init__(self) -> None:
        self.current = PauseSet()

    def narrow(self, binding: WorkerBinding) -> WorkerBinding:
        """``binding`` with only the capabilities no pause holds (itself when none does)."""
        current = self.current
        if not current:
            return binding
        caps = current.served(binding.queue_id, binding.capabilities)
        if caps is binding.capabilities:
            return binding
        return replace(binding, capabilities=tuple(caps))

    def replace(self, pauses: PauseSet) -> set[str]:
        """Take ``pauses`` as the pauses in force; the queues some pause left (resumed:
        their workers are worth a dispatch pass at once)."""
        before = self.current
        self.current = pauses
        return {key.queue_id for key in before.keys() - pauses.keys()}
