"""Credit and claim accounting alone (credit.py; the session's use of it:
test_session.py, test_session_claim.py, and the machine's over-credit invariant)."""

from __future__ import annotations

from orbit_supervisor.credit import CreditLedger


def test_every_known_attempt_and_every_slot_being_replaced_holds_a_slot() -> None:
    ledger = CreditLedger(slots=4)
    assert ledger.free(known=1) == 3
    ledger.being_replaced = 2
    assert ledger.free(known=1) == 1
    assert ledger.free(known=5) == 0  # never negative


def test_credit_offered_is_what_is_free_less_what_is_outstanding() -> None:
    ledger = CreditLedger(slots=3)
    assert ledger.offer(known=0) == 3
    assert ledger.offer(known=0) == 0  # all of it is outstanding already
    ledger.reservation_received()
    assert ledger.offer(known=1) == 0  # the reservation took the slot its credit offered
    ledger.connection_lost()
    assert ledger.offer(known=1) == 2


def test_a_claim_counts_its_finishes_as_confirmed_and_keeps_its_slots_until_answered() -> None:
    ledger = CreditLedger(slots=2)
    assert ledger.claimable(known=2, finishing=0) == 0  # no finish: nothing to refill
    assert ledger.claimable(known=2, finishing=2) == 2
    ledger.claim_sent(2)
    assert ledger.free(known=0) == 0  # the claimed slots wait for the claim's answer
    ledger.claim_answered(2, credited=1)  # one task claimed, one slot became credit
    assert (ledger.claiming, ledger.outstanding) == (0, 1)
