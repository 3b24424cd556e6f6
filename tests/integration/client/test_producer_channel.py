"""The clients' producer channel against a real orbit-server, through a real TCP proxy that
reads the channel's messages and can lose one and cut the connection: submits and waits ride
one WebSocket (no HTTP request at all), pipelined from threads; ``wait`` and
``as_completed``; a cut with submits in flight (every acknowledged submit made once, every
unacknowledged one sent again once with its operation keys and made once); a result pushed
while the client was cut off still arrives; the fallback to HTTP when the server refuses the
upgrade; and the asyncio client on the same paths."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.lanes import Lane
from support.orbit_http import OrbitEnv, task_spec
from support.protocol_client import ECHO, ProtocolClient, Reservation
from support.proxy import TcpProxy
from support.server import https_server
from support.waiting import UNIT, wait_until
from support.ws_tap import Direction, Frame, FrameSplitter, Verdict

from orbit_client import (
    AsyncOrbitClient,
    CertificateError,
    Credentials,
    OrbitApiError,
    OrbitClient,
    Task,
    TaskTimeout,
    TaskType,
)
from orbit_wire.errors import ErrorCode
from orbit_wire.limits import MAX_FRAME_BYTES

ECHO_TYPE: TaskType[dict[str, Any], dict[str, Any]] = TaskType(
    ECHO.handler, ECHO.handler_version, ECHO.payload_version)
TIMEOUT = 20 * UNIT


class ChannelSplitter(FrameSplitter):
    """The frames of a producer channel; any other connection's bytes (HTTP) pass as they
    come. The first read holds the request or status line."""

    def __init__(self, masked: bool) -> None:
        super().__init__(masked)
        self._plain: bool | None = None

    def feed(self, data: bytes) -> list[Frame]:
        if self._plain is None:
            first_line = data.split(b"\r\n", 1)[0]
            self._plain = not (first_line.startswith(b"HTTP/1.1 101")
                               or b" /v1/producer " in first_line)
        return [Frame(data, None)] if self._plain else super().feed(data)


class ProducerTap:
    """Records the channel's messages both ways; loses the answer to the ``lose``-th submit
    (and cuts that connection), once."""

    def __init__(self, lose: int | None = None) -> None:
        self.to_server: list[dict[str, Any]] = []
        self.to_client: list[dict[str, Any]] = []  # as forwarded
        self.lost: list[dict[str, Any]] = []
        self.cut_time = float("inf")  # time.monotonic() of the cut
        self._lose = lose
        self._armed: set[int] = set()
        self._lock = threading.Lock()

    def splitter(self, direction: Direction) -> FrameSplitter:
        return ChannelSplitter(masked=direction == "to_server")

    def decide(self, direction: Direction, message: dict[str, Any]) -> Verdict:
        with self._lock:
            if direction == "to_server":
                self.to_server.append(message)
                if message.get("type") == "submit" and len(self.submits()) == self._lose:
                    self._armed.add(message["id"])
                return "forward"
            if message.get("type") == "submitted" and message.get("id") in self._armed:
                self._armed.clear()
                self._lose = None
                self.lost.append(message)
                self.cut_time = time.monotonic()
                return "drop_and_cut"
            self.to_client.append(message)
            return "forward"

    def submits(self) -> list[dict[str, Any]]:
        return [m for m in self.to_server if m.get("type") == "submit"]

    def kinds(self, direction: Direction) -> list[str]:
        with self._lock:
            seen = self.to_server if direction == "to_server" else self.to_client
            return [str(m.get("type")) for m in seen]

    def keys_sent(self) -> collections.Counter[str]:
        with self._lock:
            return collections.Counter(t["operation_key"] for m in self.submits()
                                       for t in m["tasks"])


class Worker:
    """A protocol worker holding reservations, finishing them one by one on demand."""

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.loop = asyncio.new_event_loop()
        self.wc: ProtocolClient | None = None
        self.held: dict[str, Reservation] = {}

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, TIMEOUT))

    def take(self, n: int) -> list[str]:
        async def take() -> list[str]:
            if self.wc is None:
                self.wc = await self.lane.connect(capacity=64)
            await self.wc.credit(n)
            got = await self.wc.reservations(n)
            for res in got:
                assert (await self.wc.start(res)).ok
                self.held[res.task_id] = res
            return [res.task_id for res in got]
        return list(self.run(take()))

    def finish(self, task_id: str, result_json: str = '{"n": 1.10}') -> None:
        assert self.wc is not None
        res = self.held.pop(task_id)
        assert self.run(self.wc.finish(res, "SUCCEEDED", result_json=result_json)).ok

    def close(self) -> None:
        if self.wc is not None:
            self.run(self.wc.close())
        self.loop.close()


@pytest.fixture
def lane(orbit: OrbitEnv) -> Lane:
    return Lane.open(orbit, "channel")


@pytest.fixture
def worker(lane: Lane) -> Iterator[Worker]:
    made = Worker(lane)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def tap() -> ProducerTap:
    return ProducerTap()


@pytest.fixture
def proxy(orbit: OrbitEnv, tap: ProducerTap) -> Iterator[TcpProxy]:
    with TcpProxy(orbit.server.port, tap=tap) as made:  # type: ignore[arg-type]
        yield made


def client_via(proxy: TcpProxy, lane: Lane, **options: Any) -> OrbitClient:
    return OrbitClient(proxy.url, lane.producer_credentials, timeout=TIMEOUT, **options)


def queue_tasks(lane: Lane) -> list[dict[str, Any]]:
    return list(lane.producer.get(f"/v1/queues/{lane.queue}/tasks",
                                  params={"limit": 500}).json()["tasks"])


# ------------------------------------------------------------------ the blocking client


def test_submits_and_waits_ride_one_websocket(lane: Lane, worker: Worker, proxy: TcpProxy,
                                              tap: ProducerTap) -> None:
    with client_via(proxy, lane) as orbit:
        typed = orbit.submit(ECHO_TYPE, {"text": "hi"})
        plain = orbit.submit(lane.queue, task_spec(payload={"i": 1}))
        batch = orbit.submit_batch(lane.queue, [task_spec(payload={"i": n}) for n in range(3)])
        assert isinstance(typed, Task) and typed.queue_id == lane.queue
        assert plain["state"] == "PENDING" and len(batch) == 3
        ids = [typed.id, plain["id"], *(t["id"] for t in batch)]
        assert sorted(worker.take(5)) == sorted(ids)
        for task_id in ids:
            worker.finish(task_id)
        assert orbit.result(typed, TIMEOUT) == {"n": 1.1}
        views = orbit.wait([plain["id"], typed], TIMEOUT)
        assert [v["id"] for v in views] == [plain["id"], typed.id]
        assert views[1]["result_json"] == '{"n": 1.10}'  # the handler's exact text
        done = orbit.get_task(batch[0]["id"], wait_ms=min(int(TIMEOUT * 1000), 60_000))
        assert done["state"] == "SUCCEEDED"
    # One connection, the channel's: no HTTP request went out.
    assert proxy.connections_total == 1
    assert tap.kinds("to_server").count("submit") == 3
    assert tap.kinds("to_client").count("ended") == 5
    keys = tap.keys_sent()
    assert len(keys) == 5 and all(k.startswith("orbit-") for k in keys)
    assert {t["operation_key"] for t in queue_tasks(lane)} == set(keys)


def test_pipelined_submits_from_threads_share_the_connection(lane: Lane, proxy: TcpProxy,
                                                             tap: ProducerTap) -> None:
    with client_via(proxy, lane) as orbit:
        def submit(n: int) -> str:
            return str(orbit.submit(lane.queue, task_spec(payload={"n": n}))["id"])

        with ThreadPoolExecutor(max_workers=8) as pool:
            made = list(pool.map(submit, range(80)))
    assert len(set(made)) == 80
    assert proxy.connections_total == 1 and len(tap.submits()) == 80
    assert {t["id"] for t in queue_tasks(lane)} == set(made)


def test_as_completed_yields_each_task_as_it_settles(lane: Lane, worker: Worker,
                                                     proxy: TcpProxy) -> None:
    with client_via(proxy, lane) as orbit:
        first, second, third = (orbit.submit(ECHO_TYPE, {"n": n}) for n in range(3))
        worker.take(3)
        got: list[str] = []
        consumer = threading.Thread(target=lambda: got.extend(
            v["id"] for v in orbit.as_completed([first, second, third.id], TIMEOUT)))
        consumer.start()
        for task in (third, first, second):  # each finished once the one before arrived
            worker.finish(task.id)
            wait_until(lambda t=task: t.id in got, timeout=TIMEOUT / UNIT,
                       what=f"{task.id} yielded")
        consumer.join(TIMEOUT)
        assert got == [third.id, first.id, second.id]
        # wait answers in the order given, whatever the order they ended in.
        assert [v["id"] for v in orbit.wait([second, third, first], TIMEOUT)] == [
            second.id, third.id, first.id]


def test_a_wait_that_times_out_tells_what_is_left(lane: Lane, worker: Worker,
                                                  proxy: TcpProxy) -> None:
    with client_via(proxy, lane) as orbit:
        done = orbit.submit(ECHO_TYPE, {"n": 0})
        later = orbit.submit(ECHO_TYPE, {"n": 1}, delay_ms=3_600_000)
        never = orbit.submit(ECHO_TYPE, {"n": 2}, delay_ms=3_600_000)
        worker.take(1)
        worker.finish(done.id)
        yielded = []
        with pytest.raises(TaskTimeout) as info:
            for view in orbit.as_completed([later, done, never], 0.5 * UNIT):
                yielded.append(view["id"])
        assert yielded == [done.id]
        assert info.value.task.id == later.id and info.value.pending == (later.id, never.id)
        views = orbit.wait([done, later], 0.3 * UNIT)
        assert [v["state"] for v in views] == ["SUCCEEDED", "PENDING"]
        with pytest.raises(OrbitApiError) as missing:
            orbit.wait("f" * 32, 0.5 * UNIT)
        assert missing.value.code is ErrorCode.NOT_FOUND and missing.value.status == 404


@pytest.mark.parametrize("lose", [1, 17])
def test_a_cut_with_submits_in_flight_makes_each_task_once(lane: Lane, orbit: OrbitEnv,
                                                           lose: int) -> None:
    tap = ProducerTap(lose=lose)
    with TcpProxy(orbit.server.port, tap=tap) as proxy:  # type: ignore[arg-type]
        with client_via(proxy, lane) as producer:
            returned: list[tuple[float, list[str]]] = []

            def submit(n: int) -> list[str]:
                specs = [task_spec(payload={"n": n, "k": k}) for k in range(n % 3 + 1)]
                if n % 4 == 0:
                    ids = [producer.submit(lane.queue, specs[0])["id"]]
                else:
                    ids = [t["id"] for t in producer.submit_batch(lane.queue, specs)]
                returned.append((time.monotonic(), ids))
                return ids

            with ThreadPoolExecutor(max_workers=6) as pool:
                made = [i for ids in pool.map(submit, range(40)) for i in ids]
        assert proxy.connections_total == 2 and len(tap.lost) == 1
    keys = tap.keys_sent()
    lost_id = tap.lost[0]["id"]
    for submit_frame in tap.submits():
        for spec in submit_frame["tasks"]:
            sent = keys[spec["operation_key"]]
            # Sent again at most once, and never after its answer came.
            assert sent in (1, 2)
            if submit_frame["id"] == lost_id:
                assert sent == 2
    tasks = queue_tasks(lane)
    assert len(made) == len(set(made)) == len(tasks) == len(keys)
    assert {t["id"] for t in tasks} == set(made)
    # A submit the client saw answered before the cut was never sent again.
    key_of = {t["id"]: t["operation_key"] for t in tasks}
    acknowledged = [i for at, ids in returned if at < tap.cut_time for i in ids]
    assert all(keys[key_of[task_id]] == 1 for task_id in acknowledged)
    # Each thread sends its next submit only after the last one returned: of the ``lose``
    # submits sent before the cut, all but one per thread had returned.
    assert len(acknowledged) >= lose - 6


def test_a_result_pushed_while_cut_off_arrives_after_the_reconnect(
        lane: Lane, worker: Worker, proxy: TcpProxy, tap: ProducerTap) -> None:
    with client_via(proxy, lane) as orbit:
        idle = orbit.submit(ECHO_TYPE, {"n": 0})
        waited = orbit.submit(ECHO_TYPE, {"n": 1})
        worker.take(2)
        # Cut while nothing waits: the task ends with no channel to push it on.
        assert proxy.cut() == 1
        worker.finish(idle.id)
        assert orbit.result(idle, TIMEOUT) == {"n": 1.1}
        # Cut while a wait is on: the reader reconnects and watches the task again.
        result: list[Any] = []
        watches = tap.kinds("to_server").count("watch")
        waiting = threading.Thread(target=lambda: result.append(orbit.result(waited, TIMEOUT)))
        waiting.start()
        wait_until(lambda: tap.kinds("to_server").count("watch") > watches,
                   timeout=TIMEOUT / UNIT, what="the wait's watch")
        assert proxy.cut() == 1
        worker.finish(waited.id, '"late"')
        waiting.join(TIMEOUT)
        assert result == ["late"]
    assert proxy.connections_total == 3  # every connection a channel: no HTTP


def test_batches_past_a_frame_go_over_http_and_large_answers_are_read(
        lane: Lane, proxy: TcpProxy, tap: ProducerTap) -> None:
    def batch(blob: int) -> list[dict[str, Any]]:
        return [task_spec(payload={"n": n, "blob": "x" * blob}) for n in range(1000)]

    with client_via(proxy, lane) as orbit:
        # Its specs fit in one frame (2 MiB); the answer, a view per task, does not.
        fits = orbit.submit_batch(lane.queue, batch(1900))
        assert len(tap.submits()) == 1
        # Too large for a frame: HTTP takes it (its bound on a batch is higher).
        larger = orbit.submit_batch(lane.queue, batch(2500))
        assert len(tap.submits()) == 1
    assert [t["payload"]["n"] for t in fits] == list(range(1000))
    assert len({t["id"] for t in fits + larger}) == 2000
    assert len(fits[0]["payload"]["blob"]) == 1900
    assert len(orjson.dumps(fits)) > MAX_FRAME_BYTES


def test_a_revoked_credential_fails_channel_calls_with_its_error(lane: Lane,
                                                                 orbit: OrbitEnv) -> None:
    made = orbit.credential("producer", [lane.queue])
    creds = Credentials(orbit.server.url, made["credential_id"], made["secret"], "producer",
                        (lane.queue,))
    with OrbitClient(credentials=creds, timeout=TIMEOUT) as producer:
        producer.submit(lane.queue, task_spec())
        assert orbit.admin_http.delete(f"/v1/credentials/{made['credential_id']}").is_success
        with pytest.raises(OrbitApiError) as info:
            producer.submit(lane.queue, task_spec())
    assert info.value.code is ErrorCode.UNAUTHENTICATED and info.value.status == 401
    assert made["secret"] not in str(info.value) + repr(info.value)


def test_a_refused_upgrade_falls_back_to_http_for_good(lane: Lane, worker: Worker,
                                                       orbit: OrbitEnv) -> None:
    # The proxy asks the server for a path it has no WebSocket at: it refuses the upgrade
    # (403), as a server without the channel does; HTTP requests pass unchanged.
    with TcpProxy(orbit.server.port, rename=(b"/v1/producer", b"/v1/elsewhere")) as proxy, \
            client_via(proxy, lane) as producer:
        task = producer.submit(ECHO_TYPE, {"n": 1})
        assert task.operation_key is not None  # made for the channel, kept over HTTP
        again = producer.submit(ECHO_TYPE, {"n": 2})
        assert again.operation_key is None  # HTTP from now on: a submit as before
        worker.take(2)
        worker.finish(task.id)
        assert producer.result(task, TIMEOUT) == {"n": 1.1}
        assert producer.get_task(again.id, wait_ms=50)["state"] == "RUNNING"
        assert proxy.renamed == 1


def test_the_channel_over_tls_trusts_what_http_trusts(tmp_path: Path) -> None:
    server, cert = https_server(tmp_path)
    server.start()
    try:
        admin = server.admin()
        with OrbitClient(credentials=admin, ca_file=str(cert), timeout=TIMEOUT) as trusted:
            queue = trusted.create_queue()["id"]
            task = trusted.submit(queue, task_spec())
            assert task["operation_key"].startswith("orbit-")  # made for the channel
            assert trusted.wait([task["id"]], 0.2 * UNIT)[0]["state"] == "PENDING"
        with OrbitClient(credentials=admin, timeout=TIMEOUT) as plain, \
                pytest.raises(CertificateError) as info:
            plain.submit(queue, task_spec())
        assert "certificate" in info.value.message
    finally:
        server.stop()


def test_channel_false_is_plain_http(lane: Lane, worker: Worker, proxy: TcpProxy,
                                    tap: ProducerTap) -> None:
    with client_via(proxy, lane, channel=False) as producer:
        first, second = (producer.submit(ECHO_TYPE, {"n": n}) for n in range(2))
        assert first.operation_key is None
        assert producer.wait(first.id, 0.2 * UNIT)["state"] == "PENDING"
        worker.take(2)
        worker.finish(second.id)
        worker.finish(first.id)
        # Long polls, one task at a time: in the order given.
        assert [v["id"] for v in producer.as_completed([first, second], TIMEOUT)] == [
            first.id, second.id]
        assert producer.result(second, TIMEOUT) == {"n": 1.1}
    assert tap.submits() == [] and "watch" not in tap.kinds("to_server")


# ------------------------------------------------------------------ the asyncio client


async def test_the_asyncio_client_rides_the_channel_too(lane: Lane, worker: Worker,
                                                        proxy: TcpProxy,
                                                        tap: ProducerTap) -> None:
    async with AsyncOrbitClient(proxy.url, lane.producer_credentials,
                                timeout=TIMEOUT) as orbit:
        tasks = await asyncio.gather(*(orbit.submit(ECHO_TYPE, {"n": n}) for n in range(4)))
        batch = await orbit.submit_batch(lane.queue, [task_spec(), task_spec()])
        ids = [t.id for t in tasks] + [t["id"] for t in batch]
        assert len(set(ids)) == 6
        await asyncio.to_thread(worker.take, 6)
        got: list[str] = []

        async def consume() -> None:
            async for view in orbit.as_completed(ids, TIMEOUT):
                got.append(view["id"])

        consumer = asyncio.get_running_loop().create_task(consume())
        for task_id in reversed(ids):
            await asyncio.to_thread(worker.finish, task_id)
        await asyncio.wait_for(consumer, TIMEOUT)
        assert sorted(got) == sorted(ids)
        assert await orbit.result(tasks[0], TIMEOUT) == {"n": 1.1}
        views = await orbit.wait(ids[:2], TIMEOUT)
        assert [v["state"] for v in views] == ["SUCCEEDED", "SUCCEEDED"]
        assert proxy.cut() == 1
        later = await orbit.submit(lane.queue, task_spec())  # a new connection, on use
        assert later["state"] == "PENDING"
    assert proxy.connections_total == 2
    assert tap.kinds("to_server").count("submit") == 6


async def test_the_asyncio_client_falls_back_to_http(lane: Lane, orbit: OrbitEnv) -> None:
    with TcpProxy(orbit.server.port, rename=(b"/v1/producer", b"/v1/elsewhere")) as proxy:
        async with AsyncOrbitClient(proxy.url, lane.producer_credentials,
                                    timeout=TIMEOUT) as producer:
            task = await producer.submit(lane.queue, task_spec())
            assert (await producer.wait([task["id"]], 0.2 * UNIT))[0]["state"] == "PENDING"
            with pytest.raises(TaskTimeout):
                async for _ in producer.as_completed([task["id"]], 0.1 * UNIT):
                    pass
        assert proxy.renamed == 1
