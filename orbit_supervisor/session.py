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
    child_killed(attempt, report, now)  a Kill action signalled a child: what was known then
    loop_lag(seconds)                   how late the driver's loop ran a timer (a sample)
    slots_being_replaced(n, now)        slots whose next child is still to come
    slots_changed(now)                  another queue's session over the same children moved
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
  at once, and its report (``child_killed``) goes out at once, never held for a batch; the
  reap's facts follow in the same finish if it was not sent yet, else in a second finish of
  the attempt (the server keeps the facts it lacks).
- A ``cancel`` push for a running attempt tells its child (CancelChild) and stops renewing;
  the Kill (TASK_CANCELLED) follows at the end of the reservation's cancel grace, or at once
  for a grace of 0. The lease's expiry still kills first if it comes earlier. The finish
  says which ended the child: ``report.ended_by`` COOPERATIVE (it ended by itself) or KILLED.
- A handler's progress (kept on its attempt by the pool, progress.py) rides the next
  renewal as of its send, at most once, and the finish what no confirmed renewal carried;
  it never makes a request. With the reservation's ``progress_timeout_ms`` an attempt whose
  handler gave no sign of life for that long is killed (PROGRESS_TIMEOUT) by the timer, as
  at its attempt timeout; a note only moves that instant later.
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
events, and an event its phase has no row for raises. The session is three layers of one
class: the shared state and moves (core.py), the answers to operations (answers.py) and,
here, the inputs.
"""

from __future__ import annotations

from msgspec.structs import replace

from orbit_wire.errors import FATAL_CODES, ErrorCode
from orbit_wire.frames import (
    AttemptRef,
    Cancel,
    DeclineOp,
    ErrorFrame,
    FinishOp,
    Heartbeat,
    HeartbeatAck,
    Hello,
    RenewOp,
    Report,
    Reserve,
    Response,
    ResumeOp,
    ServerFrame,
    Welcome,
)
from orbit_wire.limits import FEATURE_GRANT
from orbit_wire.model import KILL_CAUSES, Outcome

from .actions import Action, CloseConnection, Connect, EndRun
from .answers import SessionAnswers
from .attempts import Attempt, Event, Phase, RunState
from .core import event
from .kill_reports import ended_by
from .lease import Lease
from .link import Conn, ConnEvent
from .outbox import Pending
from .session_types import (
    KILL_ATTEMPT_TIMEOUT,
    KILL_LEASE_LOST,
    KILL_PROGRESS_TIMEOUT,
    KILL_SHUTDOWN,
    KILL_TASK_CANCELLED,
    LATE_KILL_BOUND,
    REPORT_MARGIN,
    ExecutionOutcome,
    SessionConfig,
    SessionStats,
)

__all__ = [
    "KILL_ATTEMPT_TIMEOUT", "KILL_LEASE_LOST", "KILL_PROGRESS_TIMEOUT", "KILL_SHUTDOWN",
    "KILL_TASK_CANCELLED", "LATE_KILL_BOUND", "REPORT_MARGIN", "Conn", "ExecutionOutcome",
    "Phase", "Session", "SessionConfig", "SessionStats",
]


class Session(SessionAnswers):
    """The state machine; see the module docstring for the calling contract."""

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
            agent=cfg.agent, features=(FEATURE_GRANT,) if cfg.grants else (),
            policies=cfg.policies or None, labels=dict(cfg.labels) or None,
        )
        return [self._send(hello, now)]

    def connect_failed(self, now: float, reason: str) -> list[Action]:
        """The Connect action failed (refused, timed out, handshake rejected): back off."""
        if self.conn is not Conn.CONNECTING:
            return []
        actions: list[Action] = [event("connect_failed", classification=reason)]
        return actions + self._disconnected(now)

    def connection_lost(self, now: float, reason: str) -> list[Action]:
        """The current connection ended (any side). Call once per connection."""
        if not self._link.open:
            return []
        actions: list[Action] = [event("disconnected", classification=reason)]
        # In-flight operations go back to the front of the queue with their msg_ids; the
        # resume and the drain are per connection and are not resent.
        self._outbox.connection_lost()
        self._drain_queued = False
        if self.ending:
            self._end_final(actions)  # no connection left to report on
            return actions
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
                actions.append(event("reservation_released", att, "CONNECTION_LOST"))
            elif att.phase is Phase.REPORTING:
                # A renewal in flight when its child ended came back with the others; the
                # finish makes it moot.
                self._outbox.drop_ops_of(att.attempt_id)
        self._credit.connection_lost()
        actions += self._disconnected(now)
        self._check_done(now, actions)
        return actions

    def frame_received(self, frame: ServerFrame, now: float) -> list[Action]:
        """One decoded frame from the server."""
        if not self._link.open:
            return []
        self._link.received(now)
        self.frames_received += 1
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
        if not self.done:
            self._progress(now, actions)
        return actions

    def execution_finished(self, attempt_id: str, result: ExecutionOutcome,
                           now: float) -> list[Action]:
        """The child pool returned the outcome of an Execute action."""
        att = self._attempts.get(attempt_id)
        if att is None or att.phase not in (Phase.RUNNING, Phase.KILLING) or self.done:
            return []
        actions: list[Action] = []
        if att.kill_msg is not None:
            self._reaped(att, result.report, now, actions)
            return actions
        # Our kill reason belongs on the report only if the outcome came from our kill (a
        # result that won the race against the kill is reported as it is).
        killed = result.outcome is Outcome.UNKNOWN and result.code in KILL_CAUSES
        if att.phase is Phase.RUNNING and att.running_since is not None:
            cpu_ms = result.report.cpu_ms
            self._batching.handler_took(max(0.0, now - att.running_since),
                                        None if cpu_ms is None else cpu_ms / 1000,
                                        self._in_children)
        kill_reason = result.report.kill_reason or (att.kill_reason if killed else None)
        # The child's last note (sent before its answer) has been read by now.
        progress = att.progress.for_finish()
        report = replace(result.report, renewals=att.lease.renewals, kill_reason=kill_reason,
                         ended_by=ended_by(att, kill_reason))
        finish = FinishOp(
            msg_id=self._outbox.new_msg_id(), attempt_id=attempt_id, epoch=att.reservation.epoch,
            outcome=result.outcome, code=result.code, retryable=result.retryable,
            result_json=result.result_json if result.outcome is Outcome.SUCCEEDED else None,
            details_json=result.details_json if result.outcome is not Outcome.SUCCEEDED else None,
            report=report, progress=progress,
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
        actions.append(event("finished", att, label))
        self._progress(now, actions)
        return actions

    def child_killed(self, attempt_id: str, report: Report, now: float) -> list[Action]:
        """A Kill action signalled the attempt's child at ``now``; ``report`` is what was
        known of it then (pid, signal, CPU and peak RSS as last read). Its finish is queued
        at once and never held for a batch; the attempt keeps its slot until the reap
        (``execution_finished``), whose facts follow."""
        att = self._attempts.get(attempt_id)
        if (att is None or att.phase is not Phase.KILLING or att.kill_msg is not None
                or self.done):
            return []
        self._outbox.queue(self._kill_reports.report(att, report, self._outbox.new_msg_id(),
                                                     now))
        actions: list[Action] = []
        self._progress(now, actions)
        return actions

    def loop_lag(self, seconds: float) -> None:
        """A sample of how late the driver's loop ran a callback it had scheduled."""
        self._margin.loop_lag(seconds)
        self._loop_lag_max = max(self._loop_lag_max, seconds)

    def slots_being_replaced(self, count: int, now: float) -> list[Action]:
        """Slots whose next child is still to come; they are not offered as credit."""
        self._credit.being_replaced = max(0, count)
        actions: list[Action] = []
        if not self.done:
            self._progress(now, actions)
        return actions

    def slots_changed(self, now: float) -> list[Action]:
        """Another session over the same children changed what it holds of them (several
        queues): offer what is free now, start what has a child."""
        actions: list[Action] = []
        if not self.done:
            self._progress(now, actions)
        return actions

    def request_stop(self, now: float, *, force: bool = False) -> list[Action]:
        """Drain (idempotent). ``force`` takes the shutdown-timeout path at once."""
        if self.done:
            return []
        actions: list[Action] = []
        if self.stop_deadline is None:
            self.stop_deadline = now + self.config.shutdown_timeout
            actions.append(event("stopping", classification="FORCED" if force else "DRAIN"))
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
        if self.done:
            return actions
        if self.ending:
            self._progress(now, actions)  # ends the run once the window is over
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
            elif (stuck_at := _stuck_at(att)) is not None and now >= stuck_at:
                att.lease.lose()  # silent for its progress timeout: stuck
                self._kill(att, KILL_PROGRESS_TIMEOUT, actions)
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
        if self.done:
            return None
        if self.final_until is not None:
            # Ending: every child was killed, and handle_timer only ends the run once the
            # reports' window is over (a heartbeat or answer timer would fire for nothing).
            return self.final_until
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
            elif (stuck_at := _stuck_at(att)) is not None:
                # A note that came since only moves it later: the timer then finds nothing
                # due and is armed again for the new instant.
                times.append(stuck_at)
        return min(times) if times else None

    def _on_welcome(self, frame: Welcome, now: float, actions: list[Action]) -> None:
        if self.conn is not Conn.HELLO_SENT:
            self._fatal(ErrorCode.OUT_OF_ORDER, "a second welcome on one connection", actions)
            return
        self._link.welcomed(frame)
        actions.append(event("connected", classification=frame.session_id))
        refs = tuple(
            AttemptRef(att.attempt_id, att.reservation.epoch)
            for att in self._attempts
            if att.phase in (Phase.RUNNING, Phase.KILLING, Phase.REPORTING)
        )
        # With grants a reconnect's resume goes out even empty: it tells the server which
        # grants of earlier connections never arrived (they go back unspent).
        if not refs and not (self._link.grants and self._link.reconnects > 0):
            self._link.fire(ConnEvent.WELCOMED)
            return
        self._link.fire(ConnEvent.RESUME_SENT)
        resume = Pending(ResumeOp(self._outbox.new_msg_id(), refs), sent_at=now)
        self._send_request([resume], now, actions)

    def _on_reserve(self, frame: Reserve, now: float, actions: list[Action]) -> None:
        if frame.basis is not None and self._link.grants:
            self._on_grants(frame, frame.basis, now, actions)
            return
        for res in frame.reservations:
            self._credit.reservation_received()
            reason = None
            if res.attempt_id in self._attempts:
                reason = "DUPLICATE"
            elif self.stop_deadline is not None and (self.drain_acked or self.ending):
                reason = "AFTER_DRAIN"
            elif len(self._attempts) >= 2 * self.config.capacity:
                reason = "OVER_BOUND"
            elif res.capability not in self.config.capabilities:
                reason = "UNKNOWN_CAPABILITY"
            if reason is not None:
                if reason != "DUPLICATE":
                    self.dropped_reservations += 1
                actions.append(event("reservation_dropped", None, reason, res))
                continue
            self._new_attempt(res, Event.RESERVED)
            actions.append(event("reserved", None, None, res))

    def _on_grants(self, frame: Reserve, basis: int, now: float,
                   actions: list[Action]) -> None:
        """Reservations that arrive started (docs/protocol.md, "Grants"): each lease counts
        from when this side sent frame ``basis``, which the server had read before granting,
        so the local expiry is never later than the server's. One that cannot run is
        declined (released unspent), never dropped: its handler has not started."""
        sent_at = self._link.sent_at(basis)
        margin = self._margin.value()
        for res in frame.reservations:
            self._credit.reservation_received()
            if res.attempt_id in self._attempts:
                continue  # a duplicate only reconciles
            lease = Lease(res.lease_ttl_ms, margin=margin)
            reason = None
            if self.stop_deadline is not None and (self.drain_acked or self.ending):
                reason = "DRAINING"
            elif (len(self._attempts) >= 2 * self.config.capacity
                  or (self._credit.shared and self._credit.running_elsewhere()
                      + self.slots_running() >= self._credit.slots)):
                # Beyond the protocol's bound, or (with several queues) no shared slot
                # left for it: the server gives it to another worker.
                reason = "OVER_CAPACITY"
            elif res.capability not in self.config.capabilities:
                reason = "UNKNOWN_CAPABILITY"
            elif (sent_at is None or res.lease_ms is None
                  or not lease.grant(sent_at, res.lease_ms, now)):
                reason = "EXPIRED"
            if reason is not None:
                self.declined_grants += 1
                self._outbox.queue(DeclineOp(self._outbox.new_msg_id(), res.attempt_id,
                                             res.epoch, reason))
                actions.append(event("grant_declined", None, reason, res))
                continue
            att = self._new_attempt(res, Event.GRANTED, lease)
            actions.append(event("reserved", att))
            self._run(att, now, actions)

    def _on_error(self, frame: ErrorFrame, now: float, actions: list[Action]) -> None:
        if frame.code in FATAL_CODES:
            self._fatal(frame.code, frame.message, actions)
        else:
            actions.append(CloseConnection(str(frame.code)))

    def _disconnected(self, now: float) -> list[Action]:
        if self._check_stopped_idle():
            self._link.fire(ConnEvent.ENDED)
            return [event("drained"), EndRun(None)]
        return [Connect(self._link.reconnect_delay())]

    def _check_stopped_idle(self) -> bool:
        return (self.stop_deadline is not None and not self._attempts
                and self._outbox.idle)


def _stuck_at(att: Attempt) -> float | None:
    """When a running attempt whose handler reports no progress is killed: its progress
    timeout after the last sign of life. None: no timeout, a cancel's grace decides, or
    it still waits for a child (prefetch), where no handler of it runs."""
    if att.cancel_at is not None or att.run_state in _WAITING:
        return None
    return att.progress.deadline(att.reservation.progress_timeout_ms)


_WAITING = (RunState.WAITING, RunState.WAITING_TOLD)
