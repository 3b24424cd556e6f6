"""The dispatcher in process, on the real use cases over a real SQLite file and the real store
thread. The session's ``send`` collects frames (it stands in for the socket, the boundary)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from support.waiting import UNIT, hold, wait_until_async

from orbit_server.config import ServerConfig
from orbit_server.dispatcher import Dispatcher, WorkerSession
from orbit_server.services import Effects, Services
from orbit_server.store.db import create_engine_for, migrate
from orbit_server.store_thread import StoreThread
from orbit_server.worker_protocol import SessionCredit
from orbit_wire.errors import ProtocolError
from orbit_wire.frames import Hello, Reserve, ServerFrame
from orbit_wire.ids import new_id, new_secret
from orbit_wire.model import Capability

pytestmark = pytest.mark.asyncio
CAP = Capability("d.test", "v1", "v1")


def _now() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class World:
    service: Services
    store: StoreThread
    dispatcher: Dispatcher
    principal: Any
    queue: str
    worker: dict[str, Any]

    def session(self, capacity: int, labels: dict[str, str] | None = None
                ) -> tuple[WorkerSession, list[ServerFrame]]:
        binding = self.service.workers.worker_hello(Hello(
            self.worker["credential_id"], self.worker["secret"], new_id(_now()), new_secret(),
            self.queue, (CAP,), capacity, labels=labels))
        frames: list[ServerFrame] = []
        session = WorkerSession(new_id(_now()), binding, SessionCredit(capacity), frames.append,
                                lambda code, reason: None, lambda code, message: None)
        self.dispatcher.attach(session)
        return session, frames

    def grant(self, session: WorkerSession, credits: int) -> None:
        """A ``credit`` frame: the connection's protocol adds it, the dispatcher claims."""
        session.credit.add(credits)
        self.dispatcher.credit_added(session)

    def submit(self, n: int) -> None:
        spec = {"handler": CAP.handler, "handler_version": CAP.handler_version,
                "payload_version": CAP.payload_version, "payload": {"n": 1}}
        _made, effects = self.service.tasks.submit(self.principal, self.queue, [spec] * n)
        self.dispatcher.queues_ready(effects.ready_queues)


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    migrate(url)
    engine = create_engine_for(url)
    service = Services(engine, ServerConfig(db_url=url), _now, random.Random(7))
    admin = service.admin.bootstrap_admin(None)
    principal = service.admin.authenticate(f"{admin['credential_id']}.{admin['secret']}")
    queue = service.admin.create_queue(principal, None)["id"]
    worker = service.admin.create_credential(principal, "worker", [queue], None)
    store = StoreThread()
    store.start()
    acted_on: list[Effects] = []  # what the passes' transactions did (unused: no grants here)
    dispatcher = Dispatcher(store, service.workers, acted_on.append)
    dispatcher.start()
    try:
        yield World(service, store, dispatcher, principal, queue, worker)
    finally:
        await dispatcher.stop()
        store.close()
        engine.dispose()


def _reserved(frames: list[ServerFrame]) -> int:
    return sum(len(f.reservations) for f in frames if isinstance(f, Reserve))


async def _reservations(n: int, *frame_lists: list[ServerFrame]) -> None:
    def count() -> int:
        return sum(_reserved(frames) for frames in frame_lists)

    await wait_until_async(lambda: count() == n, timeout=5, interval=0.01,
                           what=lambda: f"{n} reservations (have {count()})")



async def test_never_more_reservations_than_credit(world: World) -> None:
    world.submit(10)
    session, frames = world.session(capacity=4)
    world.grant(session, 3)
    await _reservations(3, frames)
    await world.dispatcher.settled()  # every pass the credit allowed has run: no fourth
    assert _reserved(frames) == 3 and session.credits == 0
    with pytest.raises(ProtocolError) as err:
        world.grant(session, 9)  # above 2 x capacity
    assert err.value.code == "LIMIT_EXCEEDED"
    world.grant(session, 8)
    await _reservations(10, frames)
    assert session.credits == 1  # only 7 tasks were left


async def test_drain_waits_for_a_claim_in_flight_and_stops_dispatch(world: World) -> None:
    session, frames = world.session(capacity=4)
    gate, started = threading.Event(), threading.Event()
    blocker = asyncio.ensure_future(world.store.call_worker(hold, gate, started))
    await wait_until_async(started.is_set, timeout=5, what="the store thread held")
    world.submit(3)  # runs on this thread; the store thread is held by the gate
    world.grant(session, 2)
    # The claim is now queued behind the gate, holding the lock.
    await wait_until_async(session.lock.locked, timeout=5, what="the claim to take the lock")
    world.dispatcher.stop_dispatching(session)
    waiter = asyncio.ensure_future(session.lock.acquire())
    # One turn of the loop runs the waiter's first step (the ready queue is FIFO): it
    # either took the lock then or waits for the claim's release.
    await asyncio.sleep(0)
    assert not waiter.done()  # a drain answer would wait here for the in-flight claim
    gate.set()
    await asyncio.wait_for(waiter, 5 * UNIT)
    session.lock.release()
    await blocker
    assert _reserved(frames) == 2  # the claim under way was sent before the drain answer
    world.grant(session, 2)
    world.dispatcher.poll_all()
    await world.dispatcher.settled()  # the credit and the hint have been acted on
    assert _reserved(frames) == 2  # nothing after the drain


async def test_least_recently_served_session_claims_first(world: World) -> None:
    a, a_frames = world.session(capacity=2)
    b, b_frames = world.session(capacity=2)
    world.grant(a, 4)  # each could take every task
    world.grant(b, 4)
    for i in range(4):
        world.submit(1)
        await _reservations(i + 1, a_frames, b_frames)
    assert (_reserved(a_frames), _reserved(b_frames)) == (2, 2)


async def test_a_submit_that_requires_labels_is_claimed_inline_only_where_they_are(
        world: World) -> None:
    plain, plain_frames = world.session(capacity=2)
    gpu, gpu_frames = world.session(capacity=2, labels={"gpu": "a100"})
    world.grant(plain, 4)
    world.grant(gpu, 4)
    await world.dispatcher.settled()
    spec = {"handler": CAP.handler, "handler_version": CAP.handler_version,
            "payload_version": CAP.payload_version, "payload": {}, "requires": {"gpu": "a100"}}
    for requires, expected in (({"gpu": "a100"}, gpu), ({"gpu": "h100"}, None)):
        assert world.dispatcher._idle_session(world.queue, CAP, requires) is expected
    # Inline: the submit's own transaction reserves it for the labelled session.
    def submit(binding: Any, count: int) -> tuple[Any, Any]:
        made, _effects, reserved = world.service.tasks.submit_and_reserve(
            world.principal, world.queue, [spec], binding, count)
        return (made, binding, reserved), reserved

    made, binding, reserved = await world.dispatcher.with_claim(world.queue, CAP, submit,
                                                                spec["requires"])
    assert binding is gpu.binding and [r.task_id for r in reserved] == [made[0][0]["id"]]
    await _reservations(1, gpu_frames)
    assert _reserved(plain_frames) == 0


async def test_detach_reports_whether_the_session_was_current(world: World) -> None:
    session, _ = world.session(capacity=1)
    assert world.dispatcher.current(session.instance_id) is session
    assert world.dispatcher.detach(session) is True
    assert world.dispatcher.detach(session) is False
    assert session.closed and not session.wants_work
