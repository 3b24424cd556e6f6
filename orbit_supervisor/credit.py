"""Credit and claim accounting: how many slots the session may offer the server (pure).

Every known attempt holds a slot, whatever its phase: reserved or starting ones will run,
running and killing ones execute, reporting ones await confirmation. So

    free slots = slots (capacity + prefetch) - known attempts - slots being replaced
                 - slots asked for by claims queued or in flight

and the credit sent is the free slots less the credit already outstanding (docs/protocol.md,
"Credit"). A finish riding in the request being built counts as confirmed for the claim at
the end of that request: the server applies the claim only once those finishes are.

Several queues (``orbit-supervise --queue A --queue B``) run one session each over the
same children, a ``SlotShare``. Each session's ledger then also counts the slots the other
sessions hold, so the credit of all sessions together never promises a child twice; and
a session keeps at most ``SHARED_CAP`` slot promised beyond its known attempts (its credit
and claims together), so a queue whose work ran out holds at most one child's worth of
unspent credit. A session that may still take work counts as holding at least one slot:
every queue keeps a slot of its own (docs/supervisor.md, "Several queues").
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SHARED_CAP", "CreditLedger", "ShareMember", "SlotShare"]

# With several queues: the slots one session may have promised beyond its known attempts.
SHARED_CAP = 1


class ShareMember(Protocol):
    """A session over shared slots: what it holds and what runs (or is starting) there."""

    def slots_held(self) -> int: ...
    def slots_running(self) -> int: ...


class SlotShare:
    """The slots (children + prefetch) of one supervisor and the sessions sharing them."""

    __slots__ = ("_members", "slots")

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._members: list[ShareMember] = []

    def join(self, member: ShareMember) -> None:
        self._members.append(member)

    @property
    def shared(self) -> bool:
        return len(self._members) > 1

    def held_elsewhere(self, me: ShareMember) -> int:
        """Slots the other sessions hold: known attempts, claims and credit, at least one
        each while it may still take work."""
        return sum(m.slots_held() for m in self._members if m is not me)

    def running_elsewhere(self, me: ShareMember) -> int:
        """Slots whose attempts the other sessions run or are starting."""
        return sum(m.slots_running() for m in self._members if m is not me)


class CreditLedger:
    """The session's credit figures; ``known`` is always the number of known attempts."""

    __slots__ = ("_member", "_share", "being_replaced", "claiming", "outstanding", "slots")

    def __init__(self, slots: int, *, share: SlotShare | None = None,
                 member: ShareMember | None = None) -> None:
        # A ledger over shared slots takes their number from the share.
        self.slots = share.slots if share is not None else slots
        self._share, self._member = share, member
        self.outstanding = 0  # credit the server holds: reservations it may still send
        self.claiming = 0  # slots asked for by claims queued or in flight
        self.being_replaced = 0  # slots whose next child is still to come

    def free(self, known: int, finishing: int = 0) -> int:
        """Slots that may be offered; ``finishing`` reporting attempts count as confirmed."""
        busy = known - finishing + self.being_replaced + self.claiming + self.elsewhere()
        return max(0, self.slots - busy)

    def elsewhere(self) -> int:
        """Slots the other sessions over the same children hold (0 for a session alone)."""
        if self._share is None or self._member is None:
            return 0
        return self._share.held_elsewhere(self._member)

    def running_elsewhere(self) -> int:
        """Slots whose attempts the other sessions run or are starting."""
        if self._share is None or self._member is None:
            return 0
        return self._share.running_elsewhere(self._member)

    @property
    def shared(self) -> bool:
        return self._share is not None and self._share.shared

    def _within_cap(self, count: int) -> int:
        if not self.shared:
            return count
        return min(count, SHARED_CAP - self.outstanding - self.claiming)

    def offer(self, known: int) -> int:
        """The credit to send now (0: none), counted as outstanding from now on."""
        grant = self._within_cap(self.free(known) - self.outstanding)
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
        return max(0, self._within_cap(self.free(known, finishing) - self.outstanding))

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
