"""The supervisor's end of the template process (``python -m orbit_child.template``).

A ``TemplateLink`` starts the template with ``asyncio.create_subprocess_exec`` (fork+exec
from the loop's thread, which must be the main thread: the template's parent-death signal
follows the thread that spawned it), waits for its capability list, then carries fork
requests (one socket passed with SCM_RIGHTS each) and delivers ``forked`` / ``reaped``
reports to callbacks. The messages are listed in orbit_host/messages.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections import deque
from collections.abc import Callable, Mapping

import orjson

from orbit_host.isolation import ChildIsolation, is_secret_variable
from orbit_host.logs import fields
from orbit_host.messages import (
    ChildForked,
    ChildReaped,
    ForkChild,
    HandlersLoaded,
    HandlersRejected,
    MalformedMessage,
    StopTemplate,
    decode_from_template,
)
from orbit_wire.errors import HandlerSpecError

from .child_output import OutputReader, output_pipe

__all__ = ["TemplateLink", "handler_environment"]

_TEMPLATE_LOG = logging.getLogger("orbit.template")

# The child user and limits every template of this process gets: set once at start by the
# command line (``set_child_isolation``), before any pool exists.
_isolation = ChildIsolation()


def set_child_isolation(isolation: ChildIsolation) -> None:
    global _isolation
    _isolation = isolation


def handler_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The supervisor's environment minus Orbit's credential settings: handlers run with the
    worker's environment but must not learn where its secret is (docs/handlers.md: no secrets, no
    instance identity in handlers)."""
    return {k: v for k, v in env.items() if not is_secret_variable(k)}


class TemplateLink:
    """One template process and its control socket.

    Callbacks run on the loop: ``on_forked(generation, pid)``, ``on_reaped(report)`` and
    ``on_lost()`` (the template went away without being asked to; not called during
    ``start`` or after ``stop``).
    """

    def __init__(self, spec: str, *, on_forked: Callable[[int, int], None],
                 on_reaped: Callable[[ChildReaped], None], on_lost: Callable[[], None],
                 logger: logging.Logger, start_timeout: float = 60.0,
                 child_nice: int = 0, capture_output: bool = False) -> None:
        self._spec = spec
        self._capture = capture_output
        self._output: OutputReader | None = None
        self._child_nice = child_nice
        self._on_forked = on_forked
        self._on_reaped = on_reaped
        self._on_lost = on_lost
        self._log = logger
        self._start_timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._ctl: socket.socket | None = None
        self._out: deque[tuple[bytes, list[int]]] = deque()
        self._caps: asyncio.Future[HandlersLoaded] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def connected(self) -> bool:
        """True while fork requests can be sent."""
        return self._ctl is not None

    async def start(self) -> HandlersLoaded:
        """Start the template; return its capabilities (and the policies they declare) or
        raise HandlerSpecError."""
        loop = self._loop = asyncio.get_running_loop()
        parent_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Resolve MODULE:ATTR as `python -m` would: the current folder first, then our path.
        sys_path = [os.getcwd(), *[p for p in sys.path if p]]
        out_r, out_w = output_pipe() if self._capture else (None, None)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "orbit_child.template", self._spec,
                "--control-fd", str(template_end.fileno()),
                "--parent-pid", str(os.getpid()),
                "--sys-path", orjson.dumps(sys_path).decode(), *_isolation.to_args(),
                "--child-nice", str(self._child_nice),
                *(["--captured"] if self._capture else []),
                stdin=asyncio.subprocess.DEVNULL, pass_fds=(template_end.fileno(),),
                stdout=out_w, stderr=out_w, env=handler_environment(os.environ),
            )
        except BaseException:
            parent_end.close()
            if out_r is not None:
                os.close(out_r)
            raise
        finally:
            template_end.close()
            if out_w is not None:
                os.close(out_w)
        if out_r is not None:
            self._output = OutputReader(loop, out_r, _TEMPLATE_LOG, "template_output")
            self._output.pid = self._proc.pid
        parent_end.setblocking(False)
        self._ctl = parent_end
        self._caps = loop.create_future()
        loop.add_reader(parent_end.fileno(), self._on_readable)
        try:
            async with asyncio.timeout(self._start_timeout):
                return await self._caps
        except BaseException as exc:
            await asyncio.shield(self.stop(timeout=2.0))  # nothing may outlive a failed start
            if isinstance(exc, TimeoutError):
                raise HandlerSpecError(
                    f"loading {self._spec!r} took longer than {self._start_timeout:.0f} s"
                ) from None
            raise

    def fork(self, generation: int, fds: list[int]) -> None:
        """Ask for a child of ``generation`` serving socket ``fds[0]`` (and writing its output
        to ``fds[1]`` when given); the descriptors are owned from here on."""
        self._send(ForkChild(generation), fds)

    async def stop(self, timeout: float) -> None:
        """Ask the template to kill everything and leave; SIGKILL it after ``timeout``.
        Reports that arrive meanwhile are still delivered. Idempotent."""
        self._stopping = True
        self._send(StopTemplate())
        proc = self._proc
        if proc is not None:
            try:
                async with asyncio.timeout(timeout):
                    await proc.wait()
            except TimeoutError:
                self._log.error("template %s did not exit; killing it", proc.pid,
                                extra=fields("template_stop_overdue", pid=proc.pid))
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        self._on_readable()  # the last reap reports
        self._close()
        if self._output is not None:
            self._output.close()
            self._output = None

    async def wait_exited(self) -> None:
        if self._proc is not None:
            await self._proc.wait()
        if self._output is not None:
            self._output.close()
            self._output = None

    # ------------------------------------------------------------------------- internals

    def _on_readable(self) -> None:
        while self._ctl is not None:
            try:
                data = self._ctl.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            try:
                msg = decode_from_template(orjson.loads(data))
            except (orjson.JSONDecodeError, MalformedMessage):
                self._log.error("malformed control message from the template ignored",
                                extra=fields("template_malformed_message"))
                continue
            self._dispatch(msg)

    def _dispatch(self, msg: HandlersLoaded | HandlersRejected | ChildForked | ChildReaped
                  ) -> None:
        starting = self._caps is not None and not self._caps.done()
        match msg:
            case ChildReaped():
                self._on_reaped(msg)
            case ChildForked(generation=generation, pid=pid):
                self._on_forked(generation, pid)
            case HandlersLoaded() if starting:
                assert self._caps is not None
                self._caps.set_result(msg)
            case HandlersRejected(message=message) if starting:
                assert self._caps is not None
                self._caps.set_exception(HandlerSpecError(message))

    def _lost(self) -> None:
        self._close()
        if self._caps is not None and not self._caps.done():
            self._caps.set_exception(HandlerSpecError(
                f"the handler template for {self._spec!r} exited before reporting its handlers"
            ))
            return
        if not self._stopping:
            self._on_lost()

    def _close(self) -> None:
        ctl, self._ctl = self._ctl, None
        if ctl is None:
            return
        if self._loop is not None:
            self._loop.remove_reader(ctl.fileno())
            self._loop.remove_writer(ctl.fileno())
        for _data, fds in self._out:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._out.clear()
        ctl.close()

    def _send(self, msg: ForkChild | StopTemplate, fds: list[int] | None = None) -> None:
        """Queue a control message; descriptors passed along are closed once sent."""
        if self._ctl is None:
            for fd in fds or ():
                os.close(fd)
            return
        self._out.append((orjson.dumps(msg.to_wire()), fds or []))
        self._flush()

    def _flush(self) -> None:
        ctl, loop = self._ctl, self._loop
        if ctl is None or loop is None:
            return
        while self._out:
            data, fds = self._out[0]
            try:
                if fds:
                    socket.send_fds(ctl, [data], fds)
                else:
                    ctl.send(data)
            except BlockingIOError:
                loop.add_writer(ctl.fileno(), self._flush)
                return
            except OSError as exc:
                self._log.error("template control socket failed: %s", exc,
                                extra=fields("template_socket_failed"))
                self._lost()
                return
            self._out.popleft()
            for fd in fds:
                os.close(fd)
        loop.remove_writer(ctl.fileno())
