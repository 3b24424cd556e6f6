"""The pool's slots and their children: fork, kill, reap, replace (the pool's base).

A slot is one place in the pool (its lifecycle: slots.py); its child changes, each one a
``Child`` of its own generation. A child runs at most one attempt at a time and holds a
reference to that attempt's record (attempts.py), whose ``outcome`` future its execution
awaits; the record holds the child back (``attempt.child``). Nothing about the attempt is
copied here.

Killing signals the child's process group synchronously (then known descendants that left
it), before any bookkeeping; the attempt's outcome comes with the template's reap report
(exit status, rusage), or after ``_REAP_TIMEOUT_S`` without one. A killed child that was
ever ready is replaced at once: it is kept among the dying (by generation) until its reap,
and the slot forks its next child meanwhile. Children that die on their own are replaced
when their death is seen; one that dies before it was ever ready is forked again with
backoff, so a broken environment cannot fork in a tight loop. ChildFrames
(child_frames.py) adds what a child says, ChildPool (pool.py) what runs on the children.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from orbit_host import procutil
from orbit_host.backoff import delays
from orbit_host.framing import FrameError
from orbit_host.logs import fields
from orbit_host.messages import ChildReaped
from orbit_host.tally import Histogram
from orbit_host.task_owner import TaskOwner
from orbit_wire.frames import Report
from orbit_wire.model import UnknownCode, kill_cause

from .allocation import Allocator
from .attempts import Attempt, RunEvent, RunState
from .cgroups import ChildCgroups
from .channel import ChildChannel
from .child_output import OutputReader, output_pipe
from .memory import ChildMemory
from .orphans import OrphanReaper
from .outcomes import uncertain
from .slots import SlotCounts, SlotEvent, SlotLifecycle, SlotState
from .template_restart import TemplateKeeper

__all__ = ["Child", "Children", "Slot"]

_REAP_TIMEOUT_S = 5.0  # a kill whose reap is never reported still ends the execution
_FIRST_RESPAWN_DELAY_S = 0.05  # a child that died before it was ready (doubling)
_MAX_RESPAWN_DELAY_S = 5.0
_CHILD_LOG = logging.getLogger("orbit.child")


@dataclass(eq=False)
class Child:
    """One child process of a slot, identified by its generation."""

    generation: int
    channel: ChildChannel | None  # its socket; closed (None) once it is forgotten
    output: OutputReader | None = None  # its output, when captured
    pid: int | None = None
    ready: bool = False
    tasks: int = 0
    attempt: Attempt | None = None  # the attempt it runs now
    kill_reason: str | None = None
    kill_code: str | None = None
    killed_at: float | None = None  # loop time of the SIGKILL, for the reap's latency
    timer: asyncio.TimerHandle | None = None  # reap overdue, or a recycled child's exit
    slot: int = -1  # the index of its slot (its cgroups are the slot's)


@dataclass(eq=False)
class Slot:
    """One place in the pool. Its state changes only through ``fire`` (slots.py), which
    keeps the pool's per-state counts."""

    index: int
    lifecycle: SlotLifecycle
    child: Child | None = None  # None between children
    memory: ChildMemory = field(default_factory=ChildMemory)
    # Pauses before refork after deaths before ready (none while the child gets ready).
    respawn_delays: Iterator[float] | None = None
    ready_event: asyncio.Event = field(default_factory=asyncio.Event)
    # Loop time of the kill whose replacement this slot waits for (the metrics' latency).
    replacing_since: float | None = None

    @property
    def state(self) -> SlotState:
        return self.lifecycle.state

    @property
    def pid(self) -> int | None:
        return None if self.child is None else self.child.pid

    @property
    def attempt(self) -> Attempt | None:
        return None if self.child is None else self.child.attempt

    def fire(self, event: SlotEvent) -> None:
        self.lifecycle.fire(event)  # raises on an event outside slots.SLOTS


def resolve_gone(att: Attempt | None, pid: int | None, kill_reason: str | None,
                 kill_code: str | None, report: Report | None,
                 default_reason: str = "SHUTDOWN") -> None:
    """End the execution of ``att`` whose child is gone: UNKNOWN with the kill's code (else
    the cause its reason names, else HANDLER_CRASHED), and ``report`` from the reap, or a
    bare one if none came."""
    if att is None or att.outcome is None or att.outcome.done():
        return
    if report is None:
        report = Report(child_pid=pid, kill_reason=kill_reason or default_reason)
    if att.run_state is RunState.ON_CHILD:
        att.move_run(RunEvent.ENDED)
    code = kill_code or kill_cause(report.kill_reason, UnknownCode.HANDLER_CRASHED.value)
    att.outcome.set_result(uncertain(code, report))


class Children:
    """The slots, their children and the dying ones; ChildPool is the class to use."""

    def __init__(self, handlers: str, size: int, *, logger: logging.Logger,
                 on_child_ready: Callable[[], None] | None, reap_orphans: bool,
                 child_nice: int, capture_output: bool) -> None:
        self._capture = capture_output
        self._on_child_ready = on_child_ready
        self._size = size
        self._log = logger
        self._state_counts: SlotCounts = SlotCounts()
        self._slots = [Slot(i, SlotLifecycle(i, self._state_counts)) for i in range(size)]
        self._by_gen: dict[int, Slot] = {}
        self._dying: dict[int, Child] = {}  # killed children replaced before their reap
        self._generations = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._alloc: Allocator[Slot] = Allocator(self._state_counts, self._new_future)
        # The template restart (at most one) and the children's memory watches.
        self._background = TaskOwner()
        self._templates = TemplateKeeper(
            handlers, on_forked=self._on_forked, on_reaped=self._on_reaped,
            on_lost=self._on_template_lost, on_restarted=self._on_template_restarted,
            on_changed=self._on_template_changed, closing=lambda: self._closing,
            tasks=self._background, logger=logger, child_nice=child_nice,
            capture_output=capture_output)
        self._started = False
        self._closing = False
        self._closed = False
        self._spawned = 0
        self._killed: dict[str, int] = {}
        self._recycled = 0
        self._crashed = 0
        self._reap_orphans = reap_orphans
        self._orphans = OrphanReaper(self._templates.pids, self._log)
        # Each slot's control groups (cgroups.py), made at start when limits are asked for.
        self._cgroups: ChildCgroups | None = None
        # Seconds from a kill to its slot's fresh child being ready (read by the metrics).
        self.replacement_latency = Histogram()

    # ------------------------------------- what child_frames.py and pool.py add

    def _run(self, slot: Slot, att: Attempt) -> None:
        """Start ``att`` on ``slot``'s child, just handed out (pool.py)."""
        raise NotImplementedError

    def _on_child_frame(self, slot: Slot, frame: dict[str, Any]) -> None:
        raise NotImplementedError

    def _on_child_eof(self, slot: Slot, write_error: OSError | None) -> None:
        raise NotImplementedError

    def _on_broken_frame(self, slot: Slot, exc: FrameError) -> None:
        raise NotImplementedError

    async def close(self, *, kill: bool = True) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------------ forking

    def _can_spawn(self) -> bool:
        return not self._closing and self._templates.can_fork

    def _spawn(self, slot: Slot) -> None:
        if self._closing:
            slot.fire(SlotEvent.CLOSE)
            return
        if not self._can_spawn():
            slot.fire(SlotEvent.FORK)  # the template restart refills every slot
            return
        if slot.child is not None and slot.child.channel is not None:
            self._retire(slot)
        loop = self._require_loop()
        generation = next(self._generations)
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        parent_end.setblocking(False)
        slot.fire(SlotEvent.FORK)
        slot.memory.forget()
        self._by_gen[generation] = slot
        child = slot.child = Child(generation, ChildChannel(
            loop, parent_end, on_frame=functools.partial(self._on_child_frame, slot),
            on_eof=functools.partial(self._on_child_eof, slot),
            on_broken=functools.partial(self._on_broken_frame, slot)), slot=slot.index)
        self._spawned += 1
        fds = [child_end.detach()]
        if self._capture:
            read_end, write_end = output_pipe()
            child.output = OutputReader(loop, read_end, _CHILD_LOG, "child_output")
            fds.append(write_end)
        self._templates.fork(generation, fds)

    def _on_forked(self, generation: int, pid: int) -> None:
        slot = self._by_gen.get(generation)
        if slot is None or slot.state is not SlotState.SPAWNING or slot.child is None:
            return
        child = slot.child
        child.pid = pid
        if self._cgroups is not None:
            # Before the slot is ready: no task, hence no handler code, runs unconfined.
            self._cgroups.place(slot.index, pid)
        if child.output is not None:
            child.output.pid = pid
        if child.channel is not None and child.channel.eof:
            self._kill_slot(slot, None, None)
        else:
            self._maybe_ready(slot)

    def _maybe_ready(self, slot: Slot) -> None:
        child = slot.child
        if (slot.state is SlotState.SPAWNING and child is not None and child.ready
                and child.pid is not None):
            slot.respawn_delays = None
            if slot.replacing_since is not None and self._loop is not None:
                self.replacement_latency.observe(self._loop.time() - slot.replacing_since)
                slot.replacing_since = None
            slot.ready_event.set()
            self._release(slot)
            if self._on_child_ready is not None:
                self._on_child_ready()

    def _release(self, slot: Slot) -> None:
        """Hand a ready slot to the oldest waiting attempt, or park it as idle."""
        att = self._alloc.release(slot)
        if att is not None:
            self._run(slot, att)

    # ------------------------------------------------------------------------ killing

    def _kill_slot(self, slot: Slot, reason: str | None, code: str | None) -> None:
        """Signal first, bookkeeping after: nothing may delay the SIGKILL."""
        child = slot.child
        pid = None if child is None else child.pid
        if pid is not None:
            groups = self._cgroups
            procutil.kill_tree(pid, also=None if groups is None else functools.partial(
                groups.kill, slot.index))
            slot.memory.kill_descendants()  # seen by the memory watch, maybe moved away
            if self._loop is not None and child is not None:
                child.killed_at = slot.replacing_since = self._loop.time()
        if reason is not None:
            self._killed[reason] = self._killed.get(reason, 0) + 1
        if child is not None:
            child.kill_reason = reason
            child.kill_code = code
        slot.memory.stop()
        if pid is not None and child is not None and child.ready and self._can_spawn():
            self._replace_now(slot, child)
            return
        slot.fire(SlotEvent.KILL)
        if self._loop is not None and child is not None and child.timer is None:
            child.timer = self._loop.call_later(_REAP_TIMEOUT_S, self._reap_overdue, slot,
                                                child)

    def _replace_now(self, slot: Slot, child: Child) -> None:
        """Keep the killed child among the dying and fork the slot's next child now."""
        output, child.output = child.output, None  # its last lines still name its attempt
        self._retire(slot)
        child.output = output
        child.timer = self._require_loop().call_later(_REAP_TIMEOUT_S, self._dying_overdue,
                                                      child)
        self._dying[child.generation] = child
        self._spawn(slot)

    def _settle_dying(self, dying: Child, report: Report | None) -> None:
        self._dying.pop(dying.generation, None)
        if dying.timer is not None:
            dying.timer.cancel()
        if dying.output is not None:
            dying.output.close()
            dying.output = None
        resolve_gone(dying.attempt, dying.pid, dying.kill_reason, dying.kill_code, report)

    def _dying_overdue(self, dying: Child) -> None:
        self._log.error("no reap report for killed child %s", dying.pid,
                        extra=fields("child_reap_overdue", pid=dying.pid))
        dying.timer = None
        self._settle_dying(dying, None)

    def _reap_overdue(self, slot: Slot, child: Child) -> None:
        if slot.child is not child or slot.state is not SlotState.KILLING:
            return
        self._log.error("no reap report for child %s; replacing it anyway", child.pid,
                        extra=fields("child_reap_overdue", pid=child.pid))
        child.timer = None
        self._by_gen.pop(child.generation, None)
        self._end_execution(slot, None)
        self._retire(slot)
        self._respawn(slot, early_death=False)

    # ------------------------------------------------------------------------ reaping

    def _on_reaped(self, msg: ChildReaped) -> None:
        """The template reaped a child: a dying one (its slot was refilled already) or the
        current child of its slot, which is then replaced."""
        dying = self._dying.get(msg.generation)
        slot = None if dying is not None else self._by_gen.pop(msg.generation, None)
        gone = dying if dying is not None else (slot.child if slot is not None else None)
        if gone is None or gone.generation != msg.generation:
            return
        oom_kills = self._oom_kills(gone)
        if slot is not None and slot.state is SlotState.EXITING:
            self._recycled += 1
        elif gone.kill_reason is None and not self._closing:
            self._crashed += 1
            att = gone.attempt
            self._log.warning("child %s died (exit code %s, signal %s)", gone.pid,
                              msg.exit_code, msg.signal, extra=fields(
                                  "child_died", pid=gone.pid, exit_code=msg.exit_code,
                                  signal=msg.signal,
                                  attempt_id=att.attempt_id if att and slot else None,
                                  task_id=att.task_id if att and slot else None))
        reap_ms = None
        if gone.kill_reason is not None and gone.killed_at is not None:
            reap_ms = max(0, round((self._require_loop().time() - gone.killed_at) * 1000))
        report = Report(child_pid=gone.pid, exit_code=msg.exit_code, signal=msg.signal,
                        cpu_ms=msg.cpu_ms, peak_rss_bytes=msg.peak_rss_bytes,
                        kill_reason=gone.kill_reason, reap_ms=reap_ms, oom_kills=oom_kills)
        if dying is not None:
            self._settle_dying(dying, report)
            return
        assert slot is not None
        early_death = not gone.ready  # died before it ever served: back off
        self._end_execution(slot, report)
        self._retire(slot)
        self._respawn(slot, early_death=early_death)

    def _oom_kills(self, gone: Child) -> int | None:
        """The kernel's OOM kills in the slot's memory group since its last look; a child
        we did not kill that the kernel did is ended MEMORY_LIMIT. None: not a cgroup's
        limit, or none counted."""
        if self._cgroups is None or self._cgroups.plan.memory is None or gone.slot < 0:
            return None
        kills = self._cgroups.oom_kills_since(gone.slot)
        if not kills:
            return None
        if gone.kill_reason is None or gone.kill_code is None:
            # Our own kill after its death (the socket's EOF) names no reason: the kernel's
            # count does.
            gone.kill_reason = gone.kill_code = UnknownCode.MEMORY_LIMIT.value
            self._killed[gone.kill_reason] = self._killed.get(gone.kill_reason, 0) + 1
            att = gone.attempt
            self._log.warning(
                "child %s was killed by the kernel over the memory limit (%d OOM kill%s)",
                gone.pid, kills, "" if kills == 1 else "s", extra=fields(
                    "child_oom_killed", pid=gone.pid, oom_kills=kills,
                    attempt_id=None if att is None else att.attempt_id,
                    task_id=None if att is None else att.task_id))
        return kills

    def _respawn(self, slot: Slot, *, early_death: bool) -> None:
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

    def _spawn_if_pending(self, slot: Slot) -> None:
        if not self._closing and (slot.child is None or slot.child.channel is None):
            self._spawn(slot)

    def _end_execution(self, slot: Slot, report: Report | None, *,
                       default_reason: str = "SHUTDOWN") -> None:
        """End the execution the slot's child ran, for a child that is gone."""
        child = slot.child
        if child is not None:
            resolve_gone(child.attempt, child.pid, child.kill_reason, child.kill_code, report,
                         default_reason)
        self._finish_attempt(slot)

    def _finish_attempt(self, slot: Slot) -> None:
        """The slot's child runs no attempt any more."""
        child = slot.child
        if child is not None and child.attempt is not None:
            if child.attempt.child is child:
                child.attempt.child = None
            child.attempt = None
        slot.memory.stop()

    def _forget_child(self, slot: Slot, default_reason: str) -> None:
        """Retire the slot's child, gone with the template or the pool, and end what it ran
        (a bare report: a forgotten child's pid is not reported)."""
        child = slot.child
        self._retire(slot)
        if child is not None and child.attempt is not None:
            resolve_gone(child.attempt, None, child.kill_reason, child.kill_code, None,
                         default_reason)
            child.attempt = None

    def _retire(self, slot: Slot) -> None:
        """Forget the current child of ``slot``: its socket, its timer, its memory watch."""
        child, slot.child = slot.child, None
        slot.memory.forget()
        if child is None:
            return
        if child.timer is not None:
            child.timer.cancel()
            child.timer = None
        if child.channel is not None:
            child.channel.close()
            child.channel = None
        if child.output is not None:
            child.output.close()  # the child is gone: what it wrote is all in the pipe
            child.output = None
        self._by_gen.pop(child.generation, None)

    # ------------------------------------------------------------------------ template

    def _on_template_lost(self) -> None:
        """Its children died with it: their attempts end uncertain, every slot waits for
        the restart."""
        for dying in list(self._dying.values()):
            dying.kill_reason = dying.kill_reason or "TEMPLATE_LOST"
            self._settle_dying(dying, None)
        for slot in self._slots:
            child = slot.child
            if self._cgroups is not None:
                self._cgroups.kill(slot.index)  # what they started, wherever it went
            if child is not None and child.pid is not None:
                procutil.killpg(child.pid)
                if slot.state is not SlotState.SPAWNING:
                    self._crashed += 1
            self._forget_child(slot, "TEMPLATE_LOST")
            slot.fire(SlotEvent.FORK)
        self._orphans.after_template_loss()  # what the children started in other sessions

    def _on_template_restarted(self) -> None:
        for slot in self._slots:
            self._spawn(slot)

    async def _on_template_changed(self) -> None:
        await self.close()

    # ------------------------------------------------------------------------ helpers

    def _new_future(self) -> asyncio.Future[None]:
        return self._require_loop().create_future()

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("ChildPool.start() was not awaited")
        return self._loop
