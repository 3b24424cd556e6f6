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

``execute`` takes the attempt's record (attempts.py): its execution waits for a free child
(allocation.py), runs on it, and ends with the child's answer, or with the reap report of
a child that was killed (``kill``) or died. The parts live apart: the slots and their
children, killed, reaped and replaced (children.py), what a child says and its recycling
(child_frames.py), each slot's lifecycle table (slots.py), the template and its restart
(template_restart.py, template_link.py), the child's socket I/O (channel.py), the memory
watch (memory.py) and the answer checks (outcomes.py). What stays here is the public API
and what runs on a child.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from orbit_host import procutil
from orbit_host.framing import FrameError, encode_frame
from orbit_host.messages import CancelTask, RunTask
from orbit_wire.errors import ErrorCode, OrbitError, ValueRejected
from orbit_wire.model import Capability, UnknownCode
from orbit_wire.names import is_code
from orbit_wire.policy import CapabilityPolicy

from .attempts import Attempt, RunEvent, RunState
from .cgroups import ChildCgroups
from .child_frames import ChildFrames
from .children import Slot
from .outcomes import ChildOutcome, not_run
from .slots import SlotEvent, SlotState, count_being_replaced

__all__ = ["ChildOutcome", "ChildPool", "KillFacts", "PoolClosed", "PoolStats"]

_CHILD_START_TIMEOUT_S = 30.0
_WAITING = (RunState.WAITING, RunState.WAITING_TOLD)


class PoolClosed(OrbitError):
    """The pool was closed (or its template died) while a caller waited for a child."""

    def __init__(self, message: str = "the child pool is closed") -> None:
        super().__init__(ErrorCode.UNAVAILABLE, message, retryable=False)


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
    messages_sent: int = 0  # messages written to children (run, cancel, ...)
    messages_received: int = 0  # frames read from children (ready, done, ...)


class ChildPool(ChildFrames):
    """A fixed number of child processes running handlers from one MODULE:ATTR spec."""

    def __init__(self, handlers: str, size: int, *, max_tasks_per_child: int | None = None,
                 max_memory_bytes: int | None = None, memory_check_interval: float = 0.05,
                 logger: logging.Logger | None = None,
                 on_child_ready: Callable[[], None] | None = None,
                 reap_orphans: bool = False, child_nice: int = 0,
                 capture_output: bool = False, exception_messages: bool = False,
                 child_memory_max: int | None = None,
                 child_cpu_max: float | None = None) -> None:
        """``on_child_ready`` (optional) is called, on the loop, each time a fresh child
        becomes ready (so ``being_replaced`` may have dropped); it must not raise or block.
        ``reap_orphans``: this process becomes a subreaper and kills what a lost template's
        children left behind (orphans.py); only where the templates are its only children.
        ``child_nice``: nice steps each child runs below this process (0-19).
        ``capture_output``: read the template's and each child's stdout and stderr and log
        every line with the attempt it belongs to (child_output.py); otherwise they write to
        this process's own stdout and stderr. ``exception_messages``: an outcome ended by an
        exception also carries its message's first line (outcomes.py).
        ``child_memory_max`` (bytes) and ``child_cpu_max`` (CPUs): each slot's children
        run in control groups of the slot holding them to these (cgroups.py), made at
        ``start``; without a writable memory cgroup the RSS watch enforces the memory
        limit."""
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
        if child_memory_max is not None and child_memory_max < 1:
            raise ValueError("child_memory_max must be positive")
        if child_cpu_max is not None and not child_cpu_max > 0:
            raise ValueError("child_cpu_max must be positive")
        super().__init__(handlers, size, max_tasks_per_child=max_tasks_per_child,
                         max_memory_bytes=max_memory_bytes,
                         logger=logger or logging.getLogger("orbit.pool"),
                         on_child_ready=on_child_ready, reap_orphans=reap_orphans,
                         child_nice=child_nice, capture_output=capture_output,
                         exception_messages=exception_messages)
        self._interval = memory_check_interval
        self._limits = (child_memory_max, child_cpu_max)

    # ------------------------------------------------------------------------ public API

    @property
    def policies(self) -> tuple[CapabilityPolicy, ...]:
        """The policies the handlers declare (known once ``start`` returned)."""
        return self._templates.policies

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
            self._open_cgroups()  # before the template: the supervisor may move (v2)
            caps = await self._templates.start()
            for slot in self._slots:
                self._spawn(slot)
            async with asyncio.timeout(_CHILD_START_TIMEOUT_S):
                for slot in self._slots:
                    await slot.ready_event.wait()
        except BaseException:
            await self.close()
            raise
        return caps

    def _open_cgroups(self) -> None:
        memory_max, cpu_max = self._limits
        if memory_max is None and cpu_max is None:
            return
        groups = ChildCgroups.open(memory_max, cpu_max, self._size, self._log)
        if groups.plan.uses_cgroups:
            self._cgroups = groups
        if groups.plan.rss_limit is not None and self._max_memory is None:
            self._max_memory = groups.plan.rss_limit  # no memory cgroup: the RSS watch

    @property
    def cgroups(self) -> ChildCgroups | None:
        """The children's control groups, when limits placed them in some."""
        return self._cgroups

    async def execute(self, att: Attempt) -> ChildOutcome:
        """``submit`` then ``outcome``: run ``att`` and return how it ended."""
        self.submit(att)
        return await self.outcome(att)

    def submit(self, att: Attempt) -> None:
        """Hand ``att`` to the pool now, once per attempt: it runs at once on an idle child,
        or waits for the next free one (oldest first). From here on ``kill``, ``cancel``
        and ``stop_waiting`` reach it; ``outcome`` returns how it ended."""
        # The pool's own loop once started (asking asyncio for it costs a getpid() call).
        loop = self._loop if self._loop is not None else asyncio.get_running_loop()
        att.outcome = outcome = loop.create_future()
        if self._closing or not self._started:
            outcome.set_exception(PoolClosed())
            return
        att.move_run(RunEvent.QUEUED)
        slot = self._alloc.take_idle()
        if slot is None:
            self._alloc.wait(att)
        else:
            self._run(slot, att)

    async def outcome(self, att: Attempt) -> ChildOutcome:
        """The outcome of ``att``, once submitted. Raises PoolClosed if the pool closed
        while it waited for a child, and ValueRejected if it cannot be framed. Cancelling
        the call stops its wait, or kills the child running it."""
        outcome: asyncio.Future[ChildOutcome] = att.outcome
        try:
            return await asyncio.shield(outcome)
        except asyncio.CancelledError:
            self.abandon(att)
            raise

    def abandon(self, att: Attempt) -> None:
        """Nobody waits for the outcome of ``att`` any more (the run ends): its wait for a
        child stops, or the child running it is killed."""
        if self._alloc.unwait(att):
            att.move_run(RunEvent.STOPPED)
        elif (slot := self._slot_of(att)) is not None:
            self._kill_slot(slot, UnknownCode.SHUTDOWN.value, UnknownCode.SHUTDOWN.value)

    def kill(self, att: Attempt, reason: str, *,
             code: str = UnknownCode.LEASE_LOST.value) -> KillFacts | None:
        """SIGKILL the process group (then known descendants) of the child running ``att``,
        synchronously, and return what is known of it at that instant. Its execute()
        returns UNKNOWN with ``code`` and report.kill_reason = ``reason`` once the child is
        reaped (report.reap_ms: how long after the signal). None if no child runs it now."""
        slot = self._slot_of(att)
        if slot is None:
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

    def waiting(self, att: Attempt) -> bool:
        """Whether the execution of ``att`` still waits for a free child (a prefetched one):
        no child has received it, so no handler of it has run."""
        return att.run_state in _WAITING

    def stop_waiting(self, att: Attempt, reason: str) -> bool:
        """End the execution of ``att`` before any child receives it: its execute() returns
        UNKNOWN with kill_reason ``reason``, the reason as its code when it names a cause
        (``kill_cause``). False if it does not wait."""
        if not self._alloc.unwait(att):
            return False
        att.move_run(RunEvent.STOPPED)
        if att.outcome is not None and not att.outcome.done():
            att.outcome.set_result(not_run(reason))
        return True

    def cancel(self, att: Attempt) -> bool:
        """Ask the handler of ``att`` to stop (its Execution.cancelled() turns true).

        Cooperative only; it never replaces kill(). False if no child runs it; an execution
        still waiting for a child tells the child it gets.
        """
        slot = self._slot_of(att)
        child = None if slot is None else slot.child
        if slot is None or child is None or child.channel is None:
            if att.run_state in _WAITING:
                att.move_run(RunEvent.TOLD)
            return False
        self._send_child(slot, encode_frame(CancelTask(child.generation,
                                                       att.attempt_id).to_wire()))
        return True

    def stats(self) -> PoolStats:
        counts = self._state_counts
        return PoolStats(
            spawned=self._spawned, killed=dict(self._killed), recycled=self._recycled,
            crashed=self._crashed, replacing=self.being_replaced,
            idle=counts[SlotState.IDLE], busy=counts[SlotState.BUSY],
            messages_sent=self.messages_sent, messages_received=self.messages_received,
        )

    async def wait_idle(self, count: int = 1) -> None:
        """Return once at least ``count`` children are idle (e.g. replacements are ready)."""
        if count > self._size:
            raise ValueError(f"the pool has only {self._size} children")
        await self._alloc.wait_idle(count)

    @property
    def being_replaced(self) -> int:
        """Slots whose next child is still to come (slots.BEING_REPLACED)."""
        return count_being_replaced(self._state_counts)

    @property
    def size(self) -> int:
        return self._size

    @property
    def template_pid(self) -> int | None:
        return self._templates.pid

    def child_pids(self) -> dict[int, int]:
        """Generation -> pid of every child the pool believes alive (for tests and tools)."""
        return {s.child.generation: s.child.pid for s in self._slots
                if s.child is not None and s.child.pid is not None
                and s.state is not SlotState.CLOSED}

    async def close(self, *, kill: bool = True) -> None:
        """Kill all children and the template, reap them, close sockets. Idempotent.

        With ``kill=False`` running executions are allowed to finish first (the caller
        bounds that wait, e.g. with asyncio.timeout, and may call close() again).
        """
        if self._closed:
            return
        if not kill:
            busy = [s.attempt.outcome for s in self._slots if s.attempt is not None
                    and s.attempt.outcome is not None and not s.attempt.outcome.done()]
            if busy:
                await asyncio.gather(*(asyncio.shield(f) for f in busy), return_exceptions=True)
        if self._closed:
            return
        self._closing = True
        await self._background.stop()  # the restart (unless it closes the pool itself)
        self._templates.restart_over()
        for att in self._alloc.close(PoolClosed):
            att.move_run(RunEvent.STOPPED)
            if att.outcome is not None and not att.outcome.done():
                att.outcome.set_exception(PoolClosed())
        for slot in self._slots:
            if slot.state is SlotState.BUSY and slot.attempt is not None:
                self._kill_slot(slot, UnknownCode.SHUTDOWN.value, UnknownCode.SHUTDOWN.value)
            elif slot.pid is not None:
                procutil.killpg(slot.pid)
        await self._templates.stop()  # the last reap reports arrive meanwhile
        self._closed = True
        for dying in list(self._dying.values()):
            self._settle_dying(dying, None)
        for slot in self._slots:
            self._forget_child(slot, "SHUTDOWN")
            slot.memory.stop()
            slot.fire(SlotEvent.CLOSE)
        await self._orphans.close()
        if self._cgroups is not None:
            await self._cgroups.aclose()  # the children are reaped: their groups are empty

    # ------------------------------------------------------------------ running on a child

    def _slot_of(self, att: Attempt) -> Slot | None:
        """The slot whose current child runs ``att`` now, or None."""
        child = att.child
        if child is None or child.attempt is not att:
            return None
        slot = self._by_gen.get(child.generation)
        if slot is None or slot.child is not child or slot.state is not SlotState.BUSY:
            return None
        return slot

    def _run(self, slot: Slot, att: Attempt) -> None:
        """Send ``att`` to ``slot``'s child, just handed out to it."""
        child = slot.child
        assert child is not None and att.outcome is not None
        told = att.move_run(RunEvent.GIVEN) is RunState.WAITING_TOLD
        child.attempt, att.child = att, child
        if child.output is not None:
            child.output.attach(att.attempt_id, att.task_id)
        child.kill_reason = child.kill_code = None
        res = att.reservation
        try:
            data = encode_frame(RunTask(
                generation=child.generation, attempt_id=res.attempt_id, task_id=res.task_id,
                epoch=res.epoch, attempt_number=res.attempt_number, capability=res.capability,
                payload=res.payload, deadline_at_ms=res.deadline_at_ms,
                idempotency=str(res.idempotency), checkpoint=res.checkpoint,
                parents=res.parents,
            ).to_wire())
        except (FrameError, TypeError) as exc:
            self._finish_attempt(slot)
            att.move_run(RunEvent.ENDED)
            att.outcome.set_exception(ValueRejected(
                ErrorCode.PAYLOAD_TOO_LARGE, f"request cannot be framed: {exc}"))
            self._release(slot)
            return
        self._send_child(slot, data)
        # Its handler starts now: a prefetched attempt's progress timeout counts from here.
        att.progress.alive(self._require_loop().time())
        if told:
            self.cancel(att)  # a cancel reached it while it waited for this child
        if self._max_memory is not None and not att.outcome.done():
            slot.memory.watch(
                self._background, child.pid, self._max_memory, self._interval,
                running=lambda: (slot.child is child and child.attempt is att
                                 and slot.state is SlotState.BUSY),
                kill=lambda rss: self._over_memory(slot, att, rss))
