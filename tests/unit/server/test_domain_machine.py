"""A hypothesis state machine over the pure domain: one task, its attempts, a fake clock,
and any interleaving of worker reports, reaper passes, cancels and reviews.

Invariants checked after every step: no two open attempts, epochs increase, a retry after a
lost lease waits for expiry + kill grace, `uncertain` never goes back to false, a failed
rule changes nothing, evidence changes nothing, terminal states stay terminal.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from orbit_server import domain
from orbit_server.domain import AttemptRec, Backoff, CheckedReport, Decision, TaskRec
from orbit_wire.errors import OrbitError
from orbit_wire.model import AttemptState, Idempotency, Outcome, TaskState

INSTANCE = "i" * 32
GRACE = 2_000
T0 = 10_000_000
OPEN = (AttemptState.RESERVED, AttemptState.RUNNING)
TERMINAL = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED)

reports = st.one_of(
    st.just(CheckedReport(Outcome.SUCCEEDED, None, False, "1", None)),
    st.builds(lambda r: CheckedReport(Outcome.FAILED, "X", r, None, "{}"), st.booleans()),
    st.sampled_from(["HANDLER_ERROR", "HANDLER_CRASHED", "LEASE_LOST"]).map(
        lambda c: CheckedReport(Outcome.UNKNOWN, c, False, None, None)),
)


class TaskMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.task: TaskRec | None = None
        self.attempts: list[AttemptRec] = []
        self.ever_uncertain = False
        self.terminal_seen: TaskState | None = None
        self.started = 0
        self.review_bonus = 0

    # ------------------------------------------------------------------ setup

    @initialize(idem=st.sampled_from(list(Idempotency)), max_attempts=st.integers(1, 4),
                initial=st.sampled_from([0, 0, 100, 3_000]), ttl=st.integers(100, 5_000),
                timeout=st.integers(100, 20_000), deadline=st.integers(100, 120_000))
    def submit(self, idem: Idempotency, max_attempts: int, initial: int, ttl: int,
               timeout: int, deadline: int) -> None:
        self.task = TaskRec(
            id="t" * 32, queue_id="q" * 32, state=TaskState.PENDING, idempotency=idem,
            max_attempts=max_attempts, backoff=Backoff(initial, max(initial, 10_000), 2.0, 0.5),
            attempt_timeout_ms=timeout, lease_ttl_ms=ttl, deadline_at_ms=self.now + deadline,
            available_at_ms=self.now,
        )

    # ------------------------------------------------------------------ helpers

    def _guarded(self, fn: Any, *args: Any) -> Any:
        """Call a rule; when it raises, nothing may have changed."""
        before = (copy.deepcopy(self.task), copy.deepcopy(self.attempts))
        try:
            return fn(*args)
        except OrbitError:
            assert (self.task, self.attempts) == before, fn.__name__
            return None

    def _current(self) -> AttemptRec | None:
        return self.attempts[-1] if self.attempts else None

    # ------------------------------------------------------------------ rules

    @precondition(lambda self: self.task is not None)
    @rule(ms=st.integers(0, 8_000))
    def advance(self, ms: int) -> None:
        self.now += ms

    @precondition(lambda self: bool(self.attempts)
                  and self.attempts[-1].state is AttemptState.RUNNING)
    @rule(draw=st.floats(0, 0.999))
    def worker_vanishes(self, draw: float) -> None:
        """The reaper runs the moment the lease of a silent worker expires."""
        a = self.attempts[-1]
        assert a.lease_expires_at_ms is not None
        self.now = max(self.now, a.lease_expires_at_ms)
        self.reap_lease(draw)

    @precondition(lambda self: bool(self.attempts)
                  and self.attempts[-1].state is AttemptState.RUNNING)
    @rule(draw=st.floats(0, 0.999), report=reports)
    def lease_lost_then_eager_worker(self, draw: float, report: CheckedReport) -> None:
        """A worker vanishes, and another asks for work as early as the server allows."""
        self.worker_vanishes(draw)
        assert self.task is not None
        if self.task.state is TaskState.PENDING:
            self.worker_runs_one(report, draw, True)

    @precondition(lambda self: self.task is not None
                  and self.task.state is TaskState.PENDING)
    @rule(report=reports, draw=st.floats(0, 0.999), wait=st.booleans())
    def worker_runs_one(self, report: CheckedReport, draw: float, wait: bool) -> None:
        """A well-behaved worker: wait for availability, reserve, start, report at once."""
        assert self.task is not None
        if wait:
            self.now = max(self.now, self.task.available_at_ms)
        self.reserve()
        if self.attempts and self.attempts[-1].state is AttemptState.RESERVED:
            self.start(False)
            self.finish(report, 0, draw)

    @precondition(lambda self: self.task is not None)
    @rule()
    def reserve(self) -> None:
        assert self.task is not None
        aid = f"{len(self.attempts) + 1:032x}"
        a = self._guarded(domain.reserve, self.task, aid, INSTANCE, self.now)
        if a is not None:
            # A retry after a lost lease is never dispatched before expiry + kill grace.
            for old in self.attempts:
                if old.code == "LEASE_EXPIRED":
                    assert old.lease_expires_at_ms is not None
                    assert self.now >= old.lease_expires_at_ms + GRACE
            self.attempts.append(a)

    @precondition(lambda self: bool(self.attempts))
    @rule(stale=st.booleans())
    def start(self, stale: bool) -> None:
        assert self.task is not None
        a = self._current()
        assert a is not None
        before = a.state
        lease = self._guarded(domain.start, self.task, a, a.epoch - int(stale), INSTANCE, None,
                              self.now)
        if lease is not None:
            assert lease > 0 and not stale
            if before is AttemptState.RESERVED:
                self.started += 1

    @precondition(lambda self: bool(self.attempts))
    @rule()
    def renew(self) -> None:
        assert self.task is not None
        a = self._current()
        assert a is not None
        lease = self._guarded(domain.renew, self.task, a, a.epoch, INSTANCE, self.now)
        if lease is not None:
            expires = a.lease_expires_at_ms
            assert expires == self.now + lease
            assert a.attempt_deadline_at_ms is not None
            assert expires is not None and expires <= min(a.attempt_deadline_at_ms,
                                                self.task.deadline_at_ms)

    @precondition(lambda self: bool(self.attempts))
    @rule(report=reports, which=st.integers(0, 3), draw=st.floats(0, 0.999))
    def finish(self, report: CheckedReport, which: int, draw: float) -> None:
        assert self.task is not None
        a = self.attempts[-1 - min(which, len(self.attempts) - 1)]
        before = (copy.deepcopy(self.task), copy.deepcopy(self.attempts))
        uncertain_before = self.task.uncertain
        result = self._guarded(domain.finish, self.task, a, a.epoch, INSTANCE, report,
                               self.now, draw)
        if result is None:
            return
        if result.evidence is not None:
            assert (self.task, self.attempts) == before  # evidence never changes anything
            return
        verdict = result.verdict
        if verdict is not None and verdict.decision is Decision.RETRY:
            assert self.task.idempotency is Idempotency.IDEMPOTENT or (
                report.outcome is Outcome.FAILED and not uncertain_before)
        if verdict is not None and verdict.decision is Decision.SUCCEEDED:
            assert report.outcome is Outcome.SUCCEEDED

    @precondition(lambda self: bool(self.attempts))
    @rule(draw=st.floats(0, 0.999))
    def reap_lease(self, draw: float) -> None:
        assert self.task is not None
        a = self._current()
        assert a is not None
        if a.state is AttemptState.RUNNING and a.lease_expires_at_ms is not None \
                and self.now >= a.lease_expires_at_ms:
            domain.expire(self.task, a, self.now, draw, GRACE)
            assert str(a.state) == AttemptState.FINISHED.value and self.task.uncertain

    @precondition(lambda self: bool(self.attempts))
    @rule()
    def release(self) -> None:
        assert self.task is not None
        a = self._current()
        assert a is not None
        self._guarded(domain.release, self.task, a, self.now, domain.Rule.SESSION_ENDED)

    @precondition(lambda self: self.task is not None)
    @rule()
    def reap_deadline(self) -> None:
        assert self.task is not None
        if self.task.state is TaskState.PENDING:
            self._guarded(domain.expire_deadline, self.task, self.now)

    @precondition(lambda self: self.task is not None)
    @rule()
    def cancel(self) -> None:
        assert self.task is not None
        self._guarded(domain.cancel, self.task, self._current(), self.now)

    @precondition(lambda self: self.task is not None)
    @rule(action=st.sampled_from(list(domain.ReviewAction)))
    def review(self, action: domain.ReviewAction) -> None:
        assert self.task is not None
        not_before = domain.retry_not_before(self._current(), GRACE)
        self._guarded(domain.review, self.task, action, "2", "{}", self.now, not_before)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def consistent(self) -> None:
        t = self.task
        if t is None:
            return
        open_attempts = [a for a in self.attempts if a.state in OPEN]
        assert len(open_attempts) <= 1
        assert [a.epoch for a in self.attempts] == list(range(1, len(self.attempts) + 1))
        assert t.epoch == len(self.attempts)
        assert t.attempts_started == self.started
        assert t.attempts_started == sum(a.started_at_ms is not None for a in self.attempts)
        if t.state is TaskState.RUNNING:
            cur = self._current()
            assert cur is not None and cur.id == t.current_attempt_id and cur.state in OPEN
        if t.state is TaskState.PENDING:
            assert t.current_attempt_id is None and not open_attempts
        if t.state is TaskState.SUCCEEDED:
            assert t.result is not None
        if t.state is TaskState.FAILED:
            assert t.failure_code is not None and t.failure_details is not None
        for a in self.attempts:
            if a.lease_expires_at_ms is not None:
                assert a.attempt_deadline_at_ms is not None
                assert a.lease_expires_at_ms <= a.attempt_deadline_at_ms
            if a.state is AttemptState.FINISHED:
                assert a.outcome is not None and a.decision is not None
        # uncertain is monotone: nothing but a new uncertain outcome touches it.
        if self.ever_uncertain:
            assert t.uncertain
        self.ever_uncertain = t.uncertain
        # Terminal states stay terminal.
        if self.terminal_seen is not None:
            assert t.state is self.terminal_seen
        elif t.state in TERMINAL:
            self.terminal_seen = t.state


TaskMachine.TestCase.settings = settings(max_examples=400, stateful_step_count=40,
                                         deadline=None)
test_task_machine = TaskMachine.TestCase
