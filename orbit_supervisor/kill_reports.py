"""Kill reports before the reap, and the reap's facts after them (pure).

A killed child is reported at once (``Session.child_killed``): its finish says what was
known the instant the SIGKILL went out, and is never held for a batch. The reap's facts
(exit status, final CPU and RSS, ``reap_ms``) join that report if it has not been sent yet;
otherwise they follow in a second finish of the attempt, a *facts-only* follow-up the
server merges into the attempt (docs/protocol.md, "Kill reports"). Nothing waits for a
follow-up: it is sent again only on a retryable answer.

``KillReports`` knows both kinds by msg_id with the SIGKILL's instant, so every send of one
says how long ago the kill was (``report.kill_age_ms``; a resend says more).
"""

from __future__ import annotations

from collections.abc import Iterable

from msgspec.structs import replace

from orbit_wire.frames import ENDED_COOPERATIVE, ENDED_KILLED, FinishOp, Report
from orbit_wire.model import Outcome, UnknownCode, kill_cause

from .attempts import Attempt, Event
from .outbox import Outbox, Pending

__all__ = ["KillReports", "ended_by", "kill_code"]


def kill_code(kill_reason: str | None) -> str:
    """The finish code of a kill the session decided: its reason (LEASE_LOST,
    ATTEMPT_TIMEOUT, TASK_CANCELLED, SHUTDOWN)."""
    return kill_cause(kill_reason, UnknownCode.LEASE_LOST.value)


def ended_by(att: Attempt, kill_reason: str | None) -> str | None:
    """How the child of an attempt a cancel reached ended (None: no cancel reached it)."""
    if not att.cancel_told:
        return None
    return ENDED_COOPERATIVE if kill_reason is None else ENDED_KILLED


def _with_reap(first: Report, reap: Report) -> Report:
    """The kill report with the reap's facts: what the reap knows wins, the rest stays."""
    return replace(
        first, exit_code=reap.exit_code,
        signal=reap.signal if reap.signal is not None else first.signal,
        cpu_ms=reap.cpu_ms if reap.cpu_ms is not None else first.cpu_ms,
        peak_rss_bytes=(reap.peak_rss_bytes if reap.peak_rss_bytes is not None
                        else first.peak_rss_bytes),
        reap_ms=reap.reap_ms, oom_kills=reap.oom_kills)


class KillReports:
    """Kill reports and facts-only follow-ups by msg_id, with the SIGKILL's instant."""

    __slots__ = ("_facts_only", "_signalled_at")

    def __init__(self) -> None:
        self._signalled_at: dict[str, float] = {}
        self._facts_only: set[str] = set()

    def report(self, att: Attempt, known: Report, msg_id: str, now: float) -> FinishOp:
        """The finish reporting the kill of ``att``'s child, signalled at ``now``; ``known``
        is what was known of the child then."""
        report = replace(known, kill_reason=att.kill_reason, renewals=att.lease.renewals,
                         ended_by=ended_by(att, att.kill_reason))
        # What the handler reported last and no renewal carried: a killed attempt's last
        # details are the next attempt's checkpoint.
        finish = FinishOp(msg_id, att.attempt_id, att.reservation.epoch, Outcome.UNKNOWN,
                          code=kill_code(att.kill_reason), report=report,
                          progress=att.progress.for_finish())
        att.kill_reported(msg_id, report, now)
        self._signalled_at[msg_id] = now
        return finish

    def reaped(self, att: Attempt, reap: Report, outbox: Outbox, now: float) -> None:
        """The reap of ``att``'s reported child: its facts join the kill report if that was
        never sent, else follow in a finish of their own. The attempt's execution is over
        (ENDED); it is forgotten at once if its kill report was answered already."""
        assert att.kill_msg is not None and att.kill_report is not None
        merged = _with_reap(att.kill_report, reap)
        if outbox.replace_unsent_report(att.kill_msg, merged):
            att.kill_report_merged(merged)
            att.fire(Event.ENDED)
            return
        follow = FinishOp(outbox.new_msg_id(), att.attempt_id, att.reservation.epoch,
                          Outcome.UNKNOWN, code=kill_code(att.kill_reason), report=merged)
        self._facts_only.add(follow.msg_id)
        self._signalled_at[follow.msg_id] = att.killed_at if att.killed_at is not None else now
        outbox.queue(follow)
        att.fire(Event.ENDED)
        if att.kill_confirmed:
            att.fire(Event.CONFIRMED)  # the kill report was answered already

    def urgent(self, msg_ids: Iterable[str]) -> bool:
        """Whether a kill report (not a follow-up) is among ``msg_ids``: it goes out at
        once, never held for a batch."""
        return any(msg_id in self._signalled_at and msg_id not in self._facts_only
                   for msg_id in msg_ids)

    def stamp(self, pending: Pending, now: float) -> None:
        """Say in a kill report or follow-up about to be sent how long ago the SIGKILL was."""
        signalled_at = self._signalled_at.get(pending.op.msg_id)
        if signalled_at is not None and isinstance(pending.op, FinishOp):
            age = max(0, round((now - signalled_at) * 1000))
            pending.op = replace(pending.op, report=replace(pending.op.report, kill_age_ms=age))

    def facts_only(self, msg_id: str) -> bool:
        return msg_id in self._facts_only

    def answered(self, msg_id: str) -> None:
        """The finish ``msg_id`` was answered for good: nothing is stamped on it any more."""
        self._signalled_at.pop(msg_id, None)
        self._facts_only.discard(msg_id)
