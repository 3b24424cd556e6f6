"""ChildPool: the supervisor's pool of handler processes (docs/supervisor.md, "Python API").

Shape:

    supervisor (this module, asyncio)
      ├── control socket (SOCK_SEQPACKET) ── template (python -m orbit_child.template)
      │                                        ├── child g=1  (own process group, subreaper)
      │                                        ├── child g=2
      └── one stream socket per child ─────────┘  ...

The parent never imports handler code; the template does, once, and forks children on
request. The parent creates each child's socketpair and hands one end to the template with
SCM_RIGHTS. Every frame carries the child's generation; a frame with another generation is
logged and ignored, and a result for an attempt that was already killed is dropped.

``kill`` signals the child's process group synchronously (then known descendants that left
it); the pending ``execute`` returns when the template reports the reap, so the outcome
carries the exit status and the rusage figures. The replacement is forked right after the
signal, while the old child dies (a ``_Dying`` record waits for its reap report). Children
that die on their own are replaced when their death is seen; one that dies before it was
ever ready is respawned with backoff, so a broken environment cannot fork in a tight loop.
The parts live apart: each slot's lifecycle as a transition table (slots.py), the child's
socket I/O (channel.py), the memory watch (memory.py), the template process
(template_link.py) and the answer checks (outcomes.py). What stays here is the pool's own
decisions: which child serves which call, when a child is killed, replaced or recycled,
and how a lost template is restarted; it is one owner of the children, and longer than
its parts for that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import socket
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from orbit_host import procutil
from orbit_host.backoff import delays
from orbit_host.framing import FrameError, encode_frame
from orbit_host.logs import fields
from orbit_host.messages import (
    CancelTask,
    ChildReady,
    ChildReaped,
    LeaveChild,
    MalformedMessage,
    RunTask,
    decode_from_child,
)
from orbit_host.tally import Buckets
from orbit_wire.errors import ErrorCode, HandlerSpecError, OrbitError, ValueRejected
from orbit_wire.frames import Report
from orbit_wire.model import Capability, UnknownCode
from orbit_wire.names import is_code

from .channel import ChildChannel
from .child_output import OutputReader, output_pipe
from .memory import ChildMemory
from .orphans import OrphanReaper
from .outcomes import ChildOutcome, outcome_from_done, uncertain
from .owner import TaskOwner
from .slots import SlotCounts, SlotEvent, SlotLifecycle, SlotState, count_being_replaced
from .template_link import TemplateLink

__all__ = [
    "ChildOutcome",
    "ChildPool",
    "ExecutionRequest",
    "KillFacts",
    "PoolClosed",
    "PoolStats",
]

_TEMPLATE_START_TIMEOUT_S = 60.0
_CHILD_START_TIMEOUT_S = 30.0
_GRACEFUL_EXIT_S = 2.0  # a recycled child that does not leave by then is killed
_REAP_TIMEOUT_S = 5.0  # a kill whose reap is never reported still ends execute()
_TEMPLATE_EXIT_S = 5.0
_FIRST_RESPAWN_DELAY_S = 0.05  # a child that died before it was ready (doubling)
_FIRST_RESTART_DELAY_S = 0.1  # a lost template that cannot be started again (doubling)
_MAX_RESPAWN_DELAY_S = 5.0
_CHILD_LOG = logging.getLogger("orbit.child")


class PoolClosed(OrbitError):
    """The pool was closed (or its template died) while a caller waited for a child."""

    def __init__(self, message: str = "the child pool is closed") -> None:
        super().__init__(ErrorCode.UNAVAILABLE, message, retryable=False)


@dataclass(frozen=True, slots=True)
class ExecutionRequest:
    attempt_id: str
    task_id: str
    epoch: int
    attempt_number: int
    capability: Capability
    payload: Any  # parsed JSON value
    deadline_at_ms: int  # task total deadline (wall ms), informational for the handler
    idempotency: str


@dataclass(frozen=True, slots=True)
class KillFacts:
    """What is known of a child the instant its SIGKILL went out: its pid, the loop time of
    the signal, and its CPU time and peak RSS read just after it (None if unreadable)."""

    pid: int
    at: float
    cpu_ms: int | None
    peak_rss_bytes: int | None


@dataclass(frozen=True, slots=True)
class PoolStats:
    spawned: int
    killed: dict[str, int]
    recycled: int
    crashed: int
    replacing: int
    idle: int
    busy: int


@dataclass(eq=False)
class _Slot:
    """One place in the pool; its child changes, identified by the generation. Its state
    changes only through ``fire`` (slots.py), which keeps the pool's per-state counts."""

    index: int
    lifecycle: SlotLifecycle
    generation: int = 0
    channel: ChildChannel | None = None  # the current child's socket; None between children
    memory: ChildMemory = field(default_factory=ChildMemory)
    pid: int | None = None
    ready: bool = False
    tasks: int = 0
    attempt_id: str | None = None
    task_id: str | None = None
    output: OutputReader | None = None  # the current child's output, when captured
    future: asyncio.Future[ChildOutcome] | None = None
    kill_reason: str | None = None
    kill_code: str | None = None
    killed_at: float | None = None  # loop time of the SIGKILL, for the reap's latency
    timer: asyncio.TimerHandle | None = None
    # Pauses before refork after deaths before ready (none while the child gets ready).
    respawn_delays: Iterator[float] | None = None
    ready_event: asyncio.Event = field(default_factory=asyncio.Event)
    # Loop time of the kill whose replacement this slot waits for (the metrics' latency).
    replacing_since: float | None = None

    @property
    def state(self) -> SlotState:
        return self.lifecycle.state

    def fire(self, event: SlotEvent) -> None:
        self.lifecycle.fire(event)  # raises on an event outside slots.SLOTS


@dataclass(eq=False)
class _Dying:
    """A killed child whose reap report has not arrived yet; its slot already has a new
    child (the replacement is forked while the old one dies, not after)."""

    generation: int
    pid: int
    future: asyncio.Future[ChildOutcome] | None
    kill_reason: str | None
    kill_code: str | None
    killed_at: float | None = None
    timer: asyncio.TimerHandle | None = None
    output: OutputReader | None = None


class ChildPool:
    """A fixed number of child processes running handlers from one MODULE:ATTR spec."""

    def __init__(self, handlers: str, size: int, *, max_tasks_per_child: int | None = None,
                 max_memory_bytes: int | None = None, memory_check_interval: float = 0.05,
                 logger: logging.Logger | None = None,
                 on_child_ready: Callable[[], None] | None = None,
                 reap_orphans: bool = False, child_nice: int = 0,
                 capture_output: bool = False) -> None:
        """``on_child_ready`` (optional) is called, on the loop, each time a fresh child
        becomes ready (so ``replacing`` may have dropped); it must not raise or block.
        ``reap_orphans``: this process becomes a subreaper and kills what a lost template's
        children left behind (orphans.py); only where the templates are its only children.
        ``child_nice``: nice steps each child runs below this process (0-19).
        ``capture_output``: read the template's and each child's stdout and stderr and log
        every line with the attempt it belongs to (child_output.py); otherwise they write to
        this process's own stdout and stderr."""
        if size < 1:
            raise ValueError("size must be at least 1")
        if max_tasks_per_child is not None and max_tasks_per_child < 1:
            raise ValueError("max_tasks_per_child must be at least 1")
        if max_memory_bytes is not None and max_memory_bytes < 1:
            raise ValueError("max_memory_bytes must be positive")
        if memory_check_interval <= 0:
            raise ValueError("memory_check_interval must be positive")
        if not 0 <= child_nice <= 19:
            raise ValueError("child_nice must be in [0, 19]")
        self._child_nice = child_nice
        self._capture = capture_output
        self._spec = handlers
        self._on_child_ready = on_child_ready
        self._size = size
        self._max_tasks = max_tasks_per_child
        self._max_memory = max_memory_bytes
        self._interval = memory_check_interval
        self._log = logger or logging.getLogger("orbit.pool")
        self._state_counts: SlotCounts = SlotCounts()
        self._slots = [_Slot(i, SlotLifecycle(i, self._state_counts)) for i in range(size)]
        self._by_gen: dict[int, _Slot] = {}
        self._dying: dict[int, _Dying] = {}
        self._by_attempt: dict[str, _Slot] = {}
        # Executions waiting for a child, and those of them a cancel reached meanwhile (the
        # child they get is told right after the run frame).
        self._waiting: set[str] = set()
        self._cancel_early: set[str] = set()
        self._idle: deque[_Slot] = deque()
        self._waiters: deque[asyncio.Future[_Slot]] = deque()
        self._idle_watchers: list[tuple[int, asyncio.Future[None]]] = []
        self._generations = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._template: TemplateLink | None = None
        self._capabilities: tuple[Capability, ...] | None = None
        # The template restart (at most one) and the children's memory watches.
        self._background = TaskOwner()
        self._restart: asyncio.Task[None] | None = None
        self._started = False
        self._closing = False
        self._closed = False
        self._spawned = 0
        self._killed: dict[str, int] = {}
        self._recycled = 0
        self._crashed = 0
        self._reap_orphans = reap_orphans
        self._orphans = OrphanReaper(self._template_pids, self._log)
        # Seconds from a kill to its slot's fresh child being ready (read by the metrics).
        self.replacement_latency = Buckets()

    # ------------------------------------------------------------------------ public API

    async def start(self) -> tuple[Capability, ...]:
        """Start the template, validate the handler list, fork ``size`` children.

        Raises HandlerSpecError on a bad spec. Await from the main thread's loop: the
        template's parent-death signal follows the thread that spawned it.
        """
        if self._started:
            raise RuntimeError("ChildPool.start() may be called once")
        self._started = True
        self._loop = asyncio.get_running_loop()
        if self._reap_orphans:
            self._orphans.enable()
        try:
            caps = await self._start_template()
            self._capabilities = caps
            for slot in self._slots:
                self._spawn(slot)
            async with asyncio.timeout(_CHILD_START_TIMEOUT_S):
                for slot in self._slots:
                    await slot.ready_event.wait()
        except BaseException:
            await self.close()
            raise
        return caps

    async def execute(self, request: ExecutionRequest) -> ChildOutcome:
        """Run ``request`` on a ready child and return its outcome (see the module doc).

        Raises PoolClosed if the pool closes while waiting for a child, and ValueRejected if
        the request cannot be framed. Cancelling the call kills the child running it.
        """
        self._waiting.add(request.attempt_id)
        try:
            slot = await self._acquire()
        except BaseException:
            self._cancel_early.discard(request.attempt_id)
            raise
        finally:
            self._waiting.discard(request.attempt_id)
        cancel_early = request.attempt_id in self._cancel_early
        self._cancel_early.discard(request.attempt_id)
        loop = self._require_loop()
        future: asyncio.Future[ChildOutcome] = loop.create_future()
        slot.attempt_id = request.attempt_id
        slot.task_id = request.task_id
        if slot.output is not None:
            slot.output.attach(request.attempt_id, request.task_id)
        slot.future = future
        slot.kill_reason = slot.kill_code = None
        self._by_attempt[request.attempt_id] = slot
        try:
            data = encode_frame(RunTask(
                generation=slot.generation, attempt_id=request.attempt_id,
                task_id=request.task_id, epoch=request.epoch,
                attempt_number=request.attempt_number, capability=request.capability,
                payload=request.payload, deadline_at_ms=request.deadline_at_ms,
                idempotency=str(request.idempotency),
            ).to_wire())
        except (FrameError, TypeError) as exc:
            self._finish_attempt(slot)
            self._release(slot)
            raise ValueRejected(ErrorCode.PAYLOAD_TOO_LARGE, f"request cannot be framed: {exc}"
                                ) from None
        self._send_child(slot, data)
        if cancel_early:
            self.cancel(request.attempt_id)
        if self._max_memory is not None and not future.done():
            generation, attempt_id = slot.generation, request.attempt_id
            slot.memory.watch(
                self._background, slot.pid, self._max_memory, self._interval,
                running=lambda: (slot.generation == generation and slot.attempt_id == attempt_id
                                 and slot.state is SlotState.BUSY),
                kill=lambda rss: self._over_memory(slot, attempt_id, rss))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if slot.attempt_id == request.attempt_id and slot.state is SlotState.BUSY:
                self._kill_slot(slot, "SHUTDOWN", UnknownCode.LEASE_LOST.value)
            raise

    def kill(self, attempt_id: str, reason: str, *, code: str = "LEASE_LOST"
             ) -> KillFacts | None:
        """SIGKILL the process group (then known descendants) of the child running
        ``attempt_id``, synchronously, and return what is known of it at that instant. Its
        execute() returns UNKNOWN with ``code`` and report.kill_reason = ``reason`` once the
        child is reaped (report.reap_ms: how long after the signal). None if no child runs
        that attempt now."""
        slot = self._by_attempt.get(attempt_id)
        if slot is None or slot.state is not SlotState.BUSY or slot.attempt_id != attempt_id:
            return None
        pid = slot.pid
        # Kill first: a malformed reason must never stop the signal (it goes on the wire, so
        # it is replaced rather than passed on).
        self._kill_slot(slot, reason if is_code(reason) else "KILLED",
                        code if is_code(code) else UnknownCode.LEASE_LOST.value)
        if pid is None:
            return None
        cpu_ms, peak = procutil.usage(pid)  # read after the signal, while it is torn down
        return KillFacts(pid, self._require_loop().time(), cpu_ms, peak)

    def waiting(self, attempt_id: str) -> bool:
        """Whether the execution of ``attempt_id`` still waits for a free child (a prefetched
        one): no child has received it, so no handler of it has run."""
        return attempt_id in self._waiting

    def cancel(self, attempt_id: str) -> bool:
        """Ask the handler of ``attempt_id`` to stop (its Execution.cancelled() turns true).

        Cooperative only; it never replaces kill(). False if no child runs that attempt; an
        execution still waiting for a child tells the child it gets.
        """
        slot = self._by_attempt.get(attempt_id)
        if slot is None or slot.state is not SlotState.BUSY or slot.channel is None:
            if attempt_id in self._waiting:
                self._cancel_early.add(attempt_id)
            return False
        self._send_child(slot, encode_frame(CancelTask(slot.generation, attempt_id).to_wire()))
        return True

    def stats(self) -> PoolStats:
        counts = self._state_counts
        return PoolStats(
            spawned=self._spawned, killed=dict(self._killed), recycled=self._recycled,
            crashed=self._crashed, replacing=self.being_replaced,
            idle=counts[SlotState.IDLE], busy=counts[SlotState.BUSY],
        )

    async def wait_idle(self, count: int = 1) -> None:
        """Return once at least ``count`` children are idle (e.g. replacements are ready)."""
        if count > self._size:
            raise ValueError(f"the pool has only {self._size} children")
        if self.stats().idle >= count:
            return
        watcher: asyncio.Future[None] = self._require_loop().create_future()
        self._idle_watchers.append((count, watcher))
        try:
            await watcher
        finally:
            self._idle_watchers = [w for w in self._idle_watchers if w[1] is not watcher]

    @property
    def being_replaced(self) -> int:
        """Slots whose next child is still to come (slots.BEING_REPLACED)."""
        return count_being_replaced(self._state_counts)

    @property
    def size(self) -> int:
        return self._size

    @property
    def template_pid(self) -> int | None:
        return None if self._template is None else self._template.pid

    def child_pids(self) -> dict[int, int]:
        """Generation -> pid of every child the pool believes alive (for tests and tools)."""
        return {s.generation: s.pid for s in self._slots if s.pid is not None
                and s.state is not SlotState.CLOSED}

    async def close(self, *, kill: bool = True) -> None:
        """Kill all children and the template, reap them, close sockets. Idempotent.

        With ``kill=False`` running executions are allowed to finish first (the caller
        bounds that wait, e.g. with asyncio.timeout, and may call close() again).
        """
        if self._closed:
            return
        if not kill:
            busy = [s.future for s in self._slots if s.future is not None and not s.future.done()]
            if busy:
                await asyncio.gather(*(asyncio.shield(f) for f in busy), return_exceptions=True)
        if self._closed:
            return
        self._closing = True
        await self._background.close()  # the restart (unless it closes the pool itself)
        self._restart = None
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(PoolClosed())
        self._waiters.clear()
        for _count, watcher in self._idle_watchers:
            if not watcher.done():
                watcher.set_exception(PoolClosed())
        for slot in self._slots:
            if slot.state is SlotState.BUSY and slot.future is not None:
                self._kill_slot(slot, "SHUTDOWN", UnknownCode.LEASE_LOST.value)
            elif slot.pid is not None:
                procutil.killpg(slot.pid)
        if self._template is not None:
            await self._template.stop(_TEMPLATE_EXIT_S)  # the last reap reports arrive too
        self._closed = True
        for dying in list(self._dying.values()):
            self._settle_dying(dying, None)
        for slot in self._slots:
            self._retire(slot)
            self._end_future(slot, None)
            slot.fire(SlotEvent.CLOSE)
        await self._orphans.close()

    # ---------------------------------------------------------------------------- template

    def _template_pids(self) -> set[int] | None:
        """This process's own children (OrphanReaper): the template, or None while one is
        being started (its pid is not known yet). A lost template stays ``_template`` until
        it has been reaped, and only then is the next one started."""
        template = self._template
        if template is None:
            return set()
        return None if template.pid is None else {template.pid}

    async def _start_template(self) -> tuple[Capability, ...]:
        self._template = TemplateLink(
            self._spec, on_forked=self._on_forked, on_reaped=self._on_reaped,
            on_lost=self._on_template_lost, logger=self._log,
            start_timeout=_TEMPLATE_START_TIMEOUT_S, child_nice=self._child_nice,
            capture_output=self._capture)
        return await self._template.start()

    def _on_forked(self, generation: int, pid: int) -> None:
        slot = self._by_gen.get(generation)
        if slot is None or slot.state is not SlotState.SPAWNING:
            return
        slot.pid = pid
        if slot.output is not None:
            slot.output.pid = pid
        if slot.channel is not None and slot.channel.eof:
            self._kill_slot(slot, None, None)
        else:
            self._maybe_ready(slot)

    def _on_template_lost(self) -> None:
        if self._closing or self._restart is not None or self._capabilities is None:
            return
        # Its children die with it (PR_SET_PDEATHSIG=SIGKILL); their attempts are uncertain.
        self._log.error("the handler template exited; restarting it",
                        extra=fields("template_lost"))
        for dying in list(self._dying.values()):
            dying.kill_reason = dying.kill_reason or "TEMPLATE_LOST"
            self._settle_dying(dying, None)
        for slot in self._slots:
            if slot.pid is not None:
                procutil.killpg(slot.pid)
                if slot.state is not SlotState.SPAWNING:
                    self._crashed += 1
            self._retire(slot)
            self._end_future(slot, None, default_reason="TEMPLATE_LOST")
            slot.fire(SlotEvent.FORK)
        self._orphans.after_template_loss()  # what the children started in other sessions
        self._restart = self._background.spawn(self._restart_template())

    async def _restart_template(self) -> None:
        """Start a new template (with backoff) and refill every slot; waiters keep waiting."""
        old = self._template
        if old is not None:
            await old.wait_exited()
        for delay in delays(_FIRST_RESTART_DELAY_S, _MAX_RESPAWN_DELAY_S):
            if self._closing:
                return
            try:
                caps = await self._start_template()
            except HandlerSpecError as exc:
                self._log.error("restarting the handler template failed: %s", exc.message,
                                extra=fields("template_restart_failed"))
            else:
                if caps != self._capabilities:
                    self._log.error("the restarted template serves other capabilities; "
                                    "the pool closes", extra=fields("template_changed"))
                    self._restart = None
                    await self.close()
                    return
                self._restart = None
                for slot in self._slots:
                    self._spawn(slot)
                return
            await asyncio.sleep(delay)

    # ------------------------------------------------------------------------------ slots

    def _spawn(self, slot: _Slot) -> None:
        if self._closing:
            slot.fire(SlotEvent.CLOSE)
            return
        if not self._can_spawn():
            slot.fire(SlotEvent.FORK)  # the template restart refills every slot
            return
        if slot.channel is not None:
            self._retire(slot)
        loop = self._require_loop()
        generation = next(self._generations)
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        parent_end.setblocking(False)
        slot.fire(SlotEvent.FORK)
        slot.generation = generation
        slot.pid = None
        slot.ready = False
        slot.tasks = 0
        slot.memory.forget()
        slot.kill_reason = slot.kill_code = None
        slot.killed_at = None
        self._by_gen[generation] = slot
        slot.channel = ChildChannel(
            loop, parent_end, on_frame=functools.partial(self._on_child_frame, slot),
            on_eof=functools.partial(self._on_child_eof, slot),
            on_broken=functools.partial(self._on_broken_frame, slot))
        self._spawned += 1
        template = self._template
        assert template is not None  # _can_spawn() checked it
        fds = [child_end.detach()]
        if self._capture:
            read_end, write_end = output_pipe()
            slot.output = OutputReader(loop, read_end, _CHILD_LOG, "child_output")
            fds.append(write_end)
        template.fork(generation, fds)

    def _maybe_ready(self, slot: _Slot) -> None:
        if slot.state is SlotState.SPAWNING and slot.ready and slot.pid is not None:
            slot.respawn_delays = None
            if slot.replacing_since is not None and self._loop is not None:
                self.replacement_latency.observe(self._loop.time() - slot.replacing_since)
                slot.replacing_since = None
            slot.ready_event.set()
            self._release(slot)
            if self._on_child_ready is not None:
                self._on_child_ready()

    def _release(self, slot: _Slot) -> None:
        """Hand a ready slot to the oldest waiter, or park it as idle."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                slot.fire(SlotEvent.HAND_OUT)
                waiter.set_result(slot)
                return
        slot.fire(SlotEvent.PARK)
        self._idle.append(slot)
        if self._idle_watchers:
            idle = self._state_counts[SlotState.IDLE]
            for count, watcher in self._idle_watchers:
                if count <= idle and not watcher.done():
                    watcher.set_result(None)
            self._idle_watchers = [w for w in self._idle_watchers if not w[1].done()]

    async def _acquire(self) -> _Slot:
        while True:
            if self._closing or not self._started:
                raise PoolClosed()
            while self._idle:
                slot = self._idle.popleft()
                if slot.state is SlotState.IDLE:  # stale entries for replaced children are skipped
                    slot.fire(SlotEvent.HAND_OUT)
                    return slot
            waiter: asyncio.Future[_Slot] = self._require_loop().create_future()
            self._waiters.append(waiter)
            try:
                slot = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._release(waiter.result())
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                raise
            if slot.state is SlotState.BUSY and slot.attempt_id is None:
                return slot

    def _on_broken_frame(self, slot: _Slot, exc: FrameError) -> None:
        self._log.error("child %s sent a broken frame (%s); killing it", slot.pid, exc,
                        extra=self._ids(slot, "child_broken_frame"))
        self._kill_slot(slot, "PROTOCOL_ERROR", UnknownCode.HANDLER_CRASHED.value)

    def _on_child_frame(self, slot: _Slot, frame: dict[str, Any]) -> None:
        if frame.get("g") != slot.generation:
            self._log.warning("ignored a frame for generation %r on the child of generation %d",
                              frame.get("g"), slot.generation,
                              extra=self._ids(slot, "child_frame_ignored"))
            return
        try:
            message = decode_from_child(frame)
        except MalformedMessage:
            self._log.warning("ignored a %r frame from child %s", frame.get("t"), slot.pid,
                              extra=self._ids(slot, "child_frame_ignored"))
            return
        if isinstance(message, ChildReady):
            if slot.state is SlotState.SPAWNING:
                slot.ready = True
                self._maybe_ready(slot)
        else:
            if slot.state is not SlotState.BUSY or message.attempt_id != slot.attempt_id:
                self._log.info("dropped a result for attempt %r: no longer running on child %s",
                               message.attempt_id, slot.pid, extra=fields(
                                   "result_dropped", attempt_id=message.attempt_id,
                                   pid=slot.pid))
                return
            report = Report(child_pid=slot.pid, cpu_ms=message.cpu_ms,
                            peak_rss_bytes=message.peak_rss_bytes)
            try:
                outcome = outcome_from_done(message, report, warn=functools.partial(
                    self._warn, slot, "child_invalid_result"))
            except MalformedMessage as exc:
                self._log.error("child %s sent a malformed result (%s); killing it",
                                slot.pid, exc, extra=self._ids(slot, "child_malformed_result"))
                self._kill_slot(slot, "PROTOCOL_ERROR", UnknownCode.HANDLER_CRASHED.value)
                return
            future = slot.future
            if slot.output is not None:
                slot.output.drain()  # written before the answer: still this attempt's
                slot.output.attach(None, None)
            self._finish_attempt(slot)
            slot.tasks += 1
            self._after_task(slot)
            if future is not None and not future.done():
                future.set_result(outcome)

    def _after_task(self, slot: _Slot) -> None:
        """Recycle after max tasks or over the memory limit; otherwise the slot is ready."""
        reason = None
        if self._max_tasks is not None and slot.tasks >= self._max_tasks:
            reason = "max tasks"
        elif self._max_memory is not None and slot.pid is not None:
            rss = slot.memory.over_limit(slot.pid, self._max_memory)
            if rss is not None:
                reason = f"memory {rss} bytes over the limit"
        if reason is None:
            self._release(slot)
            return
        self._log.info("recycling child %s (%s)", slot.pid, reason,
                       extra=fields("child_recycled", pid=slot.pid, reason=reason))
        slot.fire(SlotEvent.RECYCLE)
        self._send_child(slot, encode_frame(LeaveChild(slot.generation).to_wire()))
        slot.timer = self._require_loop().call_later(
            _GRACEFUL_EXIT_S, self._force_exit, slot, slot.generation)

    def _force_exit(self, slot: _Slot, generation: int) -> None:
        if slot.generation == generation and slot.state is SlotState.EXITING and slot.pid:
            self._log.warning("recycled child %s did not exit; killing it", slot.pid,
                              extra=fields("child_recycle_overdue", pid=slot.pid))
            procutil.killpg(slot.pid)

    def _send_child(self, slot: _Slot, data: bytes) -> None:
        """Queue bytes for the child (channel.py); a broken socket is handled like an EOF."""
        if slot.channel is not None:
            slot.channel.send(data)

    def _on_child_eof(self, slot: _Slot, write_error: OSError | None) -> None:
        """The child's socket closed: it died, or broke its end. Make sure it is dead."""
        if write_error is not None:
            self._log.warning("writing to child %s failed: %s", slot.pid, write_error,
                              extra=self._ids(slot, "child_write_failed"))
        if slot.state in (SlotState.KILLING, SlotState.EXITING, SlotState.CLOSED):
            return
        if slot.pid is None:
            return  # killed as soon as the template tells us its pid
        self._kill_slot(slot, None, None)

    def _kill_slot(self, slot: _Slot, reason: str | None, code: str | None) -> None:
        """Signal first, bookkeeping after: nothing may delay the SIGKILL."""
        pid = slot.pid
        if pid is not None:
            procutil.kill_tree(pid)
            slot.memory.kill_descendants()  # seen by the memory watch, maybe moved away
            if self._loop is not None:
                slot.killed_at = slot.replacing_since = self._loop.time()
        if reason is not None:
            self._killed[reason] = self._killed.get(reason, 0) + 1
        slot.kill_reason = reason
        slot.kill_code = code
        if slot.attempt_id is not None:
            self._by_attempt.pop(slot.attempt_id, None)
        slot.memory.stop()
        if pid is not None and slot.ready and self._can_spawn():
            self._replace_now(slot, pid)
            return
        slot.fire(SlotEvent.KILL)
        if self._loop is not None and slot.timer is None:
            slot.timer = self._loop.call_later(_REAP_TIMEOUT_S, self._reap_overdue, slot,
                                               slot.generation)

    def _replace_now(self, slot: _Slot, pid: int) -> None:
        """Hand the killed child to a _Dying record and fork the slot's next child now."""
        dying = _Dying(slot.generation, pid, slot.future, slot.kill_reason, slot.kill_code,
                       slot.killed_at, output=slot.output)
        slot.output = None  # the dying child's last lines still name its attempt
        dying.timer = self._require_loop().call_later(_REAP_TIMEOUT_S, self._dying_overdue,
                                                      dying)
        self._dying[dying.generation] = dying
        slot.future = None
        slot.attempt_id = None
        self._retire(slot)
        self._spawn(slot)

    def _settle_dying(self, dying: _Dying, report: Report | None) -> None:
        self._dying.pop(dying.generation, None)
        if dying.timer is not None:
            dying.timer.cancel()
        if dying.output is not None:
            dying.output.close()
            dying.output = None
        _resolve_gone(dying.future, dying.pid, dying.kill_reason, dying.kill_code, report)

    def _dying_overdue(self, dying: _Dying) -> None:
        self._log.error("no reap report for killed child %s", dying.pid,
                        extra=fields("child_reap_overdue", pid=dying.pid))
        dying.timer = None
        self._settle_dying(dying, None)

    def _can_spawn(self) -> bool:
        return (not self._closing and self._restart is None and self._template is not None
                and self._template.connected)

    def _reap_overdue(self, slot: _Slot, generation: int) -> None:
        if slot.generation != generation or slot.state is not SlotState.KILLING:
            return
        self._log.error("no reap report for child %s; replacing it anyway", slot.pid,
                        extra=fields("child_reap_overdue", pid=slot.pid))
        slot.timer = None
        self._by_gen.pop(generation, None)
        self._end_future(slot, None)
        self._retire(slot)
        self._respawn(slot, early_death=False)

    def _on_reaped(self, msg: ChildReaped) -> None:
        """The template reaped a child: a dying one (its slot was refilled already) or the
        current child of its slot, which is then replaced."""
        dying = self._dying.get(msg.generation)
        slot = None if dying is not None else self._by_gen.pop(msg.generation, None)
        gone: _Dying | _Slot | None = dying or slot
        if gone is None or gone.generation != msg.generation:
            return
        if slot is not None and slot.state is SlotState.EXITING:
            self._recycled += 1
        elif gone.kill_reason is None and not self._closing:
            self._crashed += 1
            self._log.warning("child %s died (exit code %s, signal %s)", gone.pid,
                              msg.exit_code, msg.signal, extra=fields(
                                  "child_died", pid=gone.pid, exit_code=msg.exit_code,
                                  signal=msg.signal,
                                  attempt_id=slot.attempt_id if slot else None,
                                  task_id=slot.task_id if slot else None))
        reap_ms = None
        if gone.kill_reason is not None and gone.killed_at is not None:
            reap_ms = max(0, round((self._require_loop().time() - gone.killed_at) * 1000))
        report = Report(child_pid=gone.pid, exit_code=msg.exit_code, signal=msg.signal,
                        cpu_ms=msg.cpu_ms, peak_rss_bytes=msg.peak_rss_bytes,
                        kill_reason=gone.kill_reason, reap_ms=reap_ms)
        if dying is not None:
            self._settle_dying(dying, report)
            return
        assert slot is not None
        early_death = not slot.ready  # died before it ever served: back off
        self._end_future(slot, report)
        self._retire(slot)
        self._respawn(slot, early_death=early_death)

    def _respawn(self, slot: _Slot, *, early_death: bool) -> None:
        if self._closing:
            slot.fire(SlotEvent.CLOSE)
            return
        if not early_death:
            self._spawn(slot)
            return
        # A child that dies before it is ready would otherwise respawn in a tight loop.
        if slot.respawn_delays is None:
            slot.respawn_delays = delays(_FIRST_RESPAWN_DELAY_S, _MAX_RESPAWN_DELAY_S)
        delay = next(slot.respawn_delays)
        slot.fire(SlotEvent.FORK)
        self._require_loop().call_later(delay, self._spawn_if_pending, slot)

    def _spawn_if_pending(self, slot: _Slot) -> None:
        if not self._closing and slot.channel is None:
            self._spawn(slot)

    def _end_future(self, slot: _Slot, report: Report | None, *,
                    default_reason: str = "SHUTDOWN") -> None:
        """Resolve a pending execute() for a child that is gone."""
        _resolve_gone(slot.future, slot.pid, slot.kill_reason, slot.kill_code, report,
                      default_reason)
        self._finish_attempt(slot)

    def _finish_attempt(self, slot: _Slot) -> None:
        if slot.attempt_id is not None and self._by_attempt.get(slot.attempt_id) is slot:
            del self._by_attempt[slot.attempt_id]
        slot.attempt_id = None
        slot.task_id = None
        slot.future = None
        slot.memory.stop()

    def _retire(self, slot: _Slot) -> None:
        """Forget the current child of ``slot``: its socket, its timer, its memory watch."""
        if slot.timer is not None:
            slot.timer.cancel()
            slot.timer = None
        slot.memory.forget()
        if slot.channel is not None:
            slot.channel.close()
            slot.channel = None
        if slot.output is not None:
            slot.output.close()  # the child is gone: what it wrote is all in the pipe
            slot.output = None
        self._by_gen.pop(slot.generation, None)
        slot.pid = None

    def _over_memory(self, slot: _Slot, attempt_id: str, rss: int) -> None:
        """The memory watch found the tree of ``attempt_id``'s child over the limit."""
        self._log.warning("attempt %s: child %s uses %d bytes, over %d; killing it",
                          attempt_id, slot.pid, rss, self._max_memory,
                          extra=fields("child_over_memory", attempt_id=attempt_id,
                                       task_id=slot.task_id, pid=slot.pid, rss_bytes=rss,
                                       limit_bytes=self._max_memory))
        self._kill_slot(slot, "MEMORY_LIMIT", UnknownCode.HANDLER_CRASHED.value)

    @staticmethod
    def _ids(slot: _Slot, event: str) -> dict[str, Any]:
        return fields(event, attempt_id=slot.attempt_id, task_id=slot.task_id, pid=slot.pid)

    def _warn(self, slot: _Slot, event: str, message: str) -> None:
        self._log.warning("%s", message, extra=self._ids(slot, event))

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("ChildPool.start() was not awaited")
        return self._loop


def _resolve_gone(future: asyncio.Future[ChildOutcome] | None, pid: int | None,
                  kill_reason: str | None, kill_code: str | None, report: Report | None,
                  default_reason: str = "SHUTDOWN") -> None:
    """End a pending execute() whose child is gone: UNKNOWN with the kill's code (or
    HANDLER_CRASHED), and ``report`` from the reap, or a bare one if none came."""
    if future is None or future.done():
        return
    if report is None:
        report = Report(child_pid=pid, kill_reason=kill_reason or default_reason)
    future.set_result(uncertain(kill_code or UnknownCode.HANDLER_CRASHED.value, report))
