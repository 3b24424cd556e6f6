"""The session's answers to its operations (pure: no I/O, no clock).

One response answers the request in flight, result by result in request order: a start's
grant runs the attempt (or reports it never ran), a renewal's grant moves its lease (or
kills), a finish's confirmation forgets the attempt (a kill report's keeps it until the
reap), a claim's answer brings started attempts and credit, the resume's answer grants or
kills what ran across the reconnect, the drain's acknowledges it. A retryable error queues
the operation again with its msg_id, so the server's receipt answers it once. A decline's
answer ends it either way: the grant is released, now or already.
"""

from __future__ import annotations

from orbit_wire.errors import RETRYABLE_CODES, ErrorCode
from orbit_wire.frames import (
    Cancel,
    ClaimOp,
    DeclineOp,
    DrainOp,
    FinishOp,
    OpResult,
    RenewOp,
    Response,
    ResumeOp,
    StartOp,
)
from orbit_wire.model import Disposition

from .actions import Action
from .attempts import Event, Phase
from .core import SessionCore, event
from .link import Conn, ConnEvent
from .session_types import KILL_ATTEMPT_TIMEOUT, KILL_LEASE_LOST, KILL_TASK_CANCELLED

__all__ = ["SessionAnswers"]


class SessionAnswers(SessionCore):
    """The answers; Session (session.py) is the class to use."""

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
                    actions.append(event("drain_acknowledged"))
                case DeclineOp() as op:
                    if not result.ok and result.error_code in RETRYABLE_CODES:
                        self._outbox.queue(op, sent_at)  # same msg_id: applied once
                    # Otherwise done: released, or the server had released it already
                    # (a resume on a newer connection, the lease's end).
            if self.done:
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
            actions.append(event("start_rejected", att, str(result.error_code)))
            return
        self._started(att, sent_at, result.lease_ms or 0, now, actions)

    def _on_claim_result(self, op: ClaimOp, result: OpResult, sent_at: float, now: float,
                         actions: list[Action]) -> None:
        if not result.ok and result.error_code in RETRYABLE_CODES:
            # The claim may have been applied (a commit whose answer was lost): only its
            # receipt tells, so it goes again with its msg_id and keeps its slots meanwhile.
            self._outbox.queue(op, sent_at)
            return
        if not result.ok:
            # Nothing was claimed; the slots are offered again as credit.
            self._credit.claim_answered(op.count, 0)
            return
        self._credit.claim_answered(op.count, result.credited or 0)
        for res in result.claimed or ():
            if res.attempt_id in self._attempts:
                continue  # a duplicate confirmation only reconciles
            att = self._new_attempt(res, Event.CLAIMED)
            actions.append(event("reserved", att))
            self._started(att, sent_at, res.lease_ms or 0, now, actions)

    def _on_renew_result(self, op: RenewOp, result: OpResult, sent_at: float, now: float,
                         actions: list[Action]) -> None:
        att = self._attempts.get(op.attempt_id)
        if att is None:
            return
        # Applied or not, its progress is settled: the next renewal or the finish carries
        # what it did not.
        att.progress.renewal_answered(result.ok)
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
        if self._kill_reports.facts_only(op.msg_id):
            # Reap facts after a sent kill report: sent again only on a retryable answer,
            # and nothing waits for them.
            if retry:
                self._outbox.queue(op)
            else:
                self._kill_reports.answered(op.msg_id)
            return
        att = self._attempts.get(op.attempt_id)
        early = att is not None and att.phase is Phase.KILLING and att.kill_msg == op.msg_id
        if att is None or not (att.phase is Phase.REPORTING or early):
            return
        if retry:
            self._outbox.queue(op)
            return
        self._kill_reports.answered(op.msg_id)
        if early:
            att.kill_report_confirmed()  # the attempt keeps its slot until the reap
        else:
            att.fire(Event.CONFIRMED)
        if not result.ok:
            actions.append(event("report_rejected", att, str(result.error_code)))
        elif result.disposition is Disposition.EVIDENCE_ONLY:
            self.evidence_confirmed += 1
            actions.append(event("report_confirmed", att, Disposition.EVIDENCE_ONLY.value))
        else:
            self.reports_confirmed += 1
            actions.append(event("report_confirmed", att, Disposition.ACCEPTED.value))

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
