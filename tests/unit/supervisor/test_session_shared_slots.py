"""Several queues over the same children (credit.SlotShare), on a fake clock: the credit of
all sessions together never promises a child twice, each queue keeps one slot of its own,
a queue whose work ran out holds at most one unspent credit, and a grant that finds no
free child is declined, never run late."""

from __future__ import annotations

import random

from msgspec.structs import replace
from supervisor_session_harness import (
    CAP,
    FakeOutcome,
    credits,
    executes,
    frames,
    ok_for,
    requests,
    reservation,
    welcome,
)

from orbit_supervisor.actions import Action
from orbit_supervisor.credit import SlotShare
from orbit_supervisor.session import Phase, Session, SessionConfig
from orbit_wire.frames import (
    ClaimOp,
    DeclineOp,
    OpResult,
    Request,
    Reservation,
    Reserve,
    Response,
    Welcome,
)
from orbit_wire.ids import new_id
from orbit_wire.model import Disposition, TaskState


def sessions(count: int, workers: int, prefetch: int = 0) -> tuple[SlotShare, list[Session]]:
    share = SlotShare(workers + prefetch)
    made = []
    for n in range(count):
        cfg = SessionConfig(
            credential_id=new_id(1), credential_secret="cred-secret", instance_id=new_id(10 + n),
            instance_secret="inst-secret", queue_id=new_id(20 + n), capabilities=(CAP,),
            capacity=workers, prefetch=prefetch)
        made.append(Session(cfg, lambda: 0.5, share=share))
    return share, made


def welcomed(s: Session, now: float = 0.0, *, grants: bool = False) -> list[Action]:
    s.start(now)
    s.connected(now)
    w = welcome()
    if grants:
        w = Welcome(new_id(4), 3000, 1000, 500, 0, 256, features=("grant",))
    return s.frame_received(w, now)


def held(s: Session) -> int:
    """What a session holds of the shared slots, without the floor of one."""
    return len(s.attempts) + s.outstanding_credit + sum(
        op.count for op in (*s.queued_ops(), *s.in_flight_ops()) if isinstance(op, ClaimOp))


def test_two_queues_never_promise_one_child_twice() -> None:
    _, (a, b) = sessions(2, workers=2)
    assert credits(welcomed(a)) == 1  # one slot stays B's, whose session is not up yet
    assert credits(welcomed(b)) == 1
    # A's task starts: nothing is free for anyone until a slot is.
    res = reservation()
    (start,) = requests(a.frame_received(Reserve((res,)), 0.1))
    assert executes(a.frame_received(ok_for(start), 0.1)) == [res.attempt_id]
    assert credits(a.slots_changed(0.1)) == 0 and credits(b.slots_changed(0.1)) == 0
    assert held(a) + held(b) == 2


def test_a_busy_queue_takes_every_child_but_the_idle_queues_one() -> None:
    _, (a, b) = sessions(2, workers=4)
    welcomed(a)
    welcomed(b)
    ran = 0
    for step in range(10):  # A's credit is spent at once each time: it gets one more
        res = reservation()
        acts = a.frame_received(Reserve((res,)), step * 0.01)
        if requests(acts):
            (start,) = requests(acts)
            ran += len(executes(a.frame_received(ok_for(start), step * 0.01)))
        credits(b.slots_changed(step * 0.01))
        if a.outstanding_credit == 0:
            break
    assert a.executing == 3 and b.outstanding_credit == 1  # B keeps its one slot
    assert held(a) + held(b) == 4


def pump(s: Session, now: float) -> float:
    """Answer every request (a claim finds no work) until nothing is queued or in flight;
    the timer sends what a batch hold kept back. Returns the clock."""
    pending = requests(s.handle_timer(now))
    for _ in range(20):
        if not pending:
            if not s.queued_ops() and not s.in_flight_ops():
                return now
            now += 0.05
            pending = requests(s.handle_timer(now))
            continue
        (req,) = pending
        now += 0.01
        pending = requests(s.frame_received(ok_for(req), now))
    raise AssertionError("the session kept sending")


def test_a_queue_whose_work_ran_out_keeps_at_most_one_credit() -> None:
    _, (a, b) = sessions(2, workers=3)
    welcomed(a)
    welcomed(b)
    started = []
    for _ in range(2):
        res = reservation()
        (start,) = requests(a.frame_received(Reserve((res,)), 0.0))
        a.frame_received(ok_for(start), 0.0)
        started.append(res)
    assert a.executing == 2
    # Both finish; the claims after them find no work and become credit: at most one.
    for res in started:
        pending = requests(a.execution_finished(res.attempt_id, FakeOutcome(), 0.1))
        for req in pending:
            a.frame_received(ok_for(req), 0.1)
    now = pump(a, 0.2)
    assert a.attempts == {} and a.outstanding_credit <= 1
    # The slots A gave back go to B as its tasks arrive (its credit spent on each).
    got = 0
    for _ in range(2):
        res = reservation()
        acts = b.frame_received(Reserve((res,)), now)
        (start,) = requests(acts)
        got += credits(acts) + credits(b.frame_received(ok_for(start), now))
    assert b.executing == 2 and held(a) + held(b) <= 3
    assert got >= 1


def test_a_grant_with_no_free_child_is_declined() -> None:
    share, (a, b) = sessions(2, workers=2)
    welcomed(a, grants=True)
    welcomed(b, grants=True)
    # A server that sends more than the credit (a bug, or a child lost meanwhile): each
    # grant beyond the shared children is given back, never run late.
    grants = [replace(reservation(), lease_ms=3000) for _ in range(2)]
    acts = a.frame_received(Reserve((grants[0],), basis=2), 0.1)
    assert executes(acts) == [grants[0].attempt_id]
    acts = b.frame_received(Reserve((grants[1],), basis=2), 0.1)
    assert executes(acts) == [grants[1].attempt_id]
    extra = replace(reservation(), lease_ms=3000)
    acts = a.frame_received(Reserve((extra,), basis=2), 0.2)
    assert executes(acts) == []
    declined = [op for f in frames(acts) if isinstance(f, Request) for op in f.ops
                if isinstance(op, DeclineOp)] or [op for op in a.queued_ops()
                                                  if isinstance(op, DeclineOp)]
    assert [(d.attempt_id, d.reason) for d in declined] == [(extra.attempt_id, "OVER_CAPACITY")]
    assert a.slots_running() + b.slots_running() == share.slots


class _Server:
    """Answers a session's requests like the real server would: a claim takes tasks while
    the queue has some (each started), else becomes credit; reserve frames spend credit."""

    def __init__(self, session: Session, backlog: int) -> None:
        self.s = session
        self.backlog = backlog
        self.credit = 0
        self.inflight: Request | None = None

    def take(self, actions: list[Action]) -> None:
        for frame in frames(actions):
            if isinstance(frame, Request):
                assert self.inflight is None
                self.inflight = frame
        self.credit += credits(actions)

    def answer(self, now: float) -> list[Action]:
        req, self.inflight = self.inflight, None
        assert req is not None
        results = []
        for op in req.ops:
            if isinstance(op, ClaimOp):
                got = min(op.count, self.backlog)
                self.backlog -= got
                claimed = tuple(replace(reservation(), lease_ms=3000) for _ in range(got))
                results.append(OpResult(op.msg_id, True, claimed=claimed,
                                        credited=op.count - got))
                self.credit += op.count - got
            elif op.op == "finish":
                results.append(OpResult(op.msg_id, True, disposition=Disposition.ACCEPTED,
                                        task_state=TaskState.SUCCEEDED))
            elif op.op in ("start", "renew"):
                results.append(OpResult(op.msg_id, True, lease_ms=3000))
            else:
                results.append(OpResult(op.msg_id, True))
        return self.s.frame_received(Response(req.id, tuple(results)), now)

    def dispatch(self, now: float) -> list[Action]:
        count = min(self.credit, self.backlog)
        if count == 0:
            return []
        self.credit -= count
        self.backlog -= count
        res: tuple[Reservation, ...] = tuple(reservation() for _ in range(count))
        return self.s.frame_received(Reserve(res), now)


def _known_and_claimed(s: Session) -> int:
    """Known attempts and claimed slots; a finish in flight with a claim after it frees its
    slot for that claim (the server applies the claim only once the finish is)."""
    inflight = s.in_flight_ops()
    claimed = sum(op.count for op in (*s.queued_ops(), *inflight) if isinstance(op, ClaimOp))
    freed = 0
    if any(isinstance(op, ClaimOp) for op in inflight):
        freed = sum(1 for op in inflight if op.op == "finish"
                    and (att := s.attempts.get(op.attempt_id)) is not None
                    and att.phase is Phase.REPORTING)
    return len(s.attempts) + claimed - freed


def test_random_interleavings_never_over_promise_the_shared_slots() -> None:
    rng = random.Random(29)
    for _round in range(40):
        workers = rng.randint(2, 4)
        share, members = sessions(rng.randint(2, workers), workers)
        servers = [_Server(s, backlog=rng.randint(0, 12)) for s in members]
        running: list[tuple[int, str]] = []
        now = 0.0
        for server in servers:
            server.take(welcomed(server.s, now))
        for _step in range(300):
            now += 0.001
            n = rng.randrange(len(servers))
            server, s = servers[n], members[n]
            move = rng.random()
            acts: list[Action] = []
            if move < 0.3 and server.inflight is not None:
                acts = server.answer(now)
            elif move < 0.6:
                acts = server.dispatch(now)
            elif move < 0.8 and running:
                i, attempt_id = running.pop(rng.randrange(len(running)))
                if members[i].attempts.get(attempt_id) is not None and \
                        members[i].attempts[attempt_id].phase is Phase.RUNNING:
                    servers[i].take(members[i].execution_finished(attempt_id, FakeOutcome(),
                                                                  now))
            else:
                servers[n].backlog += rng.randint(0, 2)
                acts = s.handle_timer(now)
            server.take(acts)
            running += [(n, a) for a in executes(acts)]
            for i, other in enumerate(members):  # what the driver's nudge does
                if i != n:
                    more = other.slots_changed(now)
                    servers[i].take(more)
                    running += [(i, a) for a in executes(more)]
            # The invariant: what the server may still send, what is claimed and what is
            # known, over every queue, never exceeds the shared children.
            promised = sum(srv.credit + _known_and_claimed(m)
                           for srv, m in zip(servers, members, strict=True))
            assert promised <= share.slots, (promised, share.slots)
            assert sum(m.executing for m in members) <= share.slots
