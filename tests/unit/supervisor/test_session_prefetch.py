"""Prefetch (docs/supervisor.md "Prefetch"): with ``prefetch`` N the session offers and
starts N attempts beyond its children; each runs (Execute: the pool keeps it until a child
is free) only after its start was confirmed, its lease is renewed while it waits, and a
lost lease kills it like any running attempt. Off (0) by default, and never above the
capacity, so known attempts stay within the protocol's 2 x capacity."""

from __future__ import annotations

import pytest
from supervisor_session_harness import (
    FakeOutcome,
    credits,
    executes,
    kills,
    kinds,
    make_session,
    ok_for,
    ready,
    requests,
    reservation,
    run_one,
)

from orbit_supervisor.options import OptionError, SupervisorOptions
from orbit_wire.frames import ClaimOp, RenewOp, Reserve
from orbit_wire.ids import new_id


def test_without_prefetch_the_credit_is_the_children() -> None:
    _s, acts = ready(capacity=2)
    assert credits(acts) == 2


def test_prefetched_attempts_are_offered_started_and_run_beyond_the_children() -> None:
    s, acts = ready(capacity=1, prefetch=1)
    assert credits(acts) == 2
    a, b = reservation(), reservation()
    (req,) = requests(s.frame_received(Reserve((a, b)), 0.0))
    assert kinds(req) == ["start", "start"]  # both started although one child exists
    acts = s.frame_received(ok_for(req), 0.01)
    # Both are handed to the pool: the second waits there for the child the first holds.
    assert executes(acts) == [a.attempt_id, b.attempt_id]
    assert s.executing == 2 and s.free_slots() == 0 and len(s.attempts) <= 2 * 1


def test_a_start_goes_out_only_after_its_start_is_confirmed() -> None:
    s, _ = ready(capacity=1, prefetch=1)
    res = reservation()
    acts = s.frame_received(Reserve((res,)), 0.0)
    assert executes(acts) == []  # reserved, start in flight: nothing runs yet
    (req,) = requests(acts)
    assert executes(s.frame_received(ok_for(req), 0.01)) == [res.attempt_id]


def test_a_waiting_prefetched_attempt_keeps_its_lease_renewed() -> None:
    s, _ = ready(capacity=1, prefetch=1)
    first, waiting = run_one(s, 0.0, lease_ms=3000), run_one(s, 0.0, lease_ms=3000)
    (req,) = requests(s.handle_timer(2.0))  # two thirds into both leases
    renewed = {op.attempt_id for op in req.ops if isinstance(op, RenewOp)}
    assert renewed == {first.attempt_id, waiting.attempt_id}
    s.frame_received(ok_for(req, 3000), 2.01)
    assert s.attempts[waiting.attempt_id].lease.expires_at == pytest.approx(5.0)


def test_a_prefetched_attempt_whose_lease_runs_out_is_killed() -> None:
    s, _ = ready(capacity=1, prefetch=1)
    run_one(s, 0.0, lease_ms=3000)
    waiting = run_one(s, 0.0, lease_ms=3000)
    s.handle_timer(2.0)  # the renewals go out and are never answered
    acts = s.handle_timer(3.0)
    assert waiting.attempt_id in [k.attempt_id for k in kills(acts)]


def test_a_finish_claims_for_the_prefetch_too() -> None:
    s, _ = ready(capacity=2, prefetch=2)
    running = [run_one(s, 0.0) for _ in range(4)]
    assert s.outstanding_credit == 0 and s.free_slots() == 0
    (req,) = requests(s.execution_finished(running[0].attempt_id, FakeOutcome(), 0.5))
    claim = req.ops[-1]
    assert kinds(req) == ["finish", "claim"]
    assert isinstance(claim, ClaimOp) and claim.count == 1  # the slot it frees, refilled


@pytest.mark.parametrize("prefetch", [-1, 3])
def test_a_prefetch_outside_zero_to_the_capacity_is_refused(prefetch: int) -> None:
    with pytest.raises(ValueError, match="prefetch"):
        make_session(capacity=2, prefetch=prefetch)
    with pytest.raises(OptionError, match=r"prefetch must be an integer in \[0, 2\]"):
        SupervisorOptions(queue_ids=(new_id(3),), workers=2, prefetch=prefetch)
