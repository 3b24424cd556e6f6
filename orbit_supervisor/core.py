"""What every part of the supervisor's session shares (pure: no I/O, no clock).

``SessionCore`` holds the session's state and the moves more than one input makes: start a
confirmed attempt or report it never ran, pass a cancel on, kill, end the execution of a
reaped child, and after every input ``_progress``: queue the starts that have a slot, send
the next request (or hold it for a finish, batching.py), offer credit, finish a drain.
answers.py adds the answers to operations, session.py the inputs; the parts it composes
are the attempt records and their index (attempts.py), the connection (link.py), the
outbox (outbox.py), credit and claims (credit.py), the kill reports (kill_reports.py), the
batch hold (batching.py) and the local-expiry margin (margin.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice

from msgspec.structs import replace

from orbit_wire.errors import ErrorCode
from orbit_wire.frames import (
    Cancel,
    ClaimOp,
    ClientFrame,
    Credit,
    DrainOp,
    FinishOp,
    Op,
    RenewOp,
    Report,
    Reservation,
    StartOp,
)
from orbit_wire.model import Outcome

from .actions import (
    Action,
    CancelChild,
    Emit,
    EndRun,
    Execute,
    Kill,
    SendFrame,
    SupervisorEvent,
)
from .attempts import Attempt, AttemptTable, Event, Phase
from .batching import BatchHold
from .credit import CreditLedger, SlotShare
from .errors import FatalSessionError, ShutdownTimeoutError, SupervisorError
from .kill_reports import KillReports, kill_code
from .lease import Lease
from .link import Conn, ConnEvent, Link
from .margin import MarginEstimator
from .outbox import Outbox, Pending
from .session_types import (
    KILL_LEASE_LOST,
    KILL_SHUTDOWN,
    KILL_TASK_CANCELLED,
    SessionConfig,
    SessionStats,
)

__all__ = ["FINAL_REPORTS_WINDOW", "SessionCore", "event"]

# After the shutdown timeout's kills (or a forced stop's), how long the run waits for the
# server to answer their reports before it ends anyway: the report leaves at once, so a
# task does not sit RUNNING until its lease expires, and the timeout still holds to within
# this window (docs/supervisor.md, "Signals").
FINAL_REPORTS_WINDOW = 0.25

def event(kind: str, att: Attempt | None = None, classification: str | None = None,
          reservation: Reservation | None = None) -> Emit:
    """The Emit action of one public event, about ``att`` (or ``reservation``)."""
    res = att.reservation if att is not None else reservation
    return Emit(SupervisorEvent(
        type=kind,
        task_id=res.task_id if res is not None else None,
        attempt_id=res.attempt_id if res is not None else None,
        classification=classification,
    ))


class SessionCore:
    """The shared state and moves; Session (session.py) is the class to use."""

    def __init__(self, config: SessionConfig, rng: Callable[[], float], *,
                 share: SlotShare | None = None) -> None:
        if not 0 <= config.prefetch <= config.capacity:
            raise ValueError(f"prefetch must be in [0, {config.capacity}] (the capacity)")
        self.config = config
        # rng: uniform [0, 1), the reconnect backoff's jitter.
        self._link = Link(config.reconnect_min_delay, config.reconnect_max_delay, rng)
        self._attempts = AttemptTable()
        self._outbox = Outbox()
        # What the session may hold started or about to start: the children, and the
        # prefetch (which keeps known attempts within the protocol's 2 x capacity); with
        # several queues, what the other queues' sessions hold of them is not offered.
        self._credit = CreditLedger(config.capacity + config.prefetch, share=share,
                                    member=self)
        if share is not None:
            share.join(self)
        self._kill_reports = KillReports()
        self.stop_deadline: float | None = None
        # The run ends with this error once the kills' reports are answered, or at
        # ``final_until`` (the shutdown timeout ran out, or a forced stop).
        self._final: SupervisorError | None = None
        self.final_until: float | None = None
        self.drain_acked = False
        self._drain_queued = False
        self._batching = BatchHold(config.cpus)
        self._hold_until: float | None = None
        self._margin = MarginEstimator(config.report_margin)
        self.late_kills = 0
        self._loop_lag_max = 0.0
        # Counters for stats().
        self.started = 0
        self.renewals_confirmed = 0
        self.reports_confirmed = 0
        self.evidence_confirmed = 0
        self.dropped_reservations = 0
        self.declined_grants = 0
        self.frames_sent = 0
        self.frames_received = 0
        self.ended: dict[str, int] = {}

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
            frames_sent=self.frames_sent, frames_received=self.frames_received,
            grants_declined=self.declined_grants,
        )

    @property
    def attempts(self) -> Mapping[str, Attempt]:
        """Every known attempt by id (read-only: only the session's inputs change them)."""
        return self._attempts.by_id()

    def phase_counts(self) -> dict[Phase, int]:
        """Known attempts per phase (kept incrementally; tests check it against a count)."""
        return self._attempts.phase_counts()

    def queued_ops(self) -> tuple[Op, ...]:
        """The operations waiting for the next request, in queue order (a copy)."""
        return self._outbox.queued_ops()

    def in_flight_ops(self) -> tuple[Op, ...]:
        """The operations of the request awaiting its response, or ()."""
        return self._outbox.in_flight_ops()

    @property
    def conn(self) -> Conn:
        """The connection's state (link.py)."""
        return self._link.state

    @property
    def reconnects(self) -> int:
        return self._link.reconnects

    @property
    def outstanding_credit(self) -> int:
        return self._credit.outstanding

    @property
    def executing(self) -> int:
        return self._attempts.count(Phase.RUNNING, Phase.KILLING)

    @property
    def unconfirmed(self) -> int:
        """Started attempts whose final report the server has not confirmed."""
        return self._attempts.count(Phase.RUNNING, Phase.KILLING, Phase.REPORTING)

    def free_slots(self, finishing: int = 0) -> int:
        """Slots that may be offered (credit.py); ``finishing``: that many REPORTING
        attempts count as confirmed (their finishes ride in the request being built)."""
        return self._credit.free(len(self._attempts), finishing)

    @property
    def done(self) -> bool:
        return self._link.done

    @property
    def ending(self) -> bool:
        """The run is ending: children killed, only their reports still go out."""
        return self._final is not None

    def slots_held(self) -> int:
        """The shared slots this session holds (credit.SlotShare): its known attempts, its
        claims and its credit; at least one while it may still take work."""
        held = len(self._attempts) + self._credit.claiming + self._credit.outstanding
        if self.stop_deadline is None and not self.done:
            return max(1, held)
        return held

    def slots_running(self) -> int:
        """The shared slots whose attempt runs (or is being killed) or is being started."""
        return self.executing + self._attempts.count(Phase.STARTING)

    @property
    def _in_children(self) -> int:
        """Executions that hold a child (a prefetched one beyond the children waits)."""
        return min(self.executing, self.config.capacity)

    # ------------------------------------------------------------------ attempts

    def _new_attempt(self, res: Reservation, arrival: Event,
                     lease: Lease | None = None) -> Attempt:
        att = Attempt(res, lease or Lease(res.lease_ttl_ms, margin=self._margin.value()))
        self._attempts.add(att, arrival)
        return att

    def _started(self, att: Attempt, sent_at: float, lease_ms: int, now: float,
                 actions: list[Action]) -> None:
        """The server confirmed the start of a STARTING attempt: run it, unless the lease
        already ran out locally or the task was cancelled meanwhile."""
        if (not self.ending and att.lease.grant(sent_at, lease_ms, now,
                                                margin=self._margin.value())
                and not att.cancelled):
            self._run(att, now, actions)
            return
        # Confirmed too late (the local lease already ran out), cancelled meanwhile or while
        # the run ends: the handler never runs, and the server hears so at once instead of
        # at lease expiry.
        reason = (KILL_SHUTDOWN if self.ending
                  else KILL_TASK_CANCELLED if att.cancelled else KILL_LEASE_LOST)
        att.lease.lose()
        att.decide_kill(reason)
        att.fire(Event.NOT_RUN)
        finish = FinishOp(self._outbox.new_msg_id(), att.attempt_id, att.reservation.epoch,
                          Outcome.UNKNOWN, code=kill_code(reason),
                          report=Report(kill_reason=reason, renewals=0))
        self._outbox.queue(finish)
        actions.append(event("not_run", att, reason))

    def _run(self, att: Attempt, now: float, actions: list[Action]) -> None:
        """A STARTING attempt whose lease holds runs: its handler is handed to the pool."""
        att.start_running(now)
        self.started += 1
        actions.append(event("started", att))
        actions.append(Execute(att))

    def _on_cancel(self, frame: Cancel, now: float, actions: list[Action]) -> None:
        """A cancel push (or a resume's answer that the task was cancelled)."""
        att = self._attempts.get(frame.attempt_id)
        if att is None or att.reservation.epoch != frame.epoch:
            return
        actions.append(event("cancel_received", att, frame.reason))
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
            actions.append(CancelChild(att))
        elif att.phase is Phase.STARTING:
            att.cancel_while_starting()
        elif att.phase is Phase.RESERVED:
            att.fire(Event.CANCELLED)

    def _kill(self, att: Attempt, reason: str, actions: list[Action], *,
              late_by: float = 0.0) -> None:
        if att.phase is not Phase.RUNNING:
            return
        att.fire(Event.KILLED)
        att.decide_kill(reason)
        self._outbox.drop_ops_of(att.attempt_id)
        att.lease.renewal_dropped()
        actions.append(Kill(att, reason, late_by=late_by))
        actions.append(event("killed", att, reason))

    def _reaped(self, att: Attempt, reap: Report, now: float, actions: list[Action]) -> None:
        """The reap of a child whose kill was reported already (``child_killed``)."""
        if reap.reap_ms is not None:
            self._margin.reap(reap.reap_ms / 1000)
        self._ended(Outcome.UNKNOWN)
        # A renewal in flight at the kill is queued again if the connection drops; the reap
        # ends any need for it.
        self._outbox.drop_ops_of(att.attempt_id)
        self._kill_reports.reaped(att, reap, self._outbox, now)
        actions.append(event("finished", att,
                             f"{Outcome.UNKNOWN.value}:{kill_code(att.kill_reason)}"))
        self._progress(now, actions)

    def _ended(self, outcome: Outcome) -> None:
        self.ended[outcome.value] = self.ended.get(outcome.value, 0) + 1

    # ------------------------------------------------------------------ requests

    def _progress(self, now: float, actions: list[Action]) -> None:
        """After any input: start what has a slot, send queued ops, offer credit, finish."""
        outbox = self._outbox
        if not self.ending:
            self._start_reserved()
        if (self.stop_deadline is not None and not self.drain_acked and not self._drain_queued
                and self._link.ready and not self.ending):
            self._drain_queued = True
            outbox.queue(DrainOp(outbox.new_msg_id()))
        self._hold_until = None  # re-decided below, only while a request could go out
        self._batching.queued(now, outbox.has_queued)
        if (self._link.ready and outbox.in_flight is None and outbox.has_queued
                and not self._hold(now)):
            # Renewals first: when more is queued than one batch holds, leases must not wait.
            batch = outbox.take_batch(self._link.max_batch)
            self._batching.sent(now, outbox.has_queued)
            self._send_request(batch, now, actions)
        self._offer_credit(now, actions)
        self._check_done(now, actions)
        self._check_reported(now, actions)

    def _hold(self, now: float) -> bool:  # sets _hold_until (None: no hold)
        """True to hold back a request while only starts and finishes are queued and a
        handler's finish may join them (batching.py). Never while stopping."""
        if self.stop_deadline is not None or not self._outbox.only_starts_and_finishes():
            return False
        if self._kill_reports.urgent(self._outbox.queued_msg_ids()):
            return False  # a kill report goes out at once
        self._hold_until = self._batching.until(
            now, (a.running_since for a in self._attempts.in_phase(Phase.RUNNING).values()
                  if a.running_since is not None),
            self._in_children)
        return self._hold_until is not None

    def _start_reserved(self) -> None:
        # A start goes out only when a child slot is free, so a confirmed lease never ticks
        # while its handler waits for a child (unless the operator opted in to a prefetch).
        slots = (self._credit.slots - self.slots_running()
                 - self._credit.running_elsewhere())
        if slots <= 0:
            return
        for att in list(islice(self._attempts.in_phase(Phase.RESERVED).values(), slots)):
            att.fire(Event.START_QUEUED)
            op = StartOp(self._outbox.new_msg_id(), att.attempt_id, att.reservation.epoch)
            self._outbox.queue(op)

    def _offer_credit(self, now: float, actions: list[Action]) -> None:
        if not self._link.ready or self.stop_deadline is not None:
            return
        grant = self._credit.offer(len(self._attempts))
        if grant > 0:
            actions.append(self._send(Credit(grant), now))

    def _send_request(self, batch: list[Pending], now: float, actions: list[Action]) -> None:
        if len(batch) >= self._link.max_batch > 1 and self._claim_count(batch):
            # The last op makes room for the claim and goes out in the next request.
            self._outbox.queue_first(batch.pop())
        for pending in batch:
            self._kill_reports.stamp(pending, now)
            # A renewal's first send is what spaces the next one (lease.py), and it carries
            # the handler's latest progress as of now; a resend after a reconnect keeps both.
            if pending.sent_at is None and isinstance(pending.op, RenewOp):
                att = self._attempts.get(pending.op.attempt_id)
                if att is not None:
                    att.lease.renew_sent(now)
                    progress = att.progress.for_renewal()
                    if progress is not None:
                        pending.op = replace(pending.op, progress=progress)
        count = self._claim_count(batch)
        if count and len(batch) < self._link.max_batch:
            claim = ClaimOp(self._outbox.new_msg_id(), count)
            self._credit.claim_sent(count)
            batch.append(Pending(claim, sent_at=now))
        actions.append(self._send(self._outbox.send(batch, now), now))

    def _claim_count(self, batch: list[Pending]) -> int:
        """Slots a claim at the end of this request may fill: those free once its finishes
        are confirmed (the server applies the claim only if they all are), less the credit
        already outstanding."""
        if not self._link.ready or self.stop_deadline is not None:
            return 0
        finishing = sum(1 for p in batch if isinstance(p.op, FinishOp)
                        and not self._kill_reports.facts_only(p.op.msg_id)
                        and (att := self._attempts.get(p.op.attempt_id)) is not None
                        and att.phase is Phase.REPORTING)
        return self._credit.claimable(len(self._attempts), finishing)

    def _send(self, frame: ClientFrame, now: float) -> SendFrame:
        self._link.sent(now)
        self.frames_sent += 1
        return SendFrame(frame)

    # ------------------------------------------------------------------ the end

    def _check_done(self, now: float, actions: list[Action]) -> None:
        if (self.stop_deadline is None or not self.drain_acked or self._attempts
                or not self._outbox.idle or self.done or self.ending):
            return
        self._link.fire(ConnEvent.ENDED)
        actions.append(event("drained"))
        actions.append(EndRun(None))

    def _end_with_timeout(self, now: float, actions: list[Action], *,
                          forced: bool = False) -> None:
        """Kill what runs (kill reason SHUTDOWN) and send the kills' reports, as any kill's,
        for at most FINAL_REPORTS_WINDOW; then the run ends with ShutdownTimeoutError."""
        if self.ending:
            return
        running, unconfirmed = self.executing, self.unconfirmed
        why = ("forced stop" if forced
               else f"shutdown timeout ({self.config.shutdown_timeout:g} s) ran out")
        self._final = ShutdownTimeoutError.of(why, unconfirmed=unconfirmed, running=running)
        self.final_until = now + FINAL_REPORTS_WINDOW
        actions.append(event("shutdown_timeout"))
        for att in list(self._attempts):
            self._kill(att, KILL_SHUTDOWN, actions)  # each report is queued as it is killed
        self._outbox.keep_only_reports()
        if not self._link.ready:
            self._end_final(actions)  # no connection to report on
            return
        self._progress(now, actions)

    def _check_reported(self, now: float, actions: list[Action]) -> None:
        """While the run ends: end it once every kill's report (and every finish queued
        before) was answered, or the window is over."""
        if not self.ending or self.done:
            return
        reported = (self._outbox.idle
                    and not self._attempts.count(Phase.RUNNING)
                    and all(att.kill_msg is not None
                            for att in self._attempts.in_phase(Phase.KILLING).values()))
        if reported or (self.final_until is not None and now >= self.final_until):
            self._end_final(actions)

    def _end_final(self, actions: list[Action]) -> None:
        assert self._final is not None
        self._link.fire(ConnEvent.ENDED)
        self._outbox.abandon()
        actions.append(EndRun(self._final))

    def _fatal(self, code: ErrorCode, message: str, actions: list[Action]) -> None:
        self._end(actions, event("fatal", classification=str(code)), FatalSessionError(
            code, message, unconfirmed=self.unconfirmed, running=self.executing))

    def _end(self, actions: list[Action], told: Emit, error: SupervisorError) -> None:
        """End the run with ``error``: kill what still runs, abandon what is unanswered."""
        for att in self._attempts:
            self._kill(att, KILL_SHUTDOWN, actions)
        self._link.fire(ConnEvent.ENDED)
        self._outbox.abandon()
        actions.append(told)
        actions.append(EndRun(error))
