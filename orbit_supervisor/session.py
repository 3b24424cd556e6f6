"""The supervisor's protocol session as a sans-I/O state machine (pure: no I/O, no clock).

Everything that decides *when* a handler may run, when its lease is lost and what is sent
to the server lives here; the driver (app.py + connection.py) only moves bytes, runs
children and re-arms one timer. Each input method takes ``now`` (monotonic seconds) and
returns the list of actions (actions.py) the driver must perform, in order:

    start(now)                          first call: asks to connect
    connected(now) / connect_failed()   outcome of a Connect action
    frame_received(frame, now)          every decoded server frame
    connection_lost(now, reason)        the socket closed (once per connection)
    execution_finished(attempt, ...)    the child pool's outcome for an Execute action
    kill_sent(attempt, report, now)     a Kill action signalled a child: what was known then
    loop_lag(seconds)                   how late the driver's loop ran a timer (a sample)
    slots_being_replaced(n, now)        slots whose next child is still to come
    request_stop(now, force=False)      drain (force: take the shutdown-timeout path now)
    handle_timer(now)                   at or after ``next_timer()``

Rules it keeps (docs/protocol.md, docs/supervisor.md):

- hello → welcome → one ``resume`` request with every started attempt → only then credit.
- A handler runs (Execute) only after ``start`` (or the ``claim`` that started it) answered
  ok, at most once per attempt.
- One control request in flight; queued operations go out together in the next request
  (≤ max_batch_ops); at most one renewal per attempt is ever queued. A request of starts
  and finishes only may wait for more finishes (batching.py).
- Local lease expiry = send time of the granting request + lease_ms - the margin
  (lease.py, margin.py); at expiry or on a stale/expired renewal answer the child is killed
  at once, and its report (``kill_sent``) goes out at once, never held for a batch; the
  reap's facts follow in the same finish if it was not sent yet, else in a second finish of
  the attempt (the server keeps the facts it lacks).
- A ``cancel`` push for a running attempt tells its child (CancelChild) and stops renewing;
  the Kill (TASK_CANCELLED) follows at the end of the reservation's cancel grace, or at once
  for a grace of 0. The lease's expiry still kills first if it comes earlier. The finish
  says which ended the child: ``report.ended_by`` COOPERATIVE (it ended by itself) or KILLED.
- Credit = free slots - outstanding credit, free slots = capacity + prefetch - executing -
  reserved not yet running - results not yet confirmed - slots being replaced - slots a
  ``claim`` in flight asks for. Known attempts stay <= 2 x capacity; reservations beyond
  that bound are dropped (the server releases them).
- Prefetch (opt-in, 0 by default, at most capacity): that many attempts beyond the children
  may be started. Such an attempt is RUNNING here (its lease held and renewed, its lease
  timer armed) while its Execute waits in the pool for a free child; a kill before then
  cancels the wait, and the handler never runs.
- A request that reports finishes ends with a ``claim`` for the slots they free: the server
  reserves and starts tasks for them in the same transaction, so a busy slot is refilled
  in one round trip (no reserve frame, no separate start); unfilled slots become credit.
- On reconnect: same identity, RESERVED attempts forgotten (the server released them),
  pending start/renew/finish/claim resent with their original msg_ids after the resume.

Each attempt is one record (attempts.py) with its state tables; the session moves it by
events (``att.fire(Event.KILLED)``), and an event its phase has no row for raises.

The session composes pure parts: the attempt table with its phase index (attempts.py), the
outbox of queued and in-flight operations (outbox.py), the reconnect backoff
(orbit_host/backoff.py),
each attempt's lease (lease.py) and the batch hold (batching.py). What stays here is the
protocol's decisions, one input method and one answer handler at a time; it is one state
machine, and longer than the other modules for that reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Protocol

from orbit_wire.errors import FATAL_CODES, RETRYABLE_CODES, ErrorCode
from orbit_wire.frames import (
    ENDED_COOPERATIVE,
    ENDED_KILLED,
    AttemptRef,
    Cancel,
    ClaimOp,
    ClientFrame,
    Credit,
    DrainOp,
    ErrorFrame,
    FinishOp,
    Heartbeat,
    HeartbeatAck,
    Hello,
    Op,
    OpResult,
    RenewOp,
    Report,
    Reservation,
    Reserve,
    Response,
    ResumeOp,
    ServerFrame,
    StartOp,
    Welcome,
)
from orbit_wire.model import Capability, Disposition, Outcome

from . import defaults
from .actions import (
    Action,
    CancelChild,
    CloseConnection,
    Connect,
    Emit,
    Execute,
    Finish,
    Kill,
    SendFrame,
    SupervisorEvent,
)
from .attempts import Attempt, AttemptTable, Event, Phase
from .batching import BatchHold
from .errors import FatalSessionError, ShutdownTimeoutError
from .lease import Lease
from .link import Conn, ConnEvent, Link
from .margin import MarginEstimator
from .outbox import Outbox, Pending

# Reasons a child is killed (report.kill_reason); the finish code is LEASE_LOST for all.
KILL_LEASE_LOST = "LEASE_LOST"
KILL_ATTEMPT_TIMEOUT = "ATTEMPT_TIMEOUT"
KILL_TASK_CANCELLED = "TASK_CANCELLED"
KILL_SHUTDOWN = "SHUTDOWN"


class ExecutionOutcome(Protocol):
    """What the child pool reports (pool.ChildOutcome satisfies this)."""

    @property
    def outcome(self) -> Outcome: ...
    @property
    def code(self) -> str | None: ...
    @property
    def retryable(self) -> bool: ...
    @property
    def result_json(self) -> str | None: ...
    @property
    def details_json(self) -> str | None: ...
    @property
    def report(self) -> Report: ...


@dataclass(frozen=True, slots=True)
class SessionConfig:
    credential_id: str
    credential_secret: str = field(repr=False)
    instance_id: str
    instance_secret: str = field(repr=False)
    queue_id: str
    capabilities: tuple[Capability, ...]
    capacity: int
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT
    reconnect_min_delay: float = defaults.RECONNECT_MIN_DELAY
    reconnect_max_delay: float = defaults.RECONNECT_MAX_DELAY
    # Kill this long before a lease's granted expiry, so the kill's report arrives while the
    # lease still holds (lease.py). The supervisor uses REPORT_MARGIN; 0 keeps exact times.
    report_margin: float = 0.0
    # CPUs the children share. With more handlers running than that, a held finish idles no
    # CPU, so it may wait for the next handlers' finishes (batching.py); None: never.
    cpus: int | None = None
    # What hello announces of this runtime (e.g. "orbit-supervise/0.1.0"), for operators.
    agent: str | None = None
    # Attempts started ahead of a free child (0 to capacity): a finished child gets its next
    # handler without waiting for a round trip, at the price of a lease (and of the attempt
    # timeout) ticking while it waits behind a running handler (docs/supervisor.md).
    prefetch: int = 0


REPORT_MARGIN = 0.050  # seconds: the margin's floor (margin.py measures what it must cover)
LATE_KILL_BOUND = 0.020  # seconds past the local expiry: a lease timer this late is counted


@dataclass(frozen=True, slots=True)
class SessionStats:
    running: int
    started: int
    renewals_confirmed: int
    reports_confirmed: int
    evidence_confirmed: int
    reconnects: int
    late_kills: int = 0  # lease timers that ran more than LATE_KILL_BOUND late
    margin_ms: float = 0.0  # the local-expiry margin new grants use now
    loop_lag_ms: float = 0.0  # the largest recent lateness of the driver's loop
    reap_ms: float = 0.0  # the largest recent SIGKILL → reap latency
    loop_lag_max_ms: float = 0.0  # the largest lateness of the driver's loop since start
    # Executions ended, by outcome (a copy): the handler's answer, or UNKNOWN for a kill.
    ended: Mapping[str, int] = field(default_factory=dict)


class Session:
    """The state machine; see the module docstring for the calling contract."""

    def __init__(self, config: SessionConfig, rng: Callable[[], float]) -> None:
        if not 0 <= config.prefetch <= config.capacity:
            raise ValueError(f"prefetch must be in [0, {config.capacity}] (the capacity)")
        self.config = config
        # What the session may hold started or about to start: the children, and the
        # prefetch (which keeps known attempts within the protocol's 2 x capacity).
        self._slots = config.capacity + config.prefetch
        # rng: uniform [0, 1), the reconnect backoff's jitter.
        self._link = Link(config.reconnect_min_delay, config.reconnect_max_delay, rng)
        self._attempts = AttemptTable()
        self._outbox = Outbox()
        self.outstanding_credit = 0
        self._claiming = 0  # slots asked for by claims queued or in flight
        self._being_replaced = 0  # slots whose next child is still to come
        self.stop_deadline: float | None = None
        self.drain_acked = False
        self._drain_queued = False
        self._batching = BatchHold(config.cpus)
        self._hold_until: float | None = None
        self._margin = MarginEstimator(config.report_margin)
        # Kill reports and reap follow-ups by msg_id: the SIGKILL's instant, so each send
        # says how long ago it was (report.kill_age_ms). Follow-ups are only facts.
        self._kill_at: dict[str, float] = {}
        self._fact_msgs: set[str] = set()
        self.late_kills = 0
        self._loop_lag_max = 0.0
        # Counters for stats().
        self.started = 0
        self.renewals_confirmed = 0
        self.reports_confirmed = 0
        self.evidence_confirmed = 0
        self.dropped_reservations = 0
        self.ended: dict[str, int] = {}

    # ------------------------------------------------------------------ inputs

    def start(self, now: float) -> list[Action]:
        """Begin: returns a Connect action. Call once."""
        if self.conn is not Conn.IDLE:
            raise AssertionError("Session.start called twice")
        self._link.fire(ConnEvent.START)
        return [Connect(0.0)]

    def connected(self, now: float) -> list[Action]:
        """The socket is open: send hello and wait for welcome."""
        if self.conn is not Conn.CONNECTING:
            return []
        self._link.fire(ConnEvent.OPENED)
        self._link.received(now)
        cfg = self.config
        hello = Hello(
            credential_id=cfg.credential_id, credential_secret=cfg.credential_secret,
            instance_id=cfg.instance_id, instance_secret=cfg.instance_secret,
            queue_id=cfg.queue_id, capabilities=cfg.capabilities, capacity=cfg.capacity,
            agent=cfg.agent,
        )
        return [self._send(hello, now)]

    def connect_failed(self, now: float, reason: str) -> list[Action]:
        """The Connect action failed (refused, timed out, handshake rejected): back off."""
        if self.conn is not Conn.CONNECTING:
            return []
        actions: list[Action] = [_event("connect_failed", classification=reason)]
        return actions + self._disconnected(now)

    def connection_lost(self, now: float, reason: str) -> list[Action]:
        """The current connection ended (any side). Call once per connection."""
        if not self._link.open:
            return []
        actions: list[Action] = [_event("disconnected", classification=reason)]
        # In-flight operations go back to the front of the queue with their msg_ids; the
        # resume and the drain are per connection and are not resent.
        self._outbox.connection_lost()
        self._drain_queued = False
        if self.stop_deadline is not None:
            # The connection that could still send reservations is gone and the next one gets
            # no credit: the drain is complete.
            self.drain_acked = True
        # The server releases every reservation of this instance that was not started. A start
        # that was sent may have been applied: it stays and is resent after the resume.
        for att in list(self._attempts):
            start_sent = (att.phase is Phase.STARTING
                          and self._outbox.start_was_sent(att.attempt_id))
            if att.phase is Phase.RESERVED or (att.phase is Phase.STARTING and not start_sent):
                self._outbox.drop_ops_of(att.attempt_id)
                att.fire(Event.RELEASED)
                actions.append(_event("reservation_released", att, "CONNECTION_LOST"))
            elif att.phase is Phase.REPORTING:
                # A renewal in flight when its child ended came back with the others; the
                # finish makes it moot.
                self._outbox.drop_ops_of(att.attempt_id)
        self.outstanding_credit = 0
        actions += self._disconnected(now)
        self._check_done(now, actions)
        return actions

    def frame_received(self, frame: ServerFrame, now: float) -> list[Action]:
        """One decoded frame from the server."""
        if not self._link.open:
            return []
        self._link.received(now)
        actions: list[Action] = []
        match frame:
            case Welcome():
                self._on_welcome(frame, now, actions)
            case Response():
                self._on_response(frame, now, actions)
            case Reserve():
                self._on_reserve(frame, now, actions)
            case Cancel():
                self._on_cancel(frame, now, actions)
            case HeartbeatAck():
                pass
            case ErrorFrame():
                self._on_error(frame, now, actions)
                return actions
        if not self._done:
            self._progress(now, actions)
        return actions

    def execution_finished(self, attempt_id: str, result: ExecutionOutcome,
                           now: float) -> list[Action]:
        """The child pool returned the outcome of an Execute action."""
        att = self._attempts.get(attempt_id)
        if att is None or att.phase not in (Phase.RUNNING, Phase.KILLING) or self._done:
            return []
        actions: list[Action] = []
        if att.kill_msg is not None:
            self._reaped(att, result.report, now, actions)
            return actions
        # Our kill reason belongs on the report only if the outcome came from our kill (a
        # result that won the race against the kill is reported as it is).
        killed = result.outcome is Outcome.UNKNOWN and result.code == "LEASE_LOST"
        if att.phase is Phase.RUNNING and att.running_since is not None:
            cpu_ms = result.report.cpu_ms
            self._batching.handler_took(max(0.0, now - att.running_since),
                                        None if cpu_ms is None else cpu_ms / 1000,
                                        self._in_children)
        kill_reason = result.report.kill_reason or (att.kill_reason if killed else None)
        report = replace(result.report, renewals=att.lease.renewals, kill_reason=kill_reason,
                         ended_by=_ended_by(att, kill_reason))
        finish = FinishOp(
            msg_id=self._outbox.new_msg_id(), attempt_id=attempt_id, epoch=att.reservation.epoch,
            outcome=result.outcome, code=result.code, retryable=result.retryable,
            result_json=result.result_json if result.outcome is Outcome.SUCCEEDED else None,
            details_json=result.details_json if result.outcome is not Outcome.SUCCEEDED else None,
            report=report,
        )
        # Its start was answered, so a queued renewal is all there can be: one it is waiting
        # for, or one resent after a reconnect although the kill came first.
        if att.lease.renewing or att.phase is Phase.KILLING:
            self._outbox.drop_ops_of(attempt_id)
        att.lease.lose()  # nothing runs any more; no renewal is needed
        att.fire(Event.ENDED)
        self._outbox.queue(finish)
        label = result.outcome.value if result.code is None else f"{result.outcome}:{result.code}"
        self._ended(result.outcome)
        actions.append(_event("finished", att, label))
        self._progress(now, actions)
        return actions

    def kill_sent(self, attempt_id: str, report: Report, now: float) -> list[Action]:
        """A Kill action signalled the attempt's child at ``now``; ``report`` is what was
        known of it then (pid, signal, CPU and peak RSS as last read). Its finish is queued
        at once and never held for a batch; the attempt keeps its slot until the reap
        (``execution_finished``), whose facts follow."""
        att = self._attempts.get(attempt_id)
        if (att is None or att.phase is not Phase.KILLING or att.kill_msg is not None
                or self._done):
            return []
        report = replace(report, kill_reason=att.kill_reason, renewals=att.lease.renewals,
                         ended_by=_ended_by(att, att.kill_reason))
        finish = FinishOp(self._outbox.new_msg_id(), attempt_id, att.reservation.epoch,
                          Outcome.UNKNOWN, code="LEASE_LOST", report=report)
        att.kill_reported(finish.msg_id, report, now)
        self._kill_at[finish.msg_id] = now
        self._outbox.queue(finish)
        actions: list[Action] = []
        self._progress(now, actions)
        return actions

    def loop_lag(self, seconds: float) -> None:
        """A sample of how late the driver's loop ran a callback it had scheduled."""
        self._margin.loop_lag(seconds)
        self._loop_lag_max = max(self._loop_lag_max, seconds)

    def slots_being_replaced(self, count: int, now: float) -> list[Action]:
        """Slots whose next child is still to come; they are not offered as credit."""
        self._being_replaced = max(0, count)
        actions: list[Action] = []
        if not self._done:
            self._progress(now, actions)
        return actions

    def request_stop(self, now: float, *, force: bool = False) -> list[Action]:
        """Drain (idempotent). ``force`` takes the shutdown-timeout path at once."""
        if self._done:
            return []
        actions: list[Action] = []
        if self.stop_deadline is None:
            self.stop_deadline = now + self.config.shutdown_timeout
            actions.append(_event("stopping", classification="FORCED" if force else "DRAIN"))
            if self.conn is not Conn.READY:
                # No credit was offered on this connection (or there is none): nothing can
                # be reserved any more, so there is nothing to drain.
                self.drain_acked = True
        if force:
            self._end_with_timeout(now, actions, forced=True)
            return actions
        self._progress(now, actions)
        return actions

    def handle_timer(self, now: float) -> list[Action]:
        """Call at (or after) ``next_timer()``; harmless to call early."""
        actions: list[Action] = []
        if self._done:
            return actions
        if self.stop_deadline is not None and now >= self.stop_deadline:
            self._end_with_timeout(now, actions)
            return actions
        # Leases first: a dead or silent connection must never delay a kill.
        for att in list(self._attempts.in_phase(Phase.RUNNING).values()):  # a kill moves it
            expires_at = att.lease.expires_at
            if att.lease.check(now):
                reason = KILL_ATTEMPT_TIMEOUT if att.lease.capped else KILL_LEASE_LOST
                late = 0.0 if expires_at is None else max(0.0, now - expires_at)
                if late > LATE_KILL_BOUND:
                    self.late_kills += 1
                self._kill(att, reason, actions, late_by=late)
            elif att.cancel_at is not None and now >= att.cancel_at:
                att.lease.lose()  # the grace is over: the handler did not stop
                self._kill(att, KILL_TASK_CANCELLED, actions)
            elif att.lease.renewal_due(now):
                renew = RenewOp(self._outbox.new_msg_id(), att.attempt_id, att.reservation.epoch)
                att.lease.renewal_queued()
                self._outbox.queue(renew)
        overdue = self._link.overdue(now)
        if overdue is not None:
            actions.append(CloseConnection(overdue))
            return actions
        if self._link.heartbeat_due(now):
            actions.append(self._send(Heartbeat(), now))
        self._progress(now, actions)
        return actions

    def next_timer(self) -> float | None:
        """The earliest instant ``handle_timer`` has something to do, or None."""
        if self._done:
            return None
        times: list[float] = []
        if self.stop_deadline is not None:
            times.append(self.stop_deadline)
        if (self._hold_until is not None and self.conn is Conn.READY
                and self._outbox.in_flight is None):
            times.append(self._hold_until)
        times += self._link.timers()
        for att in self._attempts.in_phase(Phase.RUNNING).values():
            deadline = att.lease.deadline()
            if deadline is not None:
                times.append(deadline)
            if att.cancel_at is not None:
                times.append(att.cancel_at)
        return min(times) if times else None

    # ------------------------------------------------------------------ queries

    def stats(self) -> SessionStats:
        return SessionStats(
            running=self.executing, started=self.started,
            renewals_confirmed=self.renewals_confirmed,
            reports_confirmed=self.reports_confirmed,
            evidence_confirmed=self.evidence_confirmed, reconnects=self._link.reconnects,
            late_kills=self.late_kills, margin_ms=self._margin.value() * 1000,
            loop_lag_ms=self._margin.recent_loop_lag() * 1000,
            reap_ms=self._margin.recent_reap() * 1000,
            loop_lag_max_ms=self._loop_lag_max * 1000, ended=dict(self.ended),
        )

    @property
    def attempts(self) -> Mapping[str, Attempt]:
        """Every known attempt by id (read-only: only the session's inputs change them)."""
        return self._attempts.by_id()

    def queued_ops(self) -> tuple[Op, ...]:
        """The operations waiting for the next request, in queue order (a copy)."""
        return self._outbox.queued_ops()

    def in_flight_ops(self) -> tuple[Op, ...]:
        """The operations of the request awaiting its response, or ()."""
        return self._outbox.in_flight_ops()

    @property
    def executing(self) -> int:
        return self._attempts.count(Phase.RUNNING, Phase.KILLING)

    @property
    def _in_children(self) -> int:
        """Executions that hold a child (a prefetched one beyond the children waits)."""
        return min(self.executing, self.config.capacity)

    @property
    def unconfirmed(self) -> int:
        """Started attempts whose final report the server has not confirmed."""
        return self._attempts.count(Phase.RUNNING, Phase.KILLING, Phase.REPORTING)

    def free_slots(self, finishing: int = 0) -> int:
        """Slots that may be offered; ``finishing``: that many REPORTING attempts count as
        confirmed (their finishes ride in the request being built)."""
        # Every known attempt holds a slot, whatever its phase: reserved or starting ones
        # will run, running and killing ones execute, reporting ones await confirmation.
        busy = len(self._attempts) - finishing + self._being_replaced + self._claiming
        return max(0, self._slots - busy)

    @property
    def done(self) -> bool:
        return self._done

    # ------------------------------------------------------------------ frames

    def _on_welcome(self, frame: Welcome, now: float, actions: list[Action]) -> None:
        if self.conn is not Conn.HELLO_SENT:
            self._fatal(ErrorCode.OUT_OF_ORDER, "a second welcome on one connection", actions)
            return
        self._link.welcomed(frame)
        actions.append(_event("connected", classification=frame.session_id))
        refs = tuple(
            AttemptRef(att.attempt_id, att.reservation.epoch)
            for att in self._attempts
            if att.phase in (Phase.RUNNING, Phase.KILLING, Phase.REPORTING)
        )
        if not refs:
            self._link.fire(ConnEvent.WELCOMED)
            return
        self._link.fire(ConnEvent.RESUME_SENT)
        resume = Pending(ResumeOp(self._outbox.new_msg_id(), refs), sent_at=now)
        self._send_request([resume], now, actions)

    def _on_response(self, frame: Response, now: float, actions: list[Action]) -> None:
        inflight = self._outbox.in_flight
        if inflight is None or frame.id != inflight.request_id:
            self._fatal(ErrorCode.OUT_OF_ORDER, f"response {frame.id} answers no request",
                        actions)
            return
        if len(frame.results) != len(inflight.ops):
            self._fatal(ErrorCode.BAD_FRAME, "response has a different number of results",
                        actions)
            return
        self._outbox.answered()
        self._batching.round_trip(max(0.0, now - inflight.sent_at))
        for pending, result in zip(inflight.ops, frame.results, strict=True):
            sent_at = pending.sent_at if pending.sent_at is not None else inflight.sent_at
            match pending.op:
                case StartOp() as op:
                    self._on_start_result(op, result, sent_at, now, actions)
                case RenewOp() as op:
                    self._on_renew_result(op, result, sent_at, now, actions)
                case FinishOp() as op:
                    self._on_finish_result(op, result, now, actions)
                case ClaimOp() as op:
                    self._on_claim_result(op, result, sent_at, now, actions)
                case ResumeOp():
                    self._on_resume_result(result, sent_at, now, actions)
                case DrainOp():
                    self.drain_acked = True
                    actions.append(_event("drain_acknowledged"))
            if self._done:
                return
        if self.conn is Conn.RESUMING:
            self._link.fire(ConnEvent.RESUMED)

    def _on_start_result(self, op: StartOp, result: OpResult, sent_at: float, now: float,
                         actions: list[Action]) -> None:
        att = self._attempts.get(op.attempt_id)
        if att is None or att.phase is not Phase.STARTING:
            return  # a duplicate confirmation only reconciles
        if not result.ok:
            if result.error_code in RETRYABLE_CODES:
                self._outbox.queue(op, sent_at)  # same msg_id, later
                return
            att.fire(Event.REJECTED)
            actions.append(_event("start_rejected", att, str(result.error_code)))
            return
        self._started(att, sent_at, result.lease_ms or 0, now, actions)

    def _started(self, att: Attempt, sent_at: float, lease_ms: int, now: float,
                 actions: list[Action]) -> None:
        """The server confirmed the start of a STARTING attempt: run it, unless the lease
        already ran out locally or the task was cancelled meanwhile."""
        if (att.lease.grant(sent_at, lease_ms, now, margin=self._margin.value())
                and not att.cancelled):
            att.start_running(now)
            self.started += 1
            actions.append(_event("started", att))
            actions.append(Execute(att.reservation))
            return
        # Confirmed too late (the local lease already ran out) or cancelled meanwhile: the
        # handler never runs, and the server hears so at once instead of at lease expiry.
        reason = KILL_TASK_CANCELLED if att.cancelled else KILL_LEASE_LOST
        att.lease.lose()
        att.decide_kill(reason)
        att.fire(Event.NOT_RUN)
        finish = FinishOp(self._outbox.new_msg_id(), att.attempt_id, att.reservation.epoch,
                          Outcome.UNKNOWN, code="LEASE_LOST",
                          report=Report(kill_reason=reason, renewals=0))
        self._outbox.queue(finish)
        actions.append(_event("not_run", att, reason))

    def _on_claim_result(self, op: ClaimOp, result: OpResult, sent_at: float, now: float,
                         actions: list[Action]) -> None:
        if not result.ok and result.error_code in RETRYABLE_CODES:
            # The claim may have been applied (a commit whose answer was lost): only its
            # receipt tells, so it goes again with its msg_id and keeps its slots meanwhile.
            self._outbox.queue(op, sent_at)
            return
        self._claiming = max(0, self._claiming - op.count)
        if not result.ok:
            return  # nothing was claimed; the slots are offered again as credit
        self.outstanding_credit += result.credited or 0
        for res in result.claimed or ():
            if res.attempt_id in self._attempts:
                continue  # a duplicate confirmation only reconciles
            att = self._new_attempt(res, Event.CLAIMED)
            actions.append(_event("reserved", att))
            self._started(att, sent_at, res.lease_ms or 0, now, actions)

    def _on_renew_result(self, op: RenewOp, result: OpResult, sent_at: float, now: float,
                         actions: list[Action]) -> None:
        att = self._attempts.get(op.attempt_id)
        if att is None:
            return
        if att.phase is not Phase.RUNNING:
            att.lease.renewal_dropped()
            return
        if result.ok:
            self.renewals_confirmed += 1
            if not att.lease.renewal_confirmed(sent_at, result.lease_ms or 0, now,
                                               margin=self._margin.value()):
                self._kill(att, KILL_ATTEMPT_TIMEOUT if att.lease.capped else KILL_LEASE_LOST,
                           actions)
            return
        if result.error_code in RETRYABLE_CODES:
            att.lease.renewal_failed(now)
            return
        att.lease.renewal_dropped()
        if att.cancel_at is not None and result.error_code is ErrorCode.LEASE_EXPIRED:
            # The cancelled task's renewal is refused; the lease it holds still stands (the
            # local expiry is never later than the server's) and bounds the grace.
            return
        att.lease.lose()
        self._kill(att, KILL_LEASE_LOST, actions)

    def _on_finish_result(self, op: FinishOp, result: OpResult, now: float,
                          actions: list[Action]) -> None:
        retry = not result.ok and result.error_code in RETRYABLE_CODES
        if op.msg_id in self._fact_msgs:
            # Reap facts after a confirmed kill report: sent again only on a retryable
            # answer, and nothing waits for them.
            if retry:
                self._outbox.queue(op)
            else:
                self._fact_msgs.discard(op.msg_id)
                self._kill_at.pop(op.msg_id, None)
            return
        att = self._attempts.get(op.attempt_id)
        early = att is not None and att.phase is Phase.KILLING and att.kill_msg == op.msg_id
        if att is None or not (att.phase is Phase.REPORTING or early):
            return
        if retry:
            self._outbox.queue(op)
            return
        self._kill_at.pop(op.msg_id, None)
        if early:
            att.kill_report_confirmed()  # the attempt keeps its slot until the reap
        else:
            att.fire(Event.CONFIRMED)
        if not result.ok:
            actions.append(_event("report_rejected", att, str(result.error_code)))
        elif result.disposition is Disposition.EVIDENCE_ONLY:
            self.evidence_confirmed += 1
            actions.append(_event("report_confirmed", att, Disposition.EVIDENCE_ONLY.value))
        else:
            self.reports_confirmed += 1
            actions.append(_event("report_confirmed", att, Disposition.ACCEPTED.value))

    def _on_resume_result(self, result: OpResult, sent_at: float, now: float,
                          actions: list[Action]) -> None:
        if not result.ok:
            return  # nothing learnt; local leases still decide
        for entry in result.attempts or ():
            att = self._attempts.get(entry.attempt_id)
            if att is None or att.phase is not Phase.RUNNING:
                continue
            if entry.status == "RUNNING" and entry.lease_ms is not None:
                if not att.lease.grant(sent_at, entry.lease_ms, now,
                                       margin=self._margin.value()):
                    self._kill(att, KILL_LEASE_LOST, actions)
            elif entry.reason == KILL_TASK_CANCELLED:
                # The task was cancelled (maybe while the connection was down): as a cancel
                # push. Its lease still stands on the server until the report or its end.
                self._on_cancel(Cancel(att.attempt_id, att.reservation.epoch, entry.reason),
                                now, actions)
            else:
                att.lease.lose()
                self._kill(att, KILL_LEASE_LOST, actions)

    def _on_reserve(self, frame: Reserve, now: float, actions: list[Action]) -> None:
        for res in frame.reservations:
            self.outstanding_credit = max(0, self.outstanding_credit - 1)
            reason = None
            if res.attempt_id in self._attempts:
                reason = "DUPLICATE"
            elif self.stop_deadline is not None and self.drain_acked:
                reason = "AFTER_DRAIN"
            elif len(self._attempts) >= 2 * self.config.capacity:
                reason = "OVER_BOUND"
            elif res.capability not in self.config.capabilities:
                reason = "UNKNOWN_CAPABILITY"
            if reason is not None:
                if reason != "DUPLICATE":
                    self.dropped_reservations += 1
                actions.append(_event("reservation_dropped", None, reason, res))
                continue
            self._new_attempt(res, Event.RESERVED)
            actions.append(_event("reserved", None, None, res))

    def _on_cancel(self, frame: Cancel, now: float, actions: list[Action]) -> None:
        att = self._attempts.get(frame.attempt_id)
        if att is None or att.reservation.epoch != frame.epoch:
            return
        actions.append(_event("cancel_received", att, frame.reason))
        if att.phase is Phase.RUNNING:
            if att.cancel_told:
                return  # a repeated push: the grace already runs
            grace = att.reservation.cancel_grace_ms
            if grace <= 0:
                att.cancel_while_running(None)
                att.lease.lose()
                self._kill(att, KILL_TASK_CANCELLED, actions)
                return
            # The server refuses renewals of a cancelled task: none is sent any more, and
            # the lease timer still kills at the local expiry if that comes first.
            att.cancel_while_running(now + grace / 1000.0)
            att.lease.stop_renewing()
            self._outbox.drop_ops_of(att.attempt_id)
            if not any(isinstance(op, RenewOp) and op.attempt_id == att.attempt_id
                       for op in self._outbox.in_flight_ops()):
                att.lease.renewal_dropped()  # none is left (one in flight still renews)
            actions.append(CancelChild(att.attempt_id))
        elif att.phase is Phase.STARTING:
            att.cancel_while_starting()
        elif att.phase is Phase.RESERVED:
            att.fire(Event.CANCELLED)

    def _on_error(self, frame: ErrorFrame, now: float, actions: list[Action]) -> None:
        if frame.code in FATAL_CODES:
            self._fatal(frame.code, frame.message, actions)
        else:
            actions.append(CloseConnection(str(frame.code)))

    # ------------------------------------------------------------------ internals

    @property
    def conn(self) -> Conn:
        """The connection's state (link.py)."""
        return self._link.state

    @property
    def reconnects(self) -> int:
        return self._link.reconnects

    @property
    def _done(self) -> bool:
        return self._link.done

    def _progress(self, now: float, actions: list[Action]) -> None:
        """After any input: start what has a slot, send queued ops, offer credit, finish."""
        outbox = self._outbox
        self._start_reserved()
        if (self.stop_deadline is not None and not self.drain_acked and not self._drain_queued
                and self.conn is Conn.READY):
            self._drain_queued = True
            outbox.queue(DrainOp(outbox.new_msg_id()))
        self._hold_until = None  # re-decided below, only while a request could go out
        self._batching.queued(now, outbox.has_queued)
        if (self.conn is Conn.READY and outbox.in_flight is None and outbox.has_queued
                and not self._hold(now)):
            # Renewals first: when more is queued than one batch holds, leases must not wait.
            batch = outbox.take_batch(self._link.max_batch)
            self._batching.sent(now, outbox.has_queued)
            self._send_request(batch, now, actions)
        self._grant_credit(now, actions)
        self._check_done(now, actions)

    def _hold(self, now: float) -> bool:  # sets _hold_until (None: no hold)
        """True to hold back a request while only starts and finishes are queued and a
        handler's finish may join them (batching.py). Never while stopping."""
        if self.stop_deadline is not None or not self._outbox.only_starts_and_finishes():
            return False
        if any(msg_id in self._kill_at and msg_id not in self._fact_msgs
               for msg_id in self._outbox.queued_msg_ids()):
            return False  # a kill report goes out at once
        self._hold_until = self._batching.until(
            now, (a.running_since for a in self._attempts.in_phase(Phase.RUNNING).values()
                  if a.running_since is not None),
            self._in_children)
        return self._hold_until is not None

    def _start_reserved(self) -> None:
        # A start goes out only when a child slot is free, so a confirmed lease never ticks
        # while its handler waits for a child (unless the operator opted in to a prefetch).
        slots = self._slots - self.executing - self._attempts.count(Phase.STARTING)
        if slots <= 0:
            return
        for att in list(islice(self._attempts.in_phase(Phase.RESERVED).values(), slots)):
            att.fire(Event.START_QUEUED)
            op = StartOp(self._outbox.new_msg_id(), att.attempt_id, att.reservation.epoch)
            self._outbox.queue(op)

    def _grant_credit(self, now: float, actions: list[Action]) -> None:
        if self.conn is not Conn.READY or self.stop_deadline is not None:
            return
        grant = self.free_slots() - self.outstanding_credit
        if grant > 0:
            self.outstanding_credit += grant
            actions.append(self._send(Credit(grant), now))

    def _send_request(self, batch: list[Pending], now: float, actions: list[Action]) -> None:
        if len(batch) >= self._link.max_batch > 1 and self._claim_count(batch):
            # The last op makes room for the claim and goes out in the next request.
            self._outbox.queue_first(batch.pop())
        for pending in batch:
            killed_at = self._kill_at.get(pending.op.msg_id)
            if killed_at is not None and isinstance(pending.op, FinishOp):
                # How long ago the SIGKILL went out, as of this send (a resend says more).
                age = max(0, round((now - killed_at) * 1000))
                pending.op = replace(pending.op,
                                     report=replace(pending.op.report, kill_age_ms=age))
            # A renewal's first send is what spaces the next one (lease.py); a resend
            # after a reconnect keeps the first.
            if pending.sent_at is None and isinstance(pending.op, RenewOp):
                att = self._attempts.get(pending.op.attempt_id)
                if att is not None:
                    att.lease.renew_sent(now)
        count = self._claim_count(batch)
        if count and len(batch) < self._link.max_batch:
            claim = ClaimOp(self._outbox.new_msg_id(), count)
            self._claiming += count
            batch.append(Pending(claim, sent_at=now))
        actions.append(self._send(self._outbox.send(batch, now), now))

    def _claim_count(self, batch: list[Pending]) -> int:
        """Slots a claim at the end of this request may fill: those free once its finishes
        are confirmed (the server applies the claim only if they all are), less the credit
        already outstanding."""
        if self.conn is not Conn.READY or self.stop_deadline is not None:
            return 0
        finishing = sum(1 for p in batch if isinstance(p.op, FinishOp)
                        and p.op.msg_id not in self._fact_msgs
                        and (att := self._attempts.get(p.op.attempt_id)) is not None
                        and att.phase is Phase.REPORTING)
        if not finishing:
            return 0
        return max(0, self.free_slots(finishing) - self.outstanding_credit)

    def _send(self, frame: ClientFrame, now: float) -> SendFrame:
        self._link.sent(now)
        return SendFrame(frame)

    def _kill(self, att: Attempt, reason: str, actions: list[Action], *,
              late_by: float = 0.0) -> None:
        if att.phase is not Phase.RUNNING:
            return
        att.fire(Event.KILLED)
        att.decide_kill(reason)
        self._outbox.drop_ops_of(att.attempt_id)
        att.lease.renewal_dropped()
        actions.append(Kill(att.attempt_id, reason, late_by=late_by))
        actions.append(_event("killed", att, reason))

    def _reaped(self, att: Attempt, reap: Report, now: float, actions: list[Action]) -> None:
        """The reap of a child whose kill was reported already (``kill_sent``): its facts
        join the kill report if that was never sent, else follow in a finish of their own."""
        assert att.kill_msg is not None and att.kill_report is not None
        if reap.reap_ms is not None:
            self._margin.reap(reap.reap_ms / 1000)
        first = att.kill_report
        merged = replace(
            first, exit_code=reap.exit_code,
            signal=reap.signal if reap.signal is not None else first.signal,
            cpu_ms=reap.cpu_ms if reap.cpu_ms is not None else first.cpu_ms,
            peak_rss_bytes=(reap.peak_rss_bytes if reap.peak_rss_bytes is not None
                            else first.peak_rss_bytes),
            reap_ms=reap.reap_ms)
        label = f"{Outcome.UNKNOWN.value}:LEASE_LOST"
        self._ended(Outcome.UNKNOWN)
        # A renewal in flight at the kill is queued again if the connection drops; the reap
        # ends any need for it.
        self._outbox.drop_ops_of(att.attempt_id)
        if self._outbox.replace_unsent_report(att.kill_msg, merged):
            att.kill_report_merged(merged)
            att.fire(Event.ENDED)
        else:
            follow = FinishOp(self._outbox.new_msg_id(), att.attempt_id, att.reservation.epoch,
                              Outcome.UNKNOWN, code="LEASE_LOST", report=merged)
            self._fact_msgs.add(follow.msg_id)
            self._kill_at[follow.msg_id] = att.killed_at if att.killed_at is not None else now
            self._outbox.queue(follow)
            att.fire(Event.ENDED)
            if att.kill_confirmed:
                att.fire(Event.CONFIRMED)  # the kill report was answered already
        actions.append(_event("finished", att, label))
        self._progress(now, actions)

    def _ended(self, outcome: Outcome) -> None:
        self.ended[outcome.value] = self.ended.get(outcome.value, 0) + 1

    def _check_done(self, now: float, actions: list[Action]) -> None:
        if (self.stop_deadline is None or not self.drain_acked or self._attempts
                or not self._outbox.idle or self._done):
            return
        self._link.fire(ConnEvent.ENDED)
        actions.append(_event("drained"))
        actions.append(Finish(None))

    def _end_with_timeout(self, now: float, actions: list[Action], *,
                          forced: bool = False) -> None:
        running, unconfirmed = self.executing, self.unconfirmed
        why = ("forced stop" if forced
               else f"shutdown timeout ({self.config.shutdown_timeout:g} s) ran out")
        for att in self._attempts:
            self._kill(att, KILL_SHUTDOWN, actions)
        self._link.fire(ConnEvent.ENDED)
        self._outbox.abandon()
        actions.append(_event("shutdown_timeout"))
        actions.append(Finish(ShutdownTimeoutError(
            f"{why} with {unconfirmed} unconfirmed result(s) and {running} running "
            f"handler(s)",
            unconfirmed=unconfirmed, running=running)))

    def _fatal(self, code: ErrorCode, message: str, actions: list[Action]) -> None:
        running, unconfirmed = self.executing, self.unconfirmed
        for att in self._attempts:
            self._kill(att, KILL_SHUTDOWN, actions)
        self._link.fire(ConnEvent.ENDED)
        self._outbox.abandon()
        actions.append(_event("fatal", classification=str(code)))
        actions.append(Finish(FatalSessionError(code, message, unconfirmed=unconfirmed,
                                                running=running)))

    def _disconnected(self, now: float) -> list[Action]:
        if self._check_stopped_idle():
            self._link.fire(ConnEvent.ENDED)
            return [_event("drained"), Finish(None)]
        return [Connect(self._link.reconnect_delay())]

    def _check_stopped_idle(self) -> bool:
        return (self.stop_deadline is not None and not self._attempts
                and self._outbox.idle)

    def _new_attempt(self, res: Reservation, arrival: Event) -> Attempt:
        att = Attempt(res, Lease(res.lease_ttl_ms, margin=self._margin.value()))
        self._attempts.add(att, arrival)
        return att

    def phase_counts(self) -> dict[Phase, int]:
        """Known attempts per phase (kept incrementally; tests check it against a count)."""
        return self._attempts.phase_counts()


def _ended_by(att: Attempt, kill_reason: str | None) -> str | None:
    """How the child of an attempt a cancel reached ended (None: no cancel reached it)."""
    if not att.cancel_told:
        return None
    return ENDED_COOPERATIVE if kill_reason is None else ENDED_KILLED


def _event(kind: str, att: Attempt | None = None, classification: str | None = None,
           reservation: Reservation | None = None) -> Emit:
    res = att.reservation if att is not None else reservation
    return Emit(SupervisorEvent(
        type=kind,
        task_id=res.task_id if res is not None else None,
        attempt_id=res.attempt_id if res is not None else None,
        classification=classification,
    ))
