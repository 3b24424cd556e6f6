"""The template process: imports the handler module once and forks children on request.

Started by the supervisor's pool as
``python -m orbit_child.template MODULE:ATTR --control-fd N --parent-pid P --sys-path JSON``.
It is single-threaded with no event loop, so forking it is safe. Its control messages
(``HandlersLoaded``, ``HandlersRejected``, ``ChildForked``, ``ChildReaped`` out; ``ForkChild``
with the child's socket, ``StopTemplate`` in) are listed in orbit_host/messages.py.

Safety net: the template is a child subreaper and asks for SIGUSR1 when the supervisor dies
(even by SIGKILL); then, or when the control socket closes, it SIGKILLs every child's process
group and every process re-parented to it, reaps them, and exits. Children get SIGKILL if
the template itself dies. Processes re-parented to the template while it runs belong to
children that already died (children are subreapers themselves), so they are killed at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import socket
import sys
import time
import traceback
from types import FrameType
from typing import Any, NoReturn

import orjson

from orbit_host.isolation import ChildIsolation
from orbit_host.messages import (
    ChildForked,
    ChildReaped,
    ForkChild,
    HandlersLoaded,
    HandlersRejected,
    MalformedMessage,
    StopTemplate,
    decode_for_template,
)
from orbit_host.procutil import (
    child_pids,
    close_fds_except,
    descendant_pids,
    kill_pid,
    killpg,
    set_batch_scheduling,
    set_child_subreaper,
    set_parent_death_signal,
)
from orbit_wire.errors import HandlerSpecError

from .api import Handler, declared_policies
from .diag import report, set_captured
from .loop import ChildLoop
from .registry import load_handlers

_SHUTDOWN_BUDGET_S = 3.0
_DEATH_SIGNAL = signal.SIGUSR1  # catchable, and used for nothing else


class Template:
    def __init__(self, ctl: socket.socket, handlers: tuple[Handler, ...],
                 isolation: ChildIsolation | None = None, child_nice: int = 0) -> None:
        self._ctl = ctl
        self._isolation = isolation or ChildIsolation()
        self._child_nice = child_nice
        self._handlers = {h.capability: h for h in handlers}
        self._children: dict[int, int] = {}  # pid -> generation
        self._wake_r, self._wake_w = os.pipe()
        self._pgrp = os.getpgrp()
        self._pid = os.getpid()
        # Processes the handler module started while it was imported are its own business
        # (they are still killed when the template ends); only orphans of children are swept.
        self._started_at_import = set(child_pids(self._pid))

    # -------------------------------------------------------------------------------- loop

    def serve(self) -> NoReturn:
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _noop)
        poller = select.poll()
        poller.register(self._ctl, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            for fd, _mask in events:
                if fd == self._wake_r:
                    _drain(self._wake_r)
                    self._reap()
                else:
                    self._on_control()

    def _on_control(self) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(self._ctl, 65536, 4)
        except BlockingIOError:
            return
        except OSError:
            self.shutdown(0)
        if not data:
            self.shutdown(0)  # the supervisor closed its end: nothing may outlive it
        try:
            msg = decode_for_template(orjson.loads(data))
        except (orjson.JSONDecodeError, MalformedMessage):
            msg = None
        if isinstance(msg, ForkChild) and len(fds) in (1, 2):
            # The second descriptor, when sent, is the child's output pipe (stdout+stderr).
            self._fork(msg.generation, fds[0], fds[1] if len(fds) == 2 else None)
            return
        for fd in fds:
            os.close(fd)
        if isinstance(msg, StopTemplate):
            self.shutdown(0)
        _log("template_malformed_control", "template: ignored a malformed control message")

    def _fork(self, generation: int, child_fd: int, out_fd: int | None) -> None:
        _flush_stdio()  # or every child would print the template's buffered output again
        pid = os.fork()
        if pid == 0:
            self._become_child(generation, child_fd, out_fd)
        # Both sides call setpgid so the group exists before the parent learns the pid.
        # OSError: the child already did it, or already died (then a reap report follows).
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        os.close(child_fd)
        if out_fd is not None:
            os.close(out_fd)
        self._children[pid] = generation
        if not self._send(ChildForked(generation, pid)):
            self.shutdown(0)

    def _become_child(self, generation: int, child_fd: int, out_fd: int | None) -> NoReturn:
        try:
            if out_fd is not None:
                # The supervisor reads this child's output apart from the others', knowing
                # which attempt it runs; Orbit's own diagnostics become one line each.
                os.dup2(out_fd, 1)
                os.dup2(out_fd, 2)
                os.close(out_fd)
                set_captured(True)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, _DEATH_SIGNAL):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            # The supervisor owns the child's lifetime (it drains on SIGTERM and kills with
            # SIGKILL); a SIGTERM sent to the whole service must not cut running handlers.
            # A Python-level handler, unlike SIG_IGN, is reset for programs a handler execs.
            signal.signal(signal.SIGTERM, _noop)
            os.setpgid(0, 0)
            set_parent_death_signal(signal.SIGKILL)
            if os.getppid() != self._pid:
                os._exit(1)  # the template died between fork and prctl
            set_child_subreaper()
            set_batch_scheduling()
            self._isolation.enter_child()
            if self._child_nice:
                # Below the supervisor: its lease timers must not wait for a busy handler.
                os.nice(self._child_nice)
            self._ctl.detach()  # its descriptor is closed below; the object must not reuse it
            close_fds_except({child_fd})
            sock = socket.socket(fileno=child_fd)
            sock.setblocking(True)
            ChildLoop(sock, generation, self._handlers).serve()
        except BaseException:
            _log("child_start_failed", "child: failed to start", traceback.format_exc(),
                 level="ERROR")
            os._exit(70)

    def _reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if not self._report_reap(pid, status, usage):
                self.shutdown(0)
        self._kill_orphans()

    def _report_reap(self, pid: int, status: int, usage: Any) -> bool:
        """Tell the parent a child is gone; False if the control socket is broken."""
        self._started_at_import.discard(pid)  # its pid may be reused by an orphan later
        generation = self._children.pop(pid, None)
        if generation is None:
            return True  # an orphan we killed, or one that exited on its own
        signalled = os.WIFSIGNALED(status)
        return self._send(ChildReaped(
            generation, pid,
            exit_code=None if signalled else os.waitstatus_to_exitcode(status),
            signal=os.WTERMSIG(status) if signalled else None,
            cpu_ms=int((usage.ru_utime + usage.ru_stime) * 1000),
            peak_rss_bytes=usage.ru_maxrss * 1024,
        ))

    def _kill_orphans(self) -> None:
        """Kill processes re-parented to us: their child died, so their attempt is over."""
        for pid in child_pids(self._pid):
            if pid in self._children or pid in self._started_at_import:
                continue
            try:
                pgid = os.getpgid(pid)
            except OSError:
                continue
            for victim in descendant_pids(pid):
                kill_pid(victim)
            if pgid not in (self._pgrp, self._pid) and pgid not in self._children:
                killpg(pgid)
            kill_pid(pid)

    def _send(self, msg: ChildForked | ChildReaped) -> bool:
        try:
            self._ctl.send(orjson.dumps(msg.to_wire()))
        except OSError:
            return False
        return True

    # ---------------------------------------------------------------------------- shutdown

    def shutdown(self, status: int) -> NoReturn:
        """SIGKILL every child group and every descendant, reap for a bounded time, exit."""
        signal.signal(_DEATH_SIGNAL, signal.SIG_IGN)
        for pid in list(self._children):
            killpg(pid)
        deadline = time.monotonic() + _SHUTDOWN_BUDGET_S
        while time.monotonic() < deadline:
            for pid in descendant_pids(self._pid):
                kill_pid(pid)
            try:
                while True:
                    pid, status, usage = os.wait4(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    self._report_reap(pid, status, usage)  # best effort: the parent may be gone
            except ChildProcessError:
                break
            if not child_pids(self._pid):
                break
            time.sleep(0.005)
        os._exit(status)


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()


def _noop(_sig: int, _frame: FrameType | None) -> None:
    """SIGCHLD only needs to wake the poll loop through the wakeup fd."""


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _log(event: str, message: str, exc: str | None = None, *, level: str = "WARNING") -> None:
    report("orbit-template", level, event, message, exc)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="orbit_child.template")
    parser.add_argument("spec")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--sys-path", default="[]")
    for flag in ("--child-uid", "--child-gid", "--rlimit-as", "--rlimit-cpu", "--nofile"):
        parser.add_argument(flag, type=int)
    parser.add_argument("--child-nice", type=int, default=0)
    parser.add_argument("--captured", action="store_true",
                        help="the supervisor reads this process's output (diagnostic lines)")
    args = parser.parse_args(argv)
    set_captured(args.captured)
    isolation = ChildIsolation(args.child_uid, args.child_gid, args.rlimit_as,
                               args.rlimit_cpu, args.nofile)
    # The child user and the limits, before anything else (the parent-death signal below
    # would be cleared by a change of user) and before any handler code is imported.
    isolation.enter_template()

    # Terminal Ctrl-C and a service-wide SIGTERM are the supervisor's to handle (it drains);
    # the template only ends when told, when its control socket closes, or when the
    # supervisor dies (the parent-death signal).
    template_holder: list[Template] = []

    def on_parent_death(_sig: int, _frame: FrameType | None) -> None:
        if template_holder:
            template_holder[0].shutdown(0)
        os._exit(0)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(_DEATH_SIGNAL, on_parent_death)  # before arming it: no default-action window
    set_parent_death_signal(_DEATH_SIGNAL)
    set_child_subreaper()
    ctl = socket.socket(fileno=args.control_fd)
    ctl.setblocking(True)
    if os.getppid() != args.parent_pid:
        os._exit(0)  # the supervisor died before the death signal was armed

    extra = [p for p in orjson.loads(args.sys_path) if isinstance(p, str)]
    sys.path[:0] = [p for p in extra if p not in sys.path]
    try:
        handlers = load_handlers(args.spec)
    except HandlerSpecError as exc:
        ctl.send(orjson.dumps(HandlersRejected(exc.message).to_wire()))
        os._exit(2)
    ctl.send(orjson.dumps(HandlersLoaded(tuple(h.capability for h in handlers),
                                         declared_policies(handlers) or None).to_wire()))
    template = Template(ctl, handlers, isolation, max(0, min(19, args.child_nice)))
    template_holder.append(template)
    template.serve()


if __name__ == "__main__":
    main()
