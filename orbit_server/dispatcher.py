"""Credit-based dispatch: in-memory worker sessions, their credits, dispatch passes, and the
one claim routine.

A session is one worker connection after a successful ``hello``. Credits are additive and
spent one per reservation sent; outstanding credit above 2 x capacity is LIMIT_EXCEEDED.

Work reaches a session only through ``Dispatcher.claim``: under ``session.lock`` it reads
what the session may take (``ClaimRoom``), runs the transaction that takes it, books what it
took against the session's credit and queues the ``reserve`` frame. Three callers use it: a
dispatch pass (``WorkerService.reserve``, up to the session's credit), a submit that finds a
session waiting for its capability (``with_claim``: ``TaskService.submit_and_reserve``, the
new task reserved in the submit's own transaction), and a worker request's ``claim`` ops
(``WorkerService.apply_ops``, answered in the request's response).

Passes are triggered by hints: a queue that got dispatchable tasks, new credit, the reaper's
timer, and a slow poll (tasks made ready by another replica). Everything here runs on the
event loop; transactions run on the store thread. Within a pass the session served least
recently claims first, so no worker starves another.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from orbit_host.task_owner import TaskOwner
from orbit_wire.errors import ErrorCode
from orbit_wire.frames import Cancel, ClaimOp, Op, OpResult, Reserve, ServerFrame
from orbit_wire.labels import labels_match
from orbit_wire.limits import MAX_RESERVATIONS_PER_FRAME
from orbit_wire.model import Capability

from .services import (
    NO_CLAIMS,
    ClaimRoom,
    Effects,
    Reservations,
    WorkerBinding,
    WorkerService,
)
from .services.binding import Presence
from .store.retry import faults_logged
from .store_thread import StoreThread
from .worker_protocol import SessionCredit

T = TypeVar("T")

log = logging.getLogger("orbit.dispatch")


class WorkerSession:
    """Dispatch state of one connected worker instance.

    ``credit`` is the connection's (its protocol checks frames against the same record).
    ``send`` must not block (it queues the frame on the connection); ``close`` asks the
    connection to close with a WebSocket close code, ``fatal`` to send a fatal ``error``
    frame and close with its code. ``lock`` is held while a claim is made and its frame
    queued, so a ``drain`` answer can wait for an in-flight claim.
    """

    def __init__(self, session_id: str, binding: WorkerBinding, credit: SessionCredit,
                 send: Callable[[ServerFrame], None], close: Callable[[int, str], None],
                 fatal: Callable[[ErrorCode, str], None]) -> None:
        self.session_id = session_id
        self.binding = binding
        self.credit = credit
        self.send = send
        self.close = close
        self.fatal = fatal
        self.draining = False
        self.closed = False
        self.lock = asyncio.Lock()
        self.reserved_total = 0
        # True after a claim found less work than it asked for: new credit alone then does
        # not trigger a claim (it would find nothing); a hint that work arrived does.
        self.exhausted = False
        self.served_seq = 0  # when this session last received reservations (dispatch order)
        # (attempt, epoch) of the cancel frames sent: a cancel read again from the pushes
        # table (another replica's poll overlap) is not sent twice.
        self.cancels_sent: set[tuple[str, int]] = set()
        self.last_frame_at = 0.0  # event-loop time of the last frame received (presence)
        # The worker's frames read on this connection so far, kept by its driver: a grant's
        # basis (docs/protocol.md, "Grants").
        self.frames_read = 0

    @property
    def instance_id(self) -> str:
        return self.binding.instance_id

    @property
    def queue_id(self) -> str:
        return self.binding.queue_id

    @property
    def capacity(self) -> int:
        return self.credit.capacity

    @property
    def credits(self) -> int:
        return self.credit.outstanding

    @property
    def wants_work(self) -> bool:
        return self.credits > 0 and not self.draining and not self.closed


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a claim's transaction took for its session.

    ``reserved`` go out in one ``reserve`` frame and spend a credit each; ``asked`` is how
    many the session's credit asked for (None: the claim did not spend credit). ``started``
    reservations were answered in a request's response instead, and ``credited`` is the
    credit that request's ``claim`` ops left."""

    reserved: Reservations = field(default_factory=Reservations)
    asked: int | None = None
    started: int = 0
    credited: int = 0
    effects: Effects | None = None  # a pass's transaction's, acted on once it is booked


def claimed_by(ops: Sequence[Op], results: Sequence[OpResult]) -> Claimed:
    """What a request's ``claim`` ops took, from their answers."""
    started = credited = 0
    for op, result in zip(ops, results, strict=True):
        if isinstance(op, ClaimOp) and result.ok:
            started += len(result.claimed or ())
            credited += result.credited or 0
    return Claimed(started=started, credited=credited)


# A claim's transaction: given what the session may take, it takes it (on the store thread)
# and answers its own value and what it took.
ClaimTransaction = Callable[[ClaimRoom], Awaitable[tuple[T, Claimed]]]


class Dispatcher:
    """Sessions by instance and queue, and the single task that runs dispatch passes."""

    def __init__(self, store: StoreThread, workers: WorkerService,
                 act_on: Callable[[Effects], None]) -> None:
        self._store = store
        self._workers = workers
        self._act_on = act_on
        self._by_instance: dict[str, WorkerSession] = {}
        self._by_queue: dict[str, dict[str, WorkerSession]] = {}
        self._dirty: dict[str, WorkerSession] = {}  # insertion-ordered set, by session_id
        self._wake = asyncio.Event()
        # Set while no pass is due or under way: every hint so far has been acted on.
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks = TaskOwner(log)  # the task that runs the passes
        self._served = itertools.count(1)
        # Hellos admitted under the session limits whose session is not attached yet, by
        # credential: they count against the limits like the sessions they will become.
        self._admitting: dict[str, int] = {}

    # -------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._tasks.start(self._run(), "orbit-dispatcher")

    async def stop(self) -> None:
        await self._tasks.stop()

    # -------------------------------------------------------------- sessions

    def current(self, instance_id: str) -> WorkerSession | None:
        return self._by_instance.get(instance_id)

    def attach(self, session: WorkerSession) -> None:
        """Register a session. The caller has already retired any older session of the
        same instance (``detach`` + release), so there is none here."""
        self._by_instance[session.instance_id] = session
        self._by_queue.setdefault(session.queue_id, {})[session.session_id] = session

    def admit(self, credential_id: str, instance_id: str, per_credential: int,
              in_all: int) -> bool:
        """Whether a hello of this credential and instance fits the session limits (the
        instance's current session, which it would replace, not counted); if so it counts as
        a session until ``admitted`` is called, so hellos under way cannot together exceed
        the limits."""
        older = self._by_instance.get(instance_id)
        mine = self._admitting.get(credential_id, 0) + sum(
            1 for s in self._by_instance.values()
            if s.binding.credential_id == credential_id and s is not older)
        total = (len(self._by_instance) - (older is not None)
                 + sum(self._admitting.values()))
        if mine >= per_credential or total >= in_all:
            return False
        self._admitting[credential_id] = self._admitting.get(credential_id, 0) + 1
        return True

    def admitted(self, credential_id: str) -> None:
        """The hello ``admit`` let in has attached its session or failed."""
        left = self._admitting.pop(credential_id, 0) - 1
        if left > 0:
            self._admitting[credential_id] = left

    def detach(self, session: WorkerSession) -> bool:
        """Forget a session; True when it was the instance's current session (then the
        caller releases the instance's unstarted reservations)."""
        session.closed = True
        self._dirty.pop(session.session_id, None)
        queue = self._by_queue.get(session.queue_id)
        if queue is not None:
            queue.pop(session.session_id, None)
            if not queue:
                del self._by_queue[session.queue_id]
        if self._by_instance.get(session.instance_id) is session:
            del self._by_instance[session.instance_id]
            return True
        return False

    def sessions(self) -> list[WorkerSession]:
        return list(self._by_instance.values())

    def presence(self, now_ms: int, loop_now: float) -> list[Presence]:
        """What the presence write records of every current session: its credit and the
        wall-clock instant of its last frame."""
        return [Presence(s.instance_id, s.binding.connected_at_ms, s.credits,
                         now_ms - max(0, int((loop_now - s.last_frame_at) * 1000)))
                for s in self._by_instance.values() if not s.closed]

    # -------------------------------------------------------------- hints

    def credit_added(self, session: WorkerSession) -> None:
        """The session's credit grew (a ``credit`` frame its protocol took): claim for it,
        unless the last claim found the queue empty (then only a work hint claims)."""
        if session.wants_work and not session.exhausted:
            self._mark(session)

    # -------------------------------------------------------------- the claim routine

    async def claim(self, session: WorkerSession, transaction: ClaimTransaction[T]) -> T:
        """THE claim routine: under ``session.lock`` (no other claim for this session
        meanwhile, and a ``drain`` answer can wait for it), read what the session may take
        now, run ``transaction`` on it, book what it took and queue its ``reserve`` frame.
        Returns the transaction's own value."""
        async with session.lock:
            room = self._room(session)
            value, claimed = await transaction(room)
            self._book(session, claimed)
            if claimed.reserved:
                # Granted reservations name the worker frame their lease is counted from.
                session.send(Reserve(tuple(claimed.reserved),
                                     basis=room.basis if session.binding.grants else None))
            if claimed.effects is not None:
                self._act_on(claimed.effects)
            return value

    async def with_claim(self, queue_id: str, capability: Capability | None,
                         transaction: Callable[[WorkerBinding | None, int],
                                               tuple[T, Reservations]],
                         requires: Mapping[str, str] | None = None) -> T:
        """Run ``transaction`` (new work of ``capability`` in ``queue_id``) on the store
        thread; when a session of the queue waits with credit for that capability (with the
        labels the work ``requires``), through the claim routine, so the same transaction
        reserves for it (``binding`` and a count are then given; else None and 0)."""
        session = None if capability is None else self._idle_session(queue_id, capability,
                                                                      requires)
        if session is None:
            value, _none = await self._store.call(transaction, None, 0)
            return value

        async def reserving(room: ClaimRoom) -> tuple[T, Claimed]:
            # The worker lane, like every claim: a release for this session (its connection
            # closing) is submitted later and so runs after this reserve (FIFO per lane).
            value, reserved = await self._store.call_worker(transaction, session.binding,
                                                            room.count)
            return value, Claimed(reserved, room.count)

        return await self.claim(session, reserving)

    def _idle_session(self, queue_id: str, capability: Capability,
                      requires: Mapping[str, str] | None = None) -> WorkerSession | None:
        """A session of ``queue_id`` serving ``capability`` (with every label ``requires``
        names) that waits with credit and is not claiming right now (least recently served
        first), or None."""
        best: WorkerSession | None = None
        for session in self._by_queue.get(queue_id, {}).values():
            if (session.wants_work and not session.lock.locked()
                    and capability in session.binding.capabilities
                    and (not requires or labels_match(session.binding.labels, requires))
                    and (best is None or session.served_seq < best.served_seq)):
                best = session
        return best

    def _room(self, session: WorkerSession) -> ClaimRoom:
        """What a claim for ``session`` may take now: reservations up to its credit, or
        claim ops within the credit bound; nothing while it drains or closes."""
        if session.draining or session.closed:
            return NO_CLAIMS
        return ClaimRoom(True, session.credit.room,
                         min(session.credits, MAX_RESERVATIONS_PER_FRAME),
                         basis=session.frames_read)

    def _book(self, session: WorkerSession, claimed: Claimed) -> None:
        """Spend credit on what a claim reserved, add what its claim ops left, and decide
        whether the session claims again without a hint."""
        reserved = claimed.reserved
        if reserved:
            session.credit.spend(len(reserved))
        if reserved or claimed.started:
            session.served_seq = next(self._served)
            session.reserved_total += len(reserved) + claimed.started
        if claimed.credited:
            session.credit.refund(claimed.credited)
            # The claim found less work than slots: only a hint that work arrived claims
            # again (new credit alone would find nothing).
            session.exhausted = True
        if claimed.asked is None:
            return
        if (len(reserved) < claimed.asked or reserved.drained) and not reserved.more:
            session.exhausted = True  # the queue had no more: only a work hint claims again
        elif session.wants_work:
            # A full batch, or one a frame's payload budget ended: there may be more work.
            self._mark(session)

    def stop_dispatching(self, session: WorkerSession) -> None:
        """After a drain: no more reservations for this session."""
        session.draining = True
        self._dirty.pop(session.session_id, None)

    def queues_ready(self, queue_ids: Iterable[str]) -> None:
        for queue_id in queue_ids:
            for session in self._by_queue.get(queue_id, {}).values():
                self._hint(session)

    def poll_all(self) -> None:
        for session in self._by_instance.values():
            self._hint(session)

    def _hint(self, session: WorkerSession) -> None:
        """Work may have arrived: claim now, or at the session's next credit (a session
        without credit may have been left exhausted by a claim that drained the queue)."""
        if session.wants_work:
            self._mark(session)
        else:
            session.exhausted = False

    def push_cancel(self, instance_id: str, attempt_id: str, epoch: int) -> None:
        """Tell the worker holding this attempt (if connected here) that its task was cancelled."""
        session = self._by_instance.get(instance_id)
        if session is not None and not session.closed:
            if (attempt_id, epoch) in session.cancels_sent:
                return
            session.cancels_sent.add((attempt_id, epoch))
            session.send(Cancel(attempt_id, epoch, "TASK_CANCELLED"))

    def close_credential(self, credential_id: str, message: str) -> int:
        """End every session of this credential here (it was revoked): a fatal
        UNAUTHENTICATED error frame, then close 4006. Returns how many were closed."""
        closing = [s for s in self._by_instance.values()
                   if s.binding.credential_id == credential_id and not s.closed]
        for session in closing:
            self.stop_dispatching(session)  # no claim for it from now on
            session.fatal(ErrorCode.UNAUTHENTICATED, message)
        return len(closing)

    def _mark(self, session: WorkerSession) -> None:
        session.exhausted = False
        self._dirty[session.session_id] = session
        self._idle.clear()
        self._wake.set()

    async def settled(self) -> None:
        """Return once every hint given so far has been acted on: no dispatch pass is due
        and none is under way (its reserve frames already queued on their connections)."""
        await self._idle.wait()

    # -------------------------------------------------------------- passes

    async def _run(self) -> None:
        while True:
            if not self._wake.is_set():
                self._idle.set()
            await self._wake.wait()
            self._wake.clear()
            # Bounded: every round either empties the dirty set or re-marks only sessions
            # that received a full batch, which spends their credit.
            while self._dirty:
                await self._round()

    async def _round(self) -> None:
        # Least recently served first: a session that just got work waits for the others.
        batch = sorted(self._dirty.values(), key=lambda s: s.served_seq)
        self._dirty.clear()
        for session in batch:
            # A failing store must not end dispatching for everyone; a later hint retries.
            with faults_logged(log, "dispatch claim failed for session %s", session.session_id,
                               event="dispatch_failed", instance_id=session.instance_id,
                               queue_id=session.queue_id):
                await self._claim(session)

    async def _claim(self, session: WorkerSession) -> None:
        if session.wants_work:
            await self.claim(session, partial(self._reserve, session.binding))

    async def _reserve(self, binding: WorkerBinding, room: ClaimRoom) -> tuple[None, Claimed]:
        """A pass's transaction: up to the session's credit. The room is read under the
        lock (a drain or close may have come in meanwhile), and from there to the store
        submission there is no await, so a close that comes later submits its release
        after this reserve (the store thread is FIFO)."""
        if not room.count:
            return None, Claimed()
        reserved = await self._store.call_worker(self._workers.reserve, binding, room.count)
        return None, Claimed(reserved, room.count, effects=reserved.effects)
