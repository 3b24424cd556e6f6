"""Credit and claim accounting: how many slots the session may offer the server (pure).

Every known attempt holds a slot, whatever its phase: reserved or starting ones will run,
running and killing ones execute, reporting ones await confirmation. So

    free slots = slots (capacity + prefetch) - known attempts - slots being replaced
                 - slots asked for by claims queued or in flight

and the credit sent is the free slots less the credit already outstanding (docs/protocol.md,
"Credit"). A finish riding in the request being built counts as confirmed for the claim at
the end of that request: the server applies the claim only once those finishes are.
"""

from __future__ import annotations

__all__ = ["CreditLedger"]


class CreditLedger:
    """The session's credit figures; ``known`` is always the number of known attempts."""

    __slots__ = ("being_replaced", "claiming", "outstanding", "slots")

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.outstanding = 0  # credit the server holds: reservations it may still send
        self.claiming = 0  # slots asked for by claims queued or in flight
        self.being_replaced = 0  # slots whose next child is still to come

    def free(self, known: int, finishing: int = 0) -> int:
        """Slots that may be offered; ``finishing`` reporting attempts count as confirmed."""
        busy = known - finishing + self.being_replaced + self.claiming
        return max(0, self.slots - busy)

    def offer(self, known: int) -> int:
        """The credit to send now (0: none), counted as outstanding from now on."""
        grant = self.free(known) - self.outstanding
        if grant <= 0:
            return 0
        self.outstanding += grant
        return grant

    def reservation_received(self) -> None:
        """The server spent one credit on a reservation (a duplicate one too)."""
        self.outstanding = max(0, self.outstanding - 1)

    def claimable(self, known: int, finishing: int) -> int:
        """Slots a claim after ``finishing`` finishes may fill (0 without finishes)."""
        if not finishing:
            return 0
        return max(0, self.free(known, finishing) - self.outstanding)

    def claim_sent(self, count: int) -> None:
        self.claiming += count

    def claim_answered(self, count: int, credited: int) -> None:
        """A claim was answered for good: its slots are claimed no more, and those the server
        could not fill became ``credited`` credit."""
        self.claiming = max(0, self.claiming - count)
        self.outstanding += credited

    def connection_lost(self) -> None:
        """Credit belongs to a connection: none is outstanding on the next."""
        self.outstanding = 0
