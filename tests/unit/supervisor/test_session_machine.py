"""A hypothesis state machine drives the pure Session against a small model server.

The model server keeps the authoritative side (reservations, leases with absolute expiry
measured when it *receives* a request, receipts by msg_id) and answers requests whenever
the machine chooses, after any delay; connections drop at random moments. Invariants:

- a handler runs only after its start (or the claim that started it) was answered ok, and
  never twice;
- an execution alive at ``now`` always holds an unexpired lease on the server (the local
  expiry is never later than the server's, and the kill comes at the local expiry);
- known attempts <= 2 x capacity; a credit grant never exceeds the free slots;
- a cancel tells only a running child, and a told child is killed by the end of its
  cancel grace (or its lease) unless it ended first; the server refuses renewals of a
  cancelled attempt and a resume lists it LOST / TASK_CANCELLED, as the real one does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from msgspec.structs import replace
from supervisor_session_harness import FakeOutcome, make_session, reservation, welcome

from orbit_supervisor.actions import (
    Action,
    CancelChild,
    CloseConnection,
    Connect,
    EndRun,
    Execute,
    Kill,
    SendFrame,
)
from orbit_supervisor.session import Conn, Phase
from orbit_wire.errors import ErrorCode
from orbit_wire.frames import (
    Cancel,
    ClaimOp,
    Credit,
    DrainOp,
    FinishOp,
    OpResult,
    RenewOp,
    Report,
    Request,
    Reservation,
    Reserve,
    Response,
    ResumeEntry,
    ResumeOp,
    StartOp,
)
from orbit_wire.model import Disposition, Outcome, TaskState

CAPACITY = 2


@dataclass
class ServerAttempt:
    state: str = "RESERVED"  # RESERVED, RUNNING, DONE, RELEASED
    expires: float = 0.0
    epoch: int = 1
    cancelled: bool = False


@dataclass
class Model:
    attempts: dict[str, ServerAttempt] = field(default_factory=dict)
    receipts: dict[str, OpResult] = field(default_factory=dict)
    credit: int = 0
    backlog: int = 4  # tasks a claim can take (more come with tasks_submitted)


class SessionMachine(RuleBasedStateMachine):
    # Short time steps (advance) make short handlers, so the round-trip hold is explored.
    CPUS: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self.s = make_session(CAPACITY, shutdown_timeout=20.0, cpus=self.CPUS)
        self.now = 0.0
        self.server = Model()
        self.online = False  # a socket is open
        self.inflight: Request | None = None
        self.start_ok: set[str] = set()
        self.executed: set[str] = set()
        self.alive: set[str] = set()  # executing, not yet reported by the pool
        self.killed: set[str] = set()
        self.told: set[str] = set()  # children a cancel was passed on to
        self.finished = False
        self.pending_connect: float | None = None
        self.next_id = 0
        self.sent: list[Reservation] = []
        self.apply(self.s.start(self.now))

    # ------------------------------------------------------------ plumbing

    def apply(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case SendFrame(frame=frame):
                    if not self.online:
                        continue
                    if isinstance(frame, Credit):
                        self.server.credit += frame.credits
                        assert self.s.outstanding_credit <= self.s.free_slots(), "over-credit"
                    elif isinstance(frame, Request):
                        assert self.inflight is None, "two requests in flight"
                        self.inflight = frame
                case Execute(reservation=res):
                    assert res.attempt_id in self.start_ok, "ran before a confirmed start"
                    assert res.attempt_id not in self.executed, "ran twice"
                    self.executed.add(res.attempt_id)
                    self.alive.add(res.attempt_id)
                case CancelChild(attempt_id=attempt_id):
                    assert attempt_id in self.alive - self.killed, "told a child not running"
                    self.told.add(attempt_id)
                case Kill(attempt_id=attempt_id):
                    self.killed.add(attempt_id)
                    if attempt_id in self.alive:  # a child was signalled: report it now
                        self.apply(self.s.child_killed(attempt_id, Report(child_pid=4242, signal=9),
                                                    self.now))
                case Connect(delay=delay):
                    self.pending_connect = self.now + delay
                case CloseConnection():
                    self.drop()
                case EndRun():
                    self.finished = True

    def drop(self) -> None:
        if not self.online:
            return
        self.online = False
        self.inflight = None
        self.server.credit = 0
        for att in self.server.attempts.values():
            if att.state == "RESERVED":
                att.state = "RELEASED"
        self.apply(self.s.connection_lost(self.now, "CUT"))

    def answer(self, op: Any) -> OpResult:
        if op.msg_id in self.server.receipts:
            return self.server.receipts[op.msg_id]
        result = self._apply_op(op)
        # A replayed claim grants no credit: credit belongs to the connection that claimed.
        self.server.receipts[op.msg_id] = (replace(result, credited=0)
                                           if isinstance(op, ClaimOp) else result)
        if isinstance(op, StartOp) and result.ok:
            self.start_ok.add(op.attempt_id)  # recorded before the session sees the answer
        for res in result.claimed or ():
            self.start_ok.add(res.attempt_id)
        return result

    def answer_after(self, op: Any, earlier: list[OpResult], request: Request) -> OpResult:
        """As the server: a claim after a finish that was not answered ok claims nothing."""
        if isinstance(op, ClaimOp) and op.msg_id not in self.server.receipts and not all(
                r.ok for o, r in zip(request.ops, earlier, strict=False)
                      if isinstance(o, FinishOp)):
            result = OpResult(op.msg_id, True, claimed=(), credited=0)
            self.server.receipts[op.msg_id] = result
            return result
        return self.answer(op)

    def _apply_op(self, op: Any) -> OpResult:
        lease_ms = 300
        match op:
            case StartOp():
                att = self.server.attempts[op.attempt_id]
                if att.state != "RESERVED":
                    return OpResult(op.msg_id, False, ErrorCode.CONFLICT)
                att.state, att.expires = "RUNNING", self.now + lease_ms / 1000
                return OpResult(op.msg_id, True, lease_ms=lease_ms)
            case RenewOp():
                att = self.server.attempts[op.attempt_id]
                if att.state != "RUNNING" or self.now >= att.expires or att.cancelled:
                    return OpResult(op.msg_id, False, ErrorCode.LEASE_EXPIRED)
                att.expires = self.now + lease_ms / 1000
                return OpResult(op.msg_id, True, lease_ms=lease_ms)
            case FinishOp():
                att = self.server.attempts[op.attempt_id]
                ok = att.state == "RUNNING" and self.now < att.expires
                att.state = "DONE"
                return OpResult(op.msg_id, True, disposition=Disposition.ACCEPTED if ok
                                else Disposition.EVIDENCE_ONLY, task_state=TaskState.SUCCEEDED)
            case ResumeOp():
                entries = []
                for ref in op.attempts:
                    att = self.server.attempts[ref.attempt_id]
                    if att.state == "RUNNING" and att.cancelled:
                        entries.append(ResumeEntry(ref.attempt_id, "LOST",
                                                   reason="TASK_CANCELLED"))
                    elif att.state == "RUNNING" and self.now < att.expires:
                        entries.append(ResumeEntry(ref.attempt_id, "RUNNING",
                                                   int((att.expires - self.now) * 1000)))
                    else:
                        entries.append(ResumeEntry(ref.attempt_id, "LOST", reason="EXPIRED"))
                return OpResult(op.msg_id, True, attempts=tuple(entries))
            case DrainOp():
                return OpResult(op.msg_id, True)
            case ClaimOp():
                taken = min(op.count, self.server.backlog)
                self.server.backlog -= taken
                claimed = []
                for _ in range(taken):
                    self.next_id += 1
                    res = replace(reservation(lease_ttl_ms=300,
                                              cancel_grace_ms=_grace(self.next_id)),
                                  attempt_id=f"{self.next_id:032x}", lease_ms=lease_ms)
                    self.server.attempts[res.attempt_id] = ServerAttempt(
                        "RUNNING", self.now + lease_ms / 1000)
                    claimed.append(res)
                self.server.credit += op.count - taken
                return OpResult(op.msg_id, True, claimed=tuple(claimed),
                                credited=op.count - taken)
        raise AssertionError(op)

    # ------------------------------------------------------------ rules

    @precondition(lambda self: not self.finished)
    @rule(dt=st.sampled_from([0.0005, 0.002, 0.005, 0.05, 0.1, 0.2, 0.5]))
    def advance(self, dt: float) -> None:
        target = self.now + dt
        for _ in range(1000):  # bounded: timers are at least microseconds apart
            when = self.s.next_timer()
            if self.pending_connect is not None and (when is None
                                                     or self.pending_connect < when):
                when = self.pending_connect
            if when is None or when > target:
                break
            self.now = max(self.now, when)
            if self.pending_connect is not None and self.pending_connect <= self.now:
                self.pending_connect = None
                self.online = True
                self.apply(self.s.connected(self.now))
                if self.online:
                    self.apply(self.s.frame_received(welcome(300, 900), self.now))
            self.apply(self.s.handle_timer(self.now))
            if self.finished:
                return
        else:
            raise AssertionError("a timer fires without progress (the driver would spin)")
        self.now = target

    @precondition(lambda self: not self.finished and self.inflight is not None)
    @rule()
    def server_answers(self) -> None:
        request = self.inflight
        assert request is not None
        self.inflight = None
        results: list[OpResult] = []
        for op in request.ops:
            results.append(self.answer_after(op, results, request))
        self.apply(self.s.frame_received(Response(request.id, tuple(results)), self.now))

    @precondition(lambda self: not self.finished and self.inflight is not None)
    @rule(data=st.data())
    def server_answers_some_unavailable(self, data: st.DataObject) -> None:
        """Transient per-op errors are not stored as receipts; the op comes again later."""
        request = self.inflight
        assert request is not None
        self.inflight = None
        results = []
        for op in request.ops:
            if op.msg_id not in self.server.receipts and data.draw(st.booleans()):
                results.append(OpResult(op.msg_id, False, ErrorCode.UNAVAILABLE))
            else:
                results.append(self.answer_after(op, results, request))
        self.apply(self.s.frame_received(Response(request.id, tuple(results)), self.now))

    @precondition(lambda self: not self.finished and self.inflight is not None)
    @rule(data=st.data())
    def server_applies_but_the_answer_says_unavailable(self, data: st.DataObject) -> None:
        """The commit happened but the worker hears UNAVAILABLE (a database connection lost
        during COMMIT): only a resend with the same msg_id learns what was applied."""
        request = self.inflight
        assert request is not None
        self.inflight = None
        applied: list[OpResult] = []
        heard: list[OpResult] = []
        for op in request.ops:
            applied.append(self.answer_after(op, applied, request))
            heard.append(OpResult(op.msg_id, False, ErrorCode.UNAVAILABLE)
                         if data.draw(st.booleans()) else applied[-1])
        self.apply(self.s.frame_received(Response(request.id, tuple(heard)), self.now))

    @precondition(lambda self: not self.finished and self.online and bool(self.sent)
                  and self.server.credit > 0)
    @rule(data=st.data())
    def server_repeats_a_reservation(self, data: st.DataObject) -> None:
        """A duplicate delivery of an old reservation only reconciles. Like every
        reservation the server sends, it spends a credit (docs/protocol.md)."""
        self.server.credit -= 1
        res = data.draw(st.sampled_from(self.sent))
        self.apply(self.s.frame_received(Reserve((res,)), self.now))

    @precondition(lambda self: not self.finished and self.online and self.server.credit > 0)
    @rule(n=st.integers(1, 3))
    def server_reserves(self, n: int) -> None:
        n = min(n, self.server.credit)
        self.server.credit -= n
        batch = []
        for _ in range(n):
            # Deterministic IDs, so hypothesis can replay and shrink a failure.
            self.next_id += 1
            res = replace(reservation(lease_ttl_ms=300, cancel_grace_ms=_grace(self.next_id)),
                          attempt_id=f"{self.next_id:032x}")
            self.server.attempts[res.attempt_id] = ServerAttempt()
            batch.append(res)
            self.sent.append(res)
        self.apply(self.s.frame_received(Reserve(tuple(batch)), self.now))
        assert len(self.s.attempts) <= 2 * CAPACITY

    @rule(n=st.integers(1, 3))
    def tasks_submitted(self, n: int) -> None:
        self.server.backlog += n

    @precondition(lambda self: not self.finished and self.online)
    @rule()
    def cut(self) -> None:
        self.drop()

    @precondition(lambda self: not self.finished and bool(self.alive))
    @rule(data=st.data())
    def child_finishes(self, data: st.DataObject) -> None:
        attempt_id = data.draw(st.sampled_from(sorted(self.alive)))
        self.alive.discard(attempt_id)
        report = Report(child_pid=4242, exit_code=0, cpu_ms=data.draw(st.integers(0, 20)))
        outcome = (FakeOutcome(Outcome.UNKNOWN, "LEASE_LOST", result_json=None, report=report)
                   if attempt_id in self.killed else FakeOutcome(report=report))
        self.apply(self.s.execution_finished(attempt_id, outcome, self.now))

    @precondition(lambda self: not self.finished and self.online and bool(self.alive))
    @rule(data=st.data())
    def cancel_push(self, data: st.DataObject) -> None:
        attempt_id = data.draw(st.sampled_from(sorted(self.alive)))
        self.server.attempts[attempt_id].cancelled = True
        self.apply(self.s.frame_received(Cancel(attempt_id, 1, "TASK_CANCELLED"), self.now))

    @precondition(lambda self: not self.finished)
    @rule(force=st.booleans())
    def stop(self, force: bool) -> None:
        self.apply(self.s.request_stop(self.now, force=force))

    @rule(replacing=st.integers(0, CAPACITY))
    def replacing(self, replacing: int) -> None:
        self.apply(self.s.slots_being_replaced(replacing, self.now))

    # ------------------------------------------------------------ invariants

    @invariant()
    def running_only_under_a_server_lease(self) -> None:
        for attempt_id in self.alive - self.killed:
            server = self.server.attempts[attempt_id]
            assert server.state == "RUNNING" and self.now < server.expires, (
                f"{attempt_id} runs at {self.now} past the server's lease {server.expires}")
            local = self.s.attempts[attempt_id].lease.expires_at
            assert local is not None and local <= server.expires + 1e-9

    @invariant()
    def a_told_child_is_killed_by_the_end_of_its_grace(self) -> None:
        """A child that ignores a cancel runs no longer than its grace: once the timer
        reached the grace's end it was killed (the lease bounds it too, see above)."""
        for attempt_id in (self.told & self.alive) - self.killed:
            att = self.s.attempts[attempt_id]
            assert att.phase is Phase.RUNNING and att.cancel_at is not None, att
            assert self.now < att.cancel_at, f"{attempt_id} outlived its cancel grace"
            assert not att.lease.renewal_due(self.now), "a cancelled attempt renews"

    @invariant()
    def never_more_executions_than_slots(self) -> None:
        assert len(self.alive) <= CAPACITY

    @invariant()
    def a_killed_child_is_reported_before_its_reap(self) -> None:
        """A signalled child's attempt keeps its slot until the reap, and its kill report is
        queued, in flight or answered meanwhile (never waiting for the reap)."""
        if self.finished:
            return
        outstanding = {op.msg_id for op in (*self.s.queued_ops(), *self.s.in_flight_ops())}
        for attempt_id in self.alive & self.killed:
            att = self.s.attempts.get(attempt_id)
            assert att is not None and att.kill_msg is not None, attempt_id
            assert att.kill_msg in outstanding or att.kill_confirmed, attempt_id

    @invariant()
    def no_started_attempt_is_forgotten(self) -> None:
        """An attempt the server started for this worker (start or claim) is known to the
        session, or the op that started it is still to be (re)sent: its answer says which."""
        if self.finished:
            return
        outstanding = {op.msg_id for op in (*self.s.queued_ops(), *self.s.in_flight_ops())}
        for msg_id, result in self.server.receipts.items():
            started = [r.attempt_id for r in result.claimed or ()]
            for attempt_id in started:
                att = self.server.attempts[attempt_id]
                if att.state == "RUNNING" and self.now < att.expires:
                    assert attempt_id in self.s.attempts or msg_id in outstanding, (
                        f"{attempt_id}, started by {msg_id}, was forgotten")

    @invariant()
    def phase_counts_match_the_attempts(self) -> None:
        """The incrementally kept counts the slot arithmetic uses equal a fresh count."""
        fresh = Counter(att.phase for att in self.s.attempts.values())
        assert self.s.phase_counts() == {phase: fresh[phase] for phase in Phase}

    @invariant()
    def a_queued_renewal_belongs_to_a_renewing_running_attempt(self) -> None:
        """What lets a finish skip looking for queued ops of its attempt unless renewing."""
        for op in self.s.queued_ops():
            if isinstance(op, RenewOp):
                att = self.s.attempts.get(op.attempt_id)
                # A renewal in flight when its attempt was killed is queued again for the
                # resend when the connection drops.
                assert att is not None and (att.phase is Phase.KILLING or (
                    att.phase is Phase.RUNNING and att.lease.renewing)), att
            if isinstance(op, StartOp):
                att = self.s.attempts.get(op.attempt_id)
                assert att is not None and att.phase is Phase.STARTING

    @invariant()
    def next_timer_is_the_earliest_lease_instant(self) -> None:
        """The timer looks at running attempts only; none of the others has a lease due."""
        if self.finished:
            return
        due = [d for att in self.s.attempts.values() if att.phase is Phase.RUNNING
               and (d := att.lease.deadline()) is not None]
        timer = self.s.next_timer()
        if due:
            assert timer is not None and timer <= min(due)

    @invariant()
    def bounded_known_attempts(self) -> None:
        assert len(self.s.attempts) <= 2 * CAPACITY
        assert self.s.outstanding_credit <= CAPACITY

    @invariant()
    def done_means_done(self) -> None:
        if self.finished:
            assert self.s.conn is Conn.DONE and self.s.next_timer() is None


def _grace(n: int) -> int:
    """Every other attempt has a cancel grace (shorter and longer than its 300 ms lease's
    renewal interval); the others are killed at once on a cancel, as with a grace of 0."""
    return (0, 150, 0, 400)[n % 4]


class OversubscribedSessionMachine(SessionMachine):
    # cpus=0: any running handler that reported CPU time makes a queued start or finish wait
    # for the next finish, the oversubscription hold at its most frequent.
    CPUS = 0


MACHINE_SETTINGS = settings(
    max_examples=200, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSessionMachine = SessionMachine.TestCase
TestSessionMachine.settings = MACHINE_SETTINGS
TestOversubscribedSessionMachine = OversubscribedSessionMachine.TestCase
TestOversubscribedSessionMachine.settings = MACHINE_SETTINGS
