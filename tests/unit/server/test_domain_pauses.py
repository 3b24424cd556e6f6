"""The pause rules (domain/pauses.py): what a queue's, a capability's and a capability
version's pause hold, the capabilities a claim keeps, the waiting fact, and the refusals."""

from __future__ import annotations

import pytest

from orbit_server.domain.pauses import (
    Pause,
    PauseKey,
    PauseSet,
    check_pause_reason,
    pause_key,
    paused_fact,
)
from orbit_server.services.binding import WorkerBinding
from orbit_server.services.pause_board import PauseBoard
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Capability

Q, OTHER = "a" * 32, "b" * 32
A1, A2, B1 = Capability("a", "v1", "p1"), Capability("a", "v2", "p1"), Capability("b", "v1", "p1")


def _pause(key: PauseKey, at: int = 10) -> Pause:
    return Pause(key, "why", "operator:x", at)


def test_each_scope_holds_what_it_names_and_nothing_else() -> None:
    queue = PauseSet([_pause(PauseKey(Q))])
    assert queue.served(Q, (A1, A2, B1)) == ()
    assert queue.served(OTHER, (A1, B1)) == (A1, B1)
    handler = PauseSet([_pause(PauseKey(Q, "a"))])
    assert handler.served(Q, (A1, A2, B1)) == (B1,)
    version = PauseSet([_pause(PauseKey(Q, "a", "v1"))])
    assert version.served(Q, (A1, A2, B1)) == (A2, B1)
    assert version.pause_of(Q, A2) is None and version.pause_of(Q, A1) is not None


def test_nothing_paused_answers_the_same_capabilities() -> None:
    caps = (A1, B1)
    assert not PauseSet()
    assert PauseSet().served(Q, caps) is caps
    assert PauseSet([_pause(PauseKey(Q, "z"))]).served(Q, caps) is caps
    binding = WorkerBinding("i" * 32, "c" * 32, Q, caps)
    board = PauseBoard()
    assert board.narrow(binding) is binding
    board.replace(PauseSet([_pause(PauseKey(Q, "a"))]))
    assert board.narrow(binding).capabilities == (B1,)


def test_the_widest_pause_is_named_and_a_resume_reports_its_queue() -> None:
    both = PauseSet([_pause(PauseKey(Q, "a", "v1"), 5), _pause(PauseKey(Q), 7)])
    held = both.pause_of(Q, A1)
    assert held is not None and held.key.scope == "queue"
    fact = paused_fact(held, A1, created_at_ms=3)
    assert fact["reason"] == "PAUSED" and fact["since"] == 7
    assert fact["pause"] == {"scope": "queue", "reason": "why", "paused_by": "operator:x"}
    board = PauseBoard()
    assert board.replace(both) == set()
    assert board.replace(PauseSet([_pause(PauseKey(Q, "a", "v1"))])) == {Q}


@pytest.mark.parametrize(("handler", "version"), [
    (None, "v1"), ("bad name!", None), ("a", "x" * 200)])
def test_a_bad_key_is_refused(handler: str | None, version: str | None) -> None:
    with pytest.raises(OrbitError) as caught:
        pause_key(Q, handler, version)
    assert caught.value.code is ErrorCode.BAD_REQUEST


def test_a_pause_needs_a_reason_and_a_resume_may_give_one() -> None:
    for bad in (None, "", 5, "x" * 1025):
        with pytest.raises(OrbitError):
            check_pause_reason(bad, required=True)
    assert check_pause_reason(None, required=False) is None
    assert check_pause_reason("fixed", required=False) == "fixed"
