"""Leases granted with the dispatch (docs/protocol.md, "Grants"), on a fake clock: a granted
reservation runs at once with its lease counted from the instant this side sent the frame
the server names as its basis; one that cannot run is declined, never dropped; a reconnect's
resume goes out even empty."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from supervisor_session_harness import (
    FakeOutcome,
    events,
    executes,
    frames,
    kinds,
    make_session,
    ok_for,
    requests,
    reservation,
)

from orbit_supervisor.actions import Action
from orbit_supervisor.session import Session
from orbit_wire.errors import ErrorCode
from orbit_wire.frames import (
    Credit,
    DeclineOp,
    Heartbeat,
    Hello,
    OpResult,
    Reservation,
    Reserve,
    Response,
    Welcome,
)
from orbit_wire.ids import new_id
from orbit_wire.model import Capability


def granting_welcome() -> Welcome:
    return Welcome(new_id(4), 3000, 1000, 500, 0, 256, features=("grant",))


def granting(capacity: int = 2, **kw: object) -> tuple[Session, list[Action]]:
    """A session welcomed with grants at t=0: hello is its frame 1."""
    s = make_session(capacity, **kw)  # type: ignore[arg-type]
    s.start(0.0)
    (hello,) = frames(s.connected(0.0))
    assert isinstance(hello, Hello) and hello.features == ("grant",)
    return s, s.frame_received(granting_welcome(), 0.0)


def granted(lease_ms: int = 3000, **kw: object) -> Reservation:
    return replace(reservation(**kw), lease_ms=lease_ms)  # type: ignore[arg-type]


def declines(actions: list[Action]) -> list[DeclineOp]:
    return [op for req in requests(actions) for op in req.ops if isinstance(op, DeclineOp)]


def test_a_grant_runs_at_once_with_its_lease_counted_from_the_basis_frame() -> None:
    s, acts = granting(capacity=2)
    (credit,) = frames(acts)  # frame 2, sent at 0.0: no resume on a first connection
    assert isinstance(credit, Credit) and credit.credits == 2
    s.handle_timer(1.0)  # a heartbeat: frame 3, sent at 1.0
    res = granted(lease_ms=3000)
    acts = s.frame_received(Reserve((res,), basis=3), 1.4)
    assert executes(acts) == [res.attempt_id]  # no start request
    assert requests(acts) == []
    assert s.attempts[res.attempt_id].lease.expires_at == 1.0 + 3.0  # from frame 3's send
    assert s.started == 1


def test_the_basis_names_an_earlier_frame_and_the_lease_counts_from_it() -> None:
    s, _ = granting()
    s.handle_timer(1.0)  # frame 3 at 1.0
    s.handle_timer(2.0)  # frame 4 at 2.0
    res = granted(lease_ms=3000)
    s.frame_received(Reserve((res,), basis=2), 2.5)  # the server had read only 2
    assert s.attempts[res.attempt_id].lease.expires_at == 0.0 + 3.0


def test_a_grant_already_expired_is_declined_and_never_run() -> None:
    s, _ = granting()
    res = granted(lease_ms=1000)
    acts = s.frame_received(Reserve((res,), basis=2), 1.5)  # frame 2 went at 0.0
    assert executes(acts) == [] and res.attempt_id not in s.attempts
    (decline,) = declines(acts)
    assert (decline.attempt_id, decline.epoch, decline.reason) == (res.attempt_id, 1, "EXPIRED")
    assert ("grant_declined", "EXPIRED") in events(acts) and s.declined_grants == 1


def test_a_basis_that_names_no_frame_sent_is_declined() -> None:
    s, _ = granting()
    acts = s.frame_received(Reserve((granted(),), basis=9), 0.1)  # 2 frames sent so far
    assert [d.reason for d in declines(acts)] == ["EXPIRED"]


def test_grants_beyond_the_bound_or_for_an_unknown_capability_are_declined() -> None:
    s, _ = granting(capacity=1)
    stranger = granted(capability=Capability("other", "v1", "v1"))
    acts = s.frame_received(Reserve((stranger,), basis=2), 0.1)
    assert [d.reason for d in declines(acts)] == ["UNKNOWN_CAPABILITY"]
    s2, _ = granting(capacity=1)
    first, second, third = granted(), granted(), granted()
    acts = s2.frame_received(Reserve((first, second, third), basis=2), 0.1)
    assert executes(acts) == [first.attempt_id, second.attempt_id]  # 2 x capacity known
    assert [d.attempt_id for d in declines(acts)] == [third.attempt_id]


def test_a_grant_after_the_drain_was_answered_is_declined() -> None:
    # (The server sends none: a drain's answer waits for a claim in flight. A worker still
    # running its last handler declines one anyway.)
    s, _ = granting()
    running = granted(lease_ms=10_000)
    s.frame_received(Reserve((running,), basis=2), 0.5)
    (req,) = requests(s.request_stop(1.0))
    assert kinds(req) == ["drain"]
    s.frame_received(ok_for(req), 1.1)
    acts = s.frame_received(Reserve((granted(lease_ms=10_000),), basis=2), 1.2)
    assert [d.reason for d in declines(acts)] == ["DRAINING"]
    assert list(s.attempts) == [running.attempt_id]


def test_a_decline_whose_answer_failed_retryably_goes_again_with_its_msg_id() -> None:
    s, _ = granting()
    acts = s.frame_received(Reserve((granted(lease_ms=100),), basis=2), 1.0)
    (req,) = requests(acts)
    (decline,) = req.ops
    failed = Response(req.id, (OpResult(decline.msg_id, False, ErrorCode.UNAVAILABLE, "x"),))
    (again,) = requests(s.frame_received(failed, 1.1))
    assert again.ops == (decline,)
    refused = Response(again.id, (OpResult(decline.msg_id, False, ErrorCode.CONFLICT, "x"),))
    assert requests(s.frame_received(refused, 1.2)) == []  # released already: done


def test_a_reconnect_resumes_even_with_nothing_to_resume() -> None:
    s, _ = granting()
    s.connection_lost(1.0, "test")
    s.connected(1.5)
    (req,) = requests(s.frame_received(granting_welcome(), 1.6))
    assert kinds(req) == ["resume"] and req.ops[0].attempts == ()  # type: ignore[union-attr]


def test_a_server_that_grants_nothing_keeps_the_start_round_trip() -> None:
    s = make_session(2)
    s.start(0.0)
    s.connected(0.0)
    s.frame_received(Welcome(new_id(4), 3000, 1000, 500, 0, 256), 0.0)  # no features
    res = reservation()
    (req,) = requests(s.frame_received(Reserve((res,)), 0.1))
    assert kinds(req) == ["start"]


def test_a_granted_attempt_finishes_like_any_other() -> None:
    s, _ = granting()
    res = granted()
    s.frame_received(Reserve((res,), basis=2), 0.1)
    (req,) = requests(s.execution_finished(res.attempt_id, FakeOutcome(), 0.2))
    assert kinds(req)[0] == "finish"


# ------------------------------------------------------------------ the property

@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0.002, 2.0), st.floats(0.0, 0.5)), min_size=1,
                max_size=8),
       st.integers(1, 10), st.floats(0.0, 1.0), st.floats(0.0, 0.3), st.integers(50, 5000))
def test_the_local_expiry_is_never_later_than_the_servers(
        sends: list[tuple[float, float]], read: int, loop_lag: float, grant_delay: float,
        lease_ms: int) -> None:
    """Frames go out at increasing instants (heartbeats here), each reaching the server
    after its own delay, in order (a WebSocket is a stream); the server grants after reading
    ``read`` of them, its transaction starting a lag after that read; the reserve frame
    reaches the worker later still. Whatever the delays, a grant the worker runs expires
    locally no later than on the server (grant instant + lease_ms): frame ``basis`` left the
    worker before the server read it."""
    s = make_session(4)
    s.start(0.0)
    s.connected(0.0)  # frame 1, the hello, at 0.0
    fast = Welcome(new_id(4), 60_000, 1, 500, 0, 256, features=("grant",))
    s.frame_received(fast, 0.0)  # frame 2, the credit, at 0.0
    sent_at, arrivals = [0.0, 0.0], [0.0, 0.0]
    now = 0.0
    for gap, delay in sends:
        now += gap
        sent = [f for f in frames(s.handle_timer(now)) if isinstance(f, Heartbeat)]
        assert len(sent) == 1  # one more numbered frame, queued at ``now``
        sent_at.append(now)
        arrivals.append(max(arrivals[-1], now + delay))
    basis = min(len(arrivals), read)
    granted_at = arrivals[basis - 1] + loop_lag  # the transaction's now
    server_expiry = granted_at + lease_ms / 1000
    res = granted(lease_ms=lease_ms, lease_ttl_ms=lease_ms)
    arrive = max(now, granted_at + grant_delay)
    s.frame_received(Reserve((res,), basis=basis), arrive)
    att = s.attempts.get(res.attempt_id)
    local_expiry = sent_at[basis - 1] + lease_ms / 1000
    if att is not None:
        assert att.lease.expires_at == local_expiry <= server_expiry
        assert arrive < local_expiry
    else:  # declined exactly when it had run out on the worker's clock already
        assert s.declined_grants == 1 and arrive >= local_expiry


def test_heartbeats_are_numbered_frames_too() -> None:
    s, _ = granting()
    acts = s.handle_timer(1.0)
    assert [type(f) for f in frames(acts)] == [Heartbeat]
    res = granted(lease_ms=2000)
    s.frame_received(Reserve((res,), basis=3), 1.2)
    assert s.attempts[res.attempt_id].lease.expires_at == 3.0


def test_a_decline_in_flight_at_a_cut_goes_again_with_its_msg_id_after_the_resume() -> None:
    s, _ = granting()
    (req,) = requests(s.frame_received(Reserve((granted(lease_ms=100),), basis=2), 1.0))
    (decline,) = req.ops
    assert isinstance(decline, DeclineOp)
    s.connection_lost(1.1, "cut")
    s.connected(1.2)
    (resume,) = requests(s.frame_received(granting_welcome(), 1.3))
    assert kinds(resume) == ["resume"]
    (again,) = requests(s.frame_received(ok_for(resume), 1.4))
    assert again.ops == (decline,)  # the same msg_id: the server's receipt answers it once
