"""The child's frame loop: one task at a time, frames over one stream socket.

The messages (``RunTask``, ``CancelTask``, ``LeaveChild`` in; ``ChildReady``, ``TaskDone``,
``ProgressNote`` out) are listed in orbit_host/messages.py; every frame carries the child's
generation. A handler's progress is spaced by progress.py and its last note always goes out
before the attempt's answer.

The loop never lets handler exception text out of the worker's host: tracebacks go to stderr
(the worker's local log); the first line of a message goes to the supervisor, which records
it only when its operator opted in. Processes a handler started are killed when its attempt ends.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import resource
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any, NoReturn

from orbit_host.framing import FrameDecoder, FrameError, recv_frame, send_frame
from orbit_host.messages import (
    CancelTask,
    ChildReady,
    MalformedMessage,
    ProgressNote,
    RunTask,
    TaskDone,
    decode_for_child,
)
from orbit_host.procutil import descendant_pids, kill_pid
from orbit_wire.errors import ValueRejected
from orbit_wire.fails_on import declared_failure
from orbit_wire.model import Capability, Outcome, UnknownCode
from orbit_wire.names import EXCEPTION_TYPE_MAX, message_first_line

from .api import Execution, Handler, WorkerFailure, parents_of
from .diag import report
from .progress import ProgressSender
from .results import encode_json_value

__all__ = ["ChildLoop"]

class ChildLoop:
    """Serves run frames on ``sock`` until EOF or an exit frame, then ends the process."""

    def __init__(self, sock: socket.socket, generation: int,
                 handlers: Mapping[Capability, Handler]) -> None:
        self._sock = sock
        self._gen = generation
        self._handlers = handlers
        self._decoder = FrameDecoder()
        self._pending: list[dict[str, Any]] = []
        self._pid = os.getpid()
        self._running: str | None = None
        self._cancel_requested = False
        self._runner: Any = None  # asyncio.Runner, made on the first async handler
        # The running attempt's progress messages (made on its first note); a handler's
        # thread may send one, so every write of a frame during a run takes the lock.
        self._progress: ProgressSender | None = None
        self._progress_open = False  # the running attempt may still report progress
        self._send_lock = threading.Lock()

    def serve(self) -> NoReturn:
        send_frame(self._sock, ChildReady(self._gen, self._pid).to_wire())
        while True:
            try:
                frame = recv_frame(self._sock, self._decoder, self._pending)
            except (OSError, FrameError) as exc:
                _log("child_control_broken", f"child {self._pid}: control stream broken: {exc}")
                os._exit(3)
            if frame is None:
                _exit(0)
            if frame.get("g") != self._gen:
                _log("child_frame_ignored",
                     f"child {self._pid}: ignored a frame for generation {frame.get('g')!r}")
                continue
            kind = frame.get("t")
            if kind == "run":
                try:
                    self._serve_run(frame)
                except OSError as exc:  # the supervisor is gone; it kills us anyway
                    _log("child_cannot_answer", f"child {self._pid}: cannot answer: {exc}")
                    _exit(3)
            elif kind == "exit":
                _exit(0)
            # A cancel for an attempt that already finished needs no answer.

    # ----------------------------------------------------------------------------- one task

    def _serve_run(self, frame: dict[str, Any]) -> None:
        attempt_id = str(frame.get("a"))
        self._running = attempt_id
        self._cancel_requested = False
        self._progress_open = True
        before = _cpu_seconds()
        try:
            answer = self._run(frame)
        finally:
            if os.getpid() != self._pid:
                # A handler forked and its copy returned here; only the real child may answer.
                os._exit(0)
            with self._send_lock:
                progress, self._progress = self._progress, None
                self._progress_open = False
            # The last progress goes before the answer: a failed attempt's last details
            # are the next attempt's checkpoint.
            self._flush_progress(progress)
            self._running = None
            _kill_descendants(self._pid)
            _flush_stdio()  # the process may be killed or recycled before it would flush
        done = TaskDone(
            generation=self._gen, attempt_id=attempt_id,
            cpu_ms=int((_cpu_seconds() - before) * 1000),
            peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            **answer,
        )
        with self._send_lock:
            send_frame(self._sock, done.to_wire())

    # ----------------------------------------------------------------------------- progress

    def _note_progress(self, fraction: float | None, details: str | None) -> None:
        """``execution.progress`` after its checks: spaced by the attempt's sender. A call
        from a forked copy of the child, or once the attempt is over, is ignored."""
        if os.getpid() != self._pid:
            return
        with self._send_lock:
            if not self._progress_open:
                return
            sender = self._progress
            if sender is None:  # the attempt's first note
                attempt_id = str(self._running)
                sender = self._progress = ProgressSender(
                    lambda fraction, text: self._send_progress(attempt_id, fraction, text),
                    time.monotonic)
            # The supervisor gone, the answer's send says so (and it kills us anyway).
            with contextlib.suppress(OSError):
                sender.note(fraction, details)

    def _send_progress(self, attempt_id: str, fraction: float | None,
                       details: str | None) -> None:
        note = ProgressNote(self._gen, attempt_id, fraction, details)
        send_frame(self._sock, note.to_wire())

    def _flush_progress(self, sender: ProgressSender | None) -> None:
        if sender is None or not sender.pending:
            return
        try:
            sender.flush()
        except OSError as exc:  # the answer's send fails the same way, and says so
            _log("child_cannot_answer", f"child {self._pid}: cannot send progress: {exc}")

    def _run(self, frame: dict[str, Any]) -> dict[str, Any]:
        """The outcome fields of a ``TaskDone`` for one run frame."""
        try:
            run = decode_for_child(frame)
        except MalformedMessage:
            run = None
        if not isinstance(run, RunTask):
            _log("child_malformed_run", f"child {self._pid}: malformed run frame")
            return _unknown(UnknownCode.HANDLER_ERROR)
        cap = run.capability
        handler = self._handlers.get(cap)
        if handler is None:
            _log("handler_missing", f"attempt {run.attempt_id}: no handler registered for {cap}")
            return _unknown(UnknownCode.HANDLER_ERROR)
        execution = Execution(
            task_id=run.task_id, attempt_id=run.attempt_id, epoch=run.epoch,
            attempt_number=run.attempt_number, capability=cap, payload=run.payload,
            deadline_at_ms=run.deadline_at_ms, idempotency=run.idempotency,
            checkpoint=run.checkpoint, parents=parents_of(run.parents),
            _cancel_check=self._cancelled,
            _progress_sink=self._note_progress,
        )
        try:
            value = self._call(handler, execution)
        except WorkerFailure as failure:
            return _failure_answer(failure, execution.attempt_id)
        except BaseException as exc:
            return _raised_answer(handler, execution, exc)
        try:
            text = encode_json_value(value)
        except ValueRejected as exc:
            _log("handler_invalid_result",
                 f"attempt {execution.attempt_id}: invalid result ({exc.code}): {exc.message}")
            return _unknown(UnknownCode.INVALID_HANDLER_RESULT)
        return {"outcome": Outcome.SUCCEEDED.value, "result_json": text}

    def _call(self, handler: Handler, execution: Execution) -> Any:
        value = handler.fn(execution)
        if inspect.isawaitable(value):
            if self._runner is None:
                import asyncio  # only children that serve async handlers pay for a loop

                self._runner = asyncio.Runner()
            value = self._runner.run(self._watched(value))
        return value

    async def _watched(self, value: Any) -> Any:
        """Await an async handler as a task of its own; a cancel frame for this attempt
        (or the supervisor's end) cancels that task, so the handler sees CancelledError at
        its next await. Ignoring it only delays the SIGKILL at the end of the grace."""
        import asyncio

        from orbit_host.task_owner import TaskOwner

        owner = TaskOwner()
        task = owner.start(value)
        loop = asyncio.get_running_loop()
        fd = self._sock.fileno()

        def readable() -> None:
            if self._cancelled():
                loop.remove_reader(fd)
                task.cancel()

        if self._cancelled():
            task.cancel()
        else:
            loop.add_reader(fd, readable)
        try:
            return await task
        finally:
            loop.remove_reader(fd)
            await owner.stop()  # the handler's task has ended unless this one was cancelled

    # ----------------------------------------------------------------------------- cancel

    def _cancelled(self) -> bool:
        """Non-blocking look at the socket for a cancel frame for the running attempt."""
        if self._cancel_requested:
            return True
        try:
            poller = select.poll()
            poller.register(self._sock, select.POLLIN)
            while poller.poll(0):
                data = self._sock.recv(256 * 1024)
                if not data:  # the parent is gone; it kills us anyway
                    self._cancel_requested = True
                    break
                self._pending.extend(self._decoder.feed(data))
        except (OSError, FrameError):
            self._cancel_requested = True
        for frame in self._pending:
            if frame.get("t") == "cancel" and frame.get("g") == self._gen:
                try:
                    cancel = decode_for_child(frame)
                except MalformedMessage:
                    continue
                if isinstance(cancel, CancelTask) and cancel.attempt_id == self._running:
                    self._cancel_requested = True
        return self._cancel_requested


def _failure_answer(failure: WorkerFailure, attempt_id: str) -> dict[str, Any]:
    if not failure.code_is_valid or not isinstance(failure.retryable, bool):
        _log("handler_invalid_failure",
             f"attempt {attempt_id}: WorkerFailure with an invalid code or retryable flag")
        return _unknown(UnknownCode.HANDLER_ERROR)
    if not isinstance(failure.details, dict):
        _log("handler_invalid_failure",
             f"attempt {attempt_id}: WorkerFailure details must be a JSON object")
        return _unknown(UnknownCode.HANDLER_ERROR)
    try:
        details = encode_json_value(failure.details, what="details")
    except ValueRejected as exc:
        _log("handler_invalid_failure",
             f"attempt {attempt_id}: WorkerFailure details rejected ({exc.code}): {exc.message}")
        return _unknown(UnknownCode.HANDLER_ERROR)
    return {"outcome": Outcome.FAILED.value, "code": failure.code,
            "retryable": failure.retryable, "details_json": details}


def _raised_answer(handler: Handler, execution: Execution,
                   exc: BaseException) -> dict[str, Any]:
    """The answer for a handler that raised ``exc``: FAILED for a type its task type
    declares in ``fails_on`` (retryable as declared), else UNKNOWN/HANDLER_ERROR. Either
    carries the exception's type name; its message only travels to the supervisor, which
    records its first line when its operator opted in."""
    kind = _type_name(exc)
    retryable = declared_failure(handler.fails_on, exc)
    declared = "" if retryable is None else " (declared in fails_on: FAILED)"
    _log("handler_raised", f"attempt {execution.attempt_id} of task {execution.task_id}: "
         f"handler {handler.capability} raised {kind}{declared}", traceback.format_exc(),
         level="ERROR" if retryable is None else "WARNING")
    details = encode_json_value({"exception_type": kind}, what="details")
    answer: dict[str, Any]
    if retryable is None:
        answer = {**_unknown(UnknownCode.HANDLER_ERROR), "details_json": details}
    else:
        answer = {"outcome": Outcome.FAILED.value, "code": UnknownCode.HANDLER_ERROR.value,
                  "retryable": retryable, "details_json": details}
    message = _first_line(exc)
    if message:
        answer["exception_message"] = message
    return answer


def _type_name(exc: BaseException) -> str:
    """The exception's qualified type name: ``builtins.KeyError``, ``myapp.errors.Boom``."""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"[:EXCEPTION_TYPE_MAX]


def _first_line(exc: BaseException) -> str | None:
    """The first line of ``exc``'s message (``message_first_line``); None when it has none
    or ``str()`` itself fails."""
    try:
        return message_first_line(str(exc))
    except Exception:  # a broken __str__ is the handler's; the answer still goes out
        return None


def _unknown(code: UnknownCode) -> dict[str, Any]:
    return {"outcome": Outcome.UNKNOWN.value, "code": code.value}


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _kill_descendants(pid: int) -> None:
    """Kill what the attempt started and reap what we can without blocking.

    The child is a subreaper, so even double-forked processes are still below it here.
    """
    for victim in descendant_pids(pid):
        kill_pid(victim, signal.SIGKILL)
    reap_zombies()


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            continue


def _exit(status: int) -> NoReturn:
    """Leave without running the template's atexit hooks or finalizers (they are not ours)."""
    _flush_stdio()
    os._exit(status)


def reap_zombies() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _log(event: str, message: str, exc: str | None = None, *, level: str = "WARNING") -> None:
    report("orbit-child", level, event, message, exc)
