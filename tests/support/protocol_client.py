"""A small asyncio worker-protocol client for tests (docs/protocol.md, orbit_wire.frames).

    async with await ProtocolClient.connect(server.ws_url) as wc:
        welcome = await wc.hello(worker_cred, capacity=2)
        await wc.credit(2)
        [res] = await wc.reservations(1)
        assert (await wc.start(res)).ok
        answer = await wc.finish(res, "SUCCEEDED", result_json='{"x":1}')

A reader task sorts incoming frames into queues (responses, reservations, cancels, heartbeat
acks, errors); every wait is bounded (``timeout``). ``send_raw`` sends arbitrary text or
bytes for bad-input tests. The connection is closed by ``close()`` / ``async with``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import Collection
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from orbit_wire.frames import (
    AttemptRef,
    Cancel,
    ClientFrame,
    Credit,
    DeclineOp,
    DrainOp,
    ErrorFrame,
    FinishOp,
    Heartbeat,
    HeartbeatAck,
    Hello,
    Op,
    OpResult,
    RenewOp,
    Report,
    Request,
    Reservation,
    Reserve,
    Response,
    ResumeOp,
    StartOp,
    Welcome,
    decode_server_frame,
    encode,
)
from orbit_wire.ids import new_id, new_secret
from orbit_wire.model import Capability, Outcome

from .waiting import UNIT

DEFAULT_TIMEOUT_S = 10.0  # every timeout here is in units of support.waiting
ECHO = Capability("test.echo", "v1", "v1")


class ProtocolClient:
    """One worker connection. Instance identity is made here unless given (reconnect tests)."""

    def __init__(self, ws: ClientConnection, instance_id: str | None = None,
                 instance_secret: str | None = None) -> None:
        self.ws = ws
        self.instance_id = instance_id or new_id(time.time_ns() // 1_000_000)
        self.instance_secret = instance_secret or new_secret()
        self.welcome: Welcome | None = None
        self.responses: asyncio.Queue[Response] = asyncio.Queue()
        self.reserved: asyncio.Queue[Reservation] = asyncio.Queue()
        self.reserve_frames: list[Reserve] = []
        self.cancels: asyncio.Queue[Cancel] = asyncio.Queue()
        self.acks: asyncio.Queue[HeartbeatAck] = asyncio.Queue()
        self.errors: asyncio.Queue[ErrorFrame] = asyncio.Queue()
        self.welcomes: asyncio.Queue[Welcome] = asyncio.Queue()
        self.order: list[str] = []  # type of every frame received, in order
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self._ids = itertools.count(1)
        self._msgs = itertools.count(1)
        self._frames_sent = 0
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, ws_url: str, *, instance_id: str | None = None,
                      instance_secret: str | None = None,
                      ssl: Any = None) -> ProtocolClient:
        """Open the socket (``ssl``: an ``ssl.SSLContext`` for ``wss://``)."""
        kwargs: dict[str, Any] = {} if ssl is None else {"ssl": ssl}
        ws = await websockets.connect(ws_url, max_size=None, ping_interval=None,
                                      open_timeout=DEFAULT_TIMEOUT_S * UNIT, **kwargs)
        return cls(ws, instance_id, instance_secret)

    async def __aenter__(self) -> ProtocolClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), DEFAULT_TIMEOUT_S * UNIT)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader

    async def abort(self) -> None:
        """Drop the TCP connection without a closing handshake (a vanished worker)."""
        transport = getattr(self.ws, "transport", None)
        if transport is not None:
            transport.abort()
        await self.close()

    # -------------------------------------------------------------- raw I/O

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                frame = decode_server_frame(data)
                self.order.append(frame.type)
                match frame:
                    case Response():
                        self.responses.put_nowait(frame)
                    case Reserve():
                        self.reserve_frames.append(frame)
                        for r in frame.reservations:
                            self.reserved.put_nowait(r)
                    case Cancel():
                        self.cancels.put_nowait(frame)
                    case HeartbeatAck():
                        self.acks.put_nowait(frame)
                    case ErrorFrame():
                        self.errors.put_nowait(frame)
                    case Welcome():
                        self.welcomes.put_nowait(frame)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.close_code = self.ws.close_code
            self.closed.set()

    async def send(self, frame: ClientFrame) -> None:
        self._frames_sent += 1
        await self.ws.send(encode(frame).decode())

    async def send_raw(self, data: str | bytes) -> None:
        self._frames_sent += 1
        await self.ws.send(data)

    async def wait_closed(self, timeout: float = DEFAULT_TIMEOUT_S) -> int | None:
        """Wait until the server closed the connection; return its close code."""
        await asyncio.wait_for(self.closed.wait(), timeout * UNIT)
        return self.close_code

    async def error(self, timeout: float = DEFAULT_TIMEOUT_S) -> ErrorFrame:
        return await asyncio.wait_for(self.errors.get(), timeout * UNIT)

    async def expect_fatal(self, code: str, timeout: float = DEFAULT_TIMEOUT_S) -> int | None:
        """Expect an ``error`` frame with ``code`` and then the close; return the close code."""
        err = await self.error(timeout)
        assert err.code == code, err
        assert err.fatal, err
        return await self.wait_closed(timeout)

    # -------------------------------------------------------------- session

    async def hello(self, credential_id: str, secret: str, queue_id: str, *,
                    capabilities: tuple[Capability, ...] = (ECHO,), capacity: int = 4,
                    protocol: int = 1, timeout: float = DEFAULT_TIMEOUT_S,
                    agent: str | None = None, features: tuple[str, ...] = (),
                    labels: dict[str, str] | None = None,
                    policies: tuple[Any, ...] | None = None) -> Welcome:
        await self.send(Hello(
            credential_id=credential_id, credential_secret=secret,
            instance_id=self.instance_id, instance_secret=self.instance_secret,
            queue_id=queue_id, capabilities=capabilities, capacity=capacity, protocol=protocol,
            agent=agent, features=features, labels=labels, policies=policies,
        ))
        self.welcome = await asyncio.wait_for(self.welcomes.get(), timeout * UNIT)
        return self.welcome

    async def hello_as(self, cred: Any, **kwargs: Any) -> Welcome:
        """``hello`` with a tests/support WorkerCredential (credential_id, secret, queue_id)."""
        return await self.hello(cred.credential_id, cred.secret, cred.queue_id, **kwargs)

    async def credit(self, credits: int) -> None:
        await self.send(Credit(credits))

    async def heartbeat(self, timeout: float = DEFAULT_TIMEOUT_S) -> HeartbeatAck:
        await self.send(Heartbeat())
        return await asyncio.wait_for(self.acks.get(), timeout * UNIT)

    async def reservations(self, n: int, timeout: float = DEFAULT_TIMEOUT_S) -> list[Reservation]:
        """Wait for ``n`` more reservations (raise TimeoutError if they do not come)."""
        out: list[Reservation] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout * UNIT
        while len(out) < n:
            out.append(await asyncio.wait_for(self.reserved.get(), deadline - loop.time()))
        return out

    async def only_reserved(self, count: int, among: Collection[str] | None = None,
                            timeout: float = DEFAULT_TIMEOUT_S) -> list[Reservation]:
        """The reservations of the next ``reserve`` frame, which must hold exactly ``count``
        (of the tasks in ``among``, when given), with no reservation before it that the test
        has not taken.

        The event-ordered check of "nothing else was reserved": the test provokes this frame
        (new credit, a task submitted later) after the moment when nothing may be reserved.
        A claim takes up to the credit in one frame, by priority then submit order, and a
        connection's frames arrive in order: a reservation the server should not have sent
        arrives before this frame or in it. The oldest reservation not yet taken names the
        frame checked, so such a reservation is the one checked (and fails the count or
        ``among``); no silence is waited for. The provoked frame may already be here when
        this is called (a submit's reserve frame can beat the submit's own answer).
        """
        first = await asyncio.wait_for(self.reserved.get(), timeout * UNIT)
        frame = next(f for f in reversed(self.reserve_frames)
                     if any(r is first for r in f.reservations))
        got = [first, *(self.reserved.get_nowait() for _ in frame.reservations[1:])]
        assert len(got) == count, f"{len(got)} reserved, not {count}: {_tasks(got)}"
        if among is not None:
            assert {r.task_id for r in got} <= set(among), (_tasks(got), among)
        return got

    async def cancel_push(self, timeout: float = DEFAULT_TIMEOUT_S) -> Cancel:
        return await asyncio.wait_for(self.cancels.get(), timeout * UNIT)

    # -------------------------------------------------------------- requests

    def msg_id(self) -> str:
        return f"m{next(self._msgs)}"

    async def request(self, *ops: Op, request_id: int | None = None,
                      timeout: float = DEFAULT_TIMEOUT_S) -> Response:
        rid = next(self._ids) if request_id is None else request_id
        await self.send(Request(rid, tuple(ops)))
        response = await asyncio.wait_for(self.responses.get(), timeout * UNIT)
        assert response.id == rid, (response.id, rid)
        return response

    async def one(self, op: Op, timeout: float = DEFAULT_TIMEOUT_S) -> OpResult:
        response = await self.request(op, timeout=timeout)
        assert len(response.results) == 1
        return response.results[0]

    async def start(self, r: Reservation, *, msg_id: str | None = None,
                    child_pid: int | None = None) -> OpResult:
        return await self.one(StartOp(msg_id or self.msg_id(), r.attempt_id, r.epoch, child_pid))

    async def renew(self, r: Reservation, *, msg_id: str | None = None,
                    epoch: int | None = None) -> OpResult:
        return await self.one(RenewOp(msg_id or self.msg_id(), r.attempt_id, epoch or r.epoch))

    async def finish(self, r: Reservation, outcome: str, *, code: str | None = None,
                     retryable: bool = False, result_json: str | None = None,
                     details_json: str | None = None, report: Report | None = None,
                     msg_id: str | None = None, epoch: int | None = None) -> OpResult:
        return await self.one(self.finish_op(
            r, outcome, code=code, retryable=retryable, result_json=result_json,
            details_json=details_json, report=report, msg_id=msg_id, epoch=epoch,
        ))

    def finish_op(self, r: Reservation, outcome: str, *, code: str | None = None,
                  retryable: bool = False, result_json: str | None = None,
                  details_json: str | None = None, report: Report | None = None,
                  msg_id: str | None = None, epoch: int | None = None) -> FinishOp:
        return FinishOp(
            msg_id or self.msg_id(), r.attempt_id, epoch or r.epoch, Outcome(outcome),
            code=code, retryable=retryable, result_json=result_json, details_json=details_json,
            report=report or Report(),
        )

    async def resume(self, refs: list[tuple[str, int]], *, msg_id: str | None = None) -> OpResult:
        attempts = tuple(AttemptRef(a, e) for a, e in refs)
        return await self.one(ResumeOp(msg_id or self.msg_id(), attempts))

    async def drain(self, *, msg_id: str | None = None) -> OpResult:
        return await self.one(DrainOp(msg_id or self.msg_id()))

    async def decline(self, r: Reservation, reason: str = "EXPIRED", *,
                      msg_id: str | None = None) -> OpResult:
        return await self.one(DeclineOp(msg_id or self.msg_id(), r.attempt_id, r.epoch, reason))

    @property
    def frames_sent(self) -> int:
        """This connection's frames sent so far (a grant's ``basis`` names one of them)."""
        return self._frames_sent


def _tasks(reservations: list[Reservation]) -> list[str]:
    return [r.task_id for r in reservations]


def random_instance() -> tuple[str, str]:
    """A fresh (instance_id, instance_secret) pair, for reconnect tests."""
    return new_id(int.from_bytes(os.urandom(4), "big")), new_secret()
