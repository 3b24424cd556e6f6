"""What a child says, and what the pool does about it (the pool's middle layer).

A child's frames (orbit_host/messages.py) arrive on its channel (channel.py): ``ready``
once it can take work, and one answer per attempt it ran. The answer is checked
(outcomes.py) and ends the attempt's execution; the child is then recycled (max tasks,
memory over the limit) or handed the next attempt. A frame for another generation is
ignored, a result for an attempt the child no longer runs is dropped, and a child that
breaks its channel, sends garbage or uses too much memory while it runs is killed.
ChildPool (pool.py) adds what runs on a child and the public API.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from orbit_host import procutil
from orbit_host.framing import FrameError, encode_frame
from orbit_host.logs import fields
from orbit_host.messages import (
    ChildReady,
    LeaveChild,
    MalformedMessage,
    ProgressNote,
    decode_from_child,
)
from orbit_wire.errors import ValueRejected
from orbit_wire.frames import Report
from orbit_wire.model import UnknownCode

from .attempts import Attempt, RunEvent
from .children import Child, Children, Slot
from .outcomes import outcome_from_done
from .progress import checked_progress
from .slots import SlotEvent, SlotState

__all__ = ["ChildFrames"]

_GRACEFUL_EXIT_S = 2.0  # a recycled child that does not leave by then is killed


class ChildFrames(Children):
    """The answers and the recycling; ChildPool is the class to use."""

    def __init__(self, handlers: str, size: int, *, max_tasks_per_child: int | None,
                 max_memory_bytes: int | None, logger: logging.Logger,
                 on_child_ready: Callable[[], None] | None, reap_orphans: bool,
                 child_nice: int, capture_output: bool, exception_messages: bool) -> None:
        super().__init__(handlers, size, logger=logger, on_child_ready=on_child_ready,
                         reap_orphans=reap_orphans, child_nice=child_nice,
                         capture_output=capture_output)
        self._exception_messages = exception_messages
        self._max_tasks = max_tasks_per_child
        self._max_memory = max_memory_bytes
        self.messages_sent = 0  # to children, and below from them (stats())
        self.messages_received = 0

    def _send_child(self, slot: Slot, data: bytes) -> None:
        """Queue bytes for the child (channel.py); a broken socket is handled like an EOF."""
        if slot.child is not None and slot.child.channel is not None:
            self.messages_sent += 1
            slot.child.channel.send(data)

    def _on_child_frame(self, slot: Slot, frame: dict[str, Any]) -> None:
        self.messages_received += 1
        child = slot.child
        if child is None:
            return
        if frame.get("g") != child.generation:
            self._log.warning("ignored a frame for generation %r on the child of generation %d",
                              frame.get("g"), child.generation,
                              extra=self._ids(slot, "child_frame_ignored"))
            return
        try:
            message = decode_from_child(frame)
        except MalformedMessage:
            self._log.warning("ignored a %r frame from child %s", frame.get("t"), child.pid,
                              extra=self._ids(slot, "child_frame_ignored"))
            return
        if isinstance(message, ChildReady):
            if slot.state is SlotState.SPAWNING:
                child.ready = True
                self._maybe_ready(slot)
            return
        att = child.attempt
        if isinstance(message, ProgressNote):
            self._on_progress(slot, att, message)
            return
        if slot.state is not SlotState.BUSY or att is None or message.attempt_id != att.attempt_id:
            self._log.info("dropped a result for attempt %r: no longer running on child %s",
                           message.attempt_id, child.pid, extra=fields(
                               "result_dropped", attempt_id=message.attempt_id, pid=child.pid))
            return
        report = Report(child_pid=child.pid, cpu_ms=message.cpu_ms,
                        peak_rss_bytes=message.peak_rss_bytes)
        try:
            outcome = outcome_from_done(message, report, warn=functools.partial(
                self._warn, slot, "child_invalid_result"),
                exception_messages=self._exception_messages)
        except MalformedMessage as exc:
            self._log.error("child %s sent a malformed result (%s); killing it",
                            child.pid, exc, extra=self._ids(slot, "child_malformed_result"))
            self._kill_slot(slot, "PROTOCOL_ERROR", UnknownCode.HANDLER_CRASHED.value)
            return
        future = att.outcome
        if child.output is not None:
            child.output.drain()  # written before the answer: still this attempt's
            child.output.attach(None, None)
        self._finish_attempt(slot)
        att.move_run(RunEvent.ENDED)
        child.tasks += 1
        self._after_task(slot, child)
        if future is not None and not future.done():
            future.set_result(outcome)

    def _on_progress(self, slot: Slot, att: Attempt | None, note: ProgressNote) -> None:
        """A handler's progress: checked and kept, the latest only, on its attempt's record
        (renewals and the finish carry it); a note breaking the rules is dropped, and said
        once per attempt. One for an attempt the child no longer runs is dropped quietly."""
        if slot.state is not SlotState.BUSY or att is None or note.attempt_id != att.attempt_id:
            return
        now = self._require_loop().time()
        try:
            progress = checked_progress(note.fraction, note.details_json)
        except ValueRejected as exc:
            att.progress.alive(now)  # a child that talks is not stuck
            att.progress_refused += 1
            if att.progress_refused == 1:
                self._warn(slot, "child_invalid_progress",
                           f"attempt {att.attempt_id}: dropped a progress note from child "
                           f"{slot.pid} ({exc.code}): {exc.message}")
            return
        att.progress.note(progress, now)

    def _after_task(self, slot: Slot, child: Child) -> None:
        """Recycle after max tasks or over the memory limit; otherwise the slot is ready."""
        reason = None
        if self._max_tasks is not None and child.tasks >= self._max_tasks:
            reason = "max tasks"
        elif self._max_memory is not None and child.pid is not None:
            rss = slot.memory.over_limit(child.pid, self._max_memory)
            if rss is not None:
                reason = f"memory {rss} bytes over the limit"
        if reason is None:
            self._release(slot)
            return
        self._log.info("recycling child %s (%s)", child.pid, reason,
                       extra=fields("child_recycled", pid=child.pid, reason=reason))
        slot.fire(SlotEvent.RECYCLE)
        self._send_child(slot, encode_frame(LeaveChild(child.generation).to_wire()))
        child.timer = self._require_loop().call_later(
            _GRACEFUL_EXIT_S, self._force_exit, slot, child)

    def _force_exit(self, slot: Slot, child: Child) -> None:
        if slot.child is child and slot.state is SlotState.EXITING and child.pid:
            self._log.warning("recycled child %s did not exit; killing it", child.pid,
                              extra=fields("child_recycle_overdue", pid=child.pid))
            procutil.killpg(child.pid)

    def _on_child_eof(self, slot: Slot, write_error: OSError | None) -> None:
        """The child's socket closed: it died, or broke its end. Make sure it is dead."""
        if write_error is not None:
            self._log.warning("writing to child %s failed: %s", slot.pid, write_error,
                              extra=self._ids(slot, "child_write_failed"))
        if slot.state in (SlotState.KILLING, SlotState.EXITING, SlotState.CLOSED):
            return
        if slot.pid is None:
            return  # killed as soon as the template tells us its pid
        self._kill_slot(slot, None, None)

    def _on_broken_frame(self, slot: Slot, exc: FrameError) -> None:
        self._log.error("child %s sent a broken frame (%s); killing it", slot.pid, exc,
                        extra=self._ids(slot, "child_broken_frame"))
        self._kill_slot(slot, "PROTOCOL_ERROR", UnknownCode.HANDLER_CRASHED.value)

    def _over_memory(self, slot: Slot, att: Attempt, rss: int) -> None:
        """The memory watch found the tree of ``att``'s child over the limit."""
        self._log.warning("attempt %s: child %s uses %d bytes, over %d; killing it",
                          att.attempt_id, slot.pid, rss, self._max_memory,
                          extra=fields("child_over_memory", attempt_id=att.attempt_id,
                                       task_id=att.task_id, pid=slot.pid, rss_bytes=rss,
                                       limit_bytes=self._max_memory))
        self._kill_slot(slot, UnknownCode.MEMORY_LIMIT.value, UnknownCode.MEMORY_LIMIT.value)

    @staticmethod
    def _ids(slot: Slot, event: str) -> dict[str, Any]:
        att = slot.attempt
        return fields(event, attempt_id=None if att is None else att.attempt_id,
                      task_id=None if att is None else att.task_id, pid=slot.pid)

    def _warn(self, slot: Slot, event: str, message: str) -> None:
        self._log.warning("%s", message, extra=self._ids(slot, event))
