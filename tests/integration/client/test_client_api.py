"""OrbitClient and AsyncOrbitClient against a real orbit-server process (tests/support)."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.lanes import NO_BACKOFF, Lane
from support.orbit_http import OrbitEnv
from support.protocol_client import ECHO, ProtocolClient
from support.waiting import UNIT, wait_until, wait_until_async

from orbit_client import (
    AsyncOrbitClient,
    Credentials,
    OrbitApiError,
    OrbitClient,
    ServerUnreachable,
    load_credentials,
)
from orbit_wire.errors import ErrorCode

BOUND_S = 10.0 * UNIT  # generous bound for anything that should take milliseconds
# The burst tests: a client timeout short enough that waiting for a free connection would
# exceed it, and two long polls that hold the client's two connections three times as long.
BURST_TIMEOUT_S = 0.5 * UNIT
HELD_MS = round(3 * BURST_TIMEOUT_S * 1000)


def spec(payload: Any = None, **policy: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "handler": ECHO.handler,
        "handler_version": ECHO.handler_version,
        "payload_version": ECHO.payload_version,
        "payload": {"n": 1} if payload is None else payload,
        "backoff": NO_BACKOFF,
    }
    out.update(policy)
    return out


class Setup:
    """An admin client, one queue, and a producer client with a credentials file."""

    def __init__(self, orbit: OrbitEnv, tmp_path: Path) -> None:
        lane = Lane.open(orbit, "client-tests")
        self.env = orbit
        self.tmp = tmp_path
        self.admin = OrbitClient(credentials=orbit.admin)
        self.queue = lane.queue
        self.producer_file = lane.credentials_file(tmp_path / "producer.json")
        self.producer_creds = lane.producer_credentials
        self.producer = OrbitClient(credentials=self.producer_file)
        self.worker = lane.worker
        self.worker_creds = lane.worker_credentials

    def close(self) -> None:
        self.admin.close()
        self.producer.close()


@pytest.fixture
def setup(orbit: OrbitEnv, tmp_path: Path) -> Iterator[Setup]:
    s = Setup(orbit, tmp_path)
    try:
        yield s
    finally:
        s.close()


def expect_error(code: ErrorCode, status: int | None, fn: Any, *args: Any) -> OrbitApiError:
    with pytest.raises(OrbitApiError) as info:
        fn(*args)
    err = info.value
    assert (err.code, err.status) == (code, status), repr(err)
    return err


# ------------------------------------------------------------------------ admin calls


def test_health_needs_no_credential(orbit: OrbitEnv) -> None:
    with OrbitClient(orbit.server.url) as anonymous:
        assert anonymous.health() == {"status": "ok"}


def test_queue_and_credentials_file(setup: Setup) -> None:
    queue = setup.admin.create_queue("made-by-the-client")["id"]
    path = setup.tmp / "made.json"
    made = setup.admin.create_credential("producer", [queue], "p", path=path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = load_credentials(path)
    assert loaded == made
    assert loaded.url == setup.env.server.url
    assert loaded.role == "producer" and loaded.queues == (queue,)
    with OrbitClient(credentials=path) as producer:
        stats = producer.queue_stats(queue)
    assert stats["queue_id"] == queue
    assert sum(stats["counts"].values()) == 0


def test_revoked_credential_is_refused(setup: Setup) -> None:
    setup.producer.submit(setup.queue, spec())
    answer = setup.admin.revoke_credential(setup.producer_creds.credential_id)
    assert answer == {"credential_id": setup.producer_creds.credential_id, "revoked": True}
    err = expect_error(
        ErrorCode.UNAUTHENTICATED, 401, setup.producer.submit, setup.queue, spec()
    )
    assert not err.retryable


def test_wrong_secret_and_wrong_role_and_wrong_queue(setup: Setup) -> None:
    forged = Credentials(setup.env.server.url, setup.producer_creds.credential_id,
                         "0" * 64, "producer", (setup.queue,))
    with OrbitClient(credentials=forged) as client:
        expect_error(ErrorCode.UNAUTHENTICATED, 401, client.queue_stats, setup.queue)
    # A producer may not create queues or credentials.
    expect_error(ErrorCode.PERMISSION_DENIED, 403, setup.producer.create_queue, None)
    expect_error(ErrorCode.PERMISSION_DENIED, 403, setup.producer.create_credential,
                 "admin", [])
    # A worker credential is for the WebSocket only.
    with OrbitClient(credentials=setup.worker_creds) as worker:
        expect_error(ErrorCode.PERMISSION_DENIED, 403, worker.submit, setup.queue, spec())
    # A producer of one queue cannot touch another queue or its tasks.
    other_queue = setup.admin.create_queue()["id"]
    expect_error(ErrorCode.NOT_FOUND, 404, setup.producer.submit, other_queue, spec())
    foreign = setup.admin.submit(other_queue, spec())
    with pytest.raises(OrbitApiError) as info:
        setup.producer.get_task(foreign["id"])
    assert info.value.code == ErrorCode.NOT_FOUND


# ------------------------------------------------------------------------ producer calls


def test_submit_get_cancel_attempts_audit(setup: Setup) -> None:
    p = setup.producer
    task = p.submit(setup.queue, spec({"text": "hi"}, idempotency="IDEMPOTENT"))
    assert task["state"] == "PENDING" and task["queue_id"] == setup.queue
    assert task["capability"] == ECHO.to_dict()
    assert task["payload"] == {"text": "hi"}
    assert task["policy"]["idempotency"] == "IDEMPOTENT"
    assert task["result"] is None and task["result_json"] is None
    assert p.get_task(task["id"])["id"] == task["id"]

    cancelled = p.cancel(task["id"], reason="not needed")
    assert cancelled["state"] == "CANCELLED"
    assert p.attempts(task["id"]) == {"attempts": [], "evidence": []}
    events = p.audit(task["id"])["events"]
    assert [e["to_state"] for e in events][-1] == "CANCELLED"
    assert all(e["task_id"] == task["id"] for e in events)
    # Review is only for NEEDS_REVIEW.
    expect_error(ErrorCode.CONFLICT, 409, p.review, task["id"], "retry")


def test_operation_key_returns_the_same_task(setup: Setup) -> None:
    first = setup.producer.submit(setup.queue, spec(operation_key="order-42"))
    again = setup.producer.submit(setup.queue, spec(operation_key="order-42"))
    assert again["id"] == first["id"]


def test_batch_is_all_or_nothing(setup: Setup) -> None:
    tasks = setup.producer.submit_batch(setup.queue, [spec({"i": i}) for i in range(3)])
    assert [t["payload"] for t in tasks] == [{"i": 0}, {"i": 1}, {"i": 2}]
    before = setup.producer.queue_stats(setup.queue)["counts"].get("PENDING", 0)
    err = expect_error(ErrorCode.BAD_REQUEST, 400, setup.producer.submit_batch, setup.queue,
                       [spec(), spec(max_attempts=0)])
    assert "1" in err.message  # the index of the bad spec
    assert setup.producer.queue_stats(setup.queue)["counts"].get("PENDING", 0) == before


def test_server_side_errors_keep_code_and_status(setup: Setup) -> None:
    p = setup.producer
    expect_error(ErrorCode.NOT_FOUND, 404, p.get_task, "f" * 32)
    expect_error(ErrorCode.PAYLOAD_TOO_LARGE, 413, p.submit, setup.queue,
                 spec({"blob": "x" * (300 * 1024)}))
    expect_error(ErrorCode.BAD_REQUEST, 400, p.submit, setup.queue, spec(max_attempts=1000))
    # Refused locally, before anything is sent: no HTTP status.
    expect_error(ErrorCode.NUMBER_OUT_OF_RANGE, None, p.submit, setup.queue,
                 spec({"n": float("nan")}))


def test_long_poll_returns_when_the_wait_ends(setup: Setup) -> None:
    task = setup.producer.submit(setup.queue, spec())
    t0 = time.monotonic()
    same = setup.producer.get_task(task["id"], wait_ms=300)
    elapsed = time.monotonic() - t0
    assert same["state"] == "PENDING"
    assert 0.2 <= elapsed < BOUND_S
    t0 = time.monotonic()
    waited = setup.producer.wait(task["id"], timeout=0.5)
    assert waited["state"] == "PENDING" and time.monotonic() - t0 < BOUND_S


def _established(port: int) -> set[Any]:
    """The local addresses of this process's open connections to ``port``."""
    return {c.laddr for c in psutil.Process(os.getpid()).net_connections(kind="tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED}


def test_one_keep_alive_connection_is_reused(setup: Setup) -> None:
    port = setup.env.server.port
    for _ in range(20):
        setup.producer.queue_stats(setup.queue)
    mine = _established(port)
    # One for the producer client and one for the admin client at most.
    assert 1 <= len(mine) <= 2, mine


def test_unreachable_server_is_unavailable_and_retryable(setup: Setup) -> None:
    setup.env.server.kill()
    with pytest.raises(ServerUnreachable) as info:
        setup.producer.queue_stats(setup.queue)
    err = info.value
    assert err.code == ErrorCode.UNAVAILABLE and err.retryable and err.status is None
    assert setup.producer_creds.secret not in str(err) + repr(err)


# ------------------------------------------------ results and review (worker protocol)


async def _run_one(setup: Setup, outcome: str, **finish: Any) -> str:
    """Submit one task, take it with a protocol worker, finish it; return the task ID."""
    task = await asyncio.to_thread(setup.producer.submit, setup.queue, spec())
    async with await ProtocolClient.connect(setup.env.server.ws_url) as wc:
        await wc.hello_as(setup.worker, capacity=1)
        await wc.credit(1)
        [res] = await wc.reservations(1)
        assert res.task_id == task["id"]
        assert (await wc.start(res)).ok
        answer = await wc.finish(res, outcome, **finish)
        assert answer.ok, answer
    return str(task["id"])


async def test_result_keeps_the_handler_number_text(setup: Setup) -> None:
    text = '{"price":1.10,"big":12345678901234567,"exp":1e2}'
    task_id = await _run_one(setup, "SUCCEEDED", result_json=text)
    task = await asyncio.to_thread(setup.producer.get_task, task_id, 5000)
    assert task["state"] == "SUCCEEDED"
    assert task["result_json"] == text
    assert task["result"] == {"price": 1.1, "big": 12345678901234567, "exp": 100.0}


async def test_review_succeed_retry_fail(setup: Setup) -> None:
    p = setup.producer
    # An uncertain outcome of a non-idempotent task goes to review.
    ids = [await _run_one(setup, "UNKNOWN", code="HANDLER_ERROR") for _ in range(3)]
    for task_id in ids:
        task = await asyncio.to_thread(p.wait, task_id, BOUND_S)
        assert task["state"] == "NEEDS_REVIEW", task
    succeeded = await asyncio.to_thread(p.review, ids[0], "succeed", {"checked": 1.50}, "ok")
    assert succeeded["state"] == "SUCCEEDED"
    assert succeeded["result"] == {"checked": 1.5}
    failed = await asyncio.to_thread(p.review, ids[1], "fail", None, "broken")
    assert failed["state"] == "FAILED"
    retried = await asyncio.to_thread(p.review, ids[2], "retry")
    assert retried["state"] == "PENDING"
    events = (await asyncio.to_thread(p.audit, ids[0]))["events"]
    assert any(e["actor"].startswith("operator:") for e in events), events
    attempts = (await asyncio.to_thread(p.attempts, ids[0]))["attempts"]
    assert [a["code"] for a in attempts] == ["HANDLER_ERROR"]


# ------------------------------------------------------------------------- async client


async def test_async_client_has_the_same_calls(setup: Setup) -> None:
    async with AsyncOrbitClient(credentials=setup.producer_file) as p:
        assert (await p.health())["status"] == "ok"
        batch = await p.submit_batch(setup.queue, [spec({"i": 1}), spec({"i": 2})])
        one = await p.submit(setup.queue, spec())
        assert (await p.get_task(one["id"]))["state"] == "PENDING"
        assert (await p.get_task(one["id"], wait_ms=50))["state"] == "PENDING"
        assert (await p.cancel(batch[0]["id"]))["state"] == "CANCELLED"
        assert (await p.attempts(batch[0]["id"]))["attempts"] == []
        assert (await p.audit(batch[0]["id"]))["events"]
        assert (await p.queue_stats(setup.queue))["counts"]["PENDING"] == 2
        with pytest.raises(OrbitApiError) as info:
            await p.create_queue()
        assert info.value.code == ErrorCode.PERMISSION_DENIED
        waited = await p.wait(one["id"], timeout=0.2)
        assert waited["state"] == "PENDING"
    async with AsyncOrbitClient(credentials=setup.env.admin) as admin:
        path = setup.tmp / "async-worker.json"
        creds = await admin.create_credential("worker", [setup.queue], path=path)
        assert load_credentials(path) == creds
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        revoked = await admin.revoke_credential(creds.credential_id)
        assert revoked["revoked"] is True


def test_both_clients_list_and_rotate_credentials(setup: Setup) -> None:
    made = setup.admin.create_credential("producer", [setup.queue], "to-rotate")
    assert made.credential_id in {c["credential_id"] for c in setup.admin.list_credentials()}
    path = setup.tmp / "rotated.json"
    rotated = setup.admin.rotate_credential(made.credential_id, 0, path=path)
    assert (rotated.credential_id, rotated.queues) == (made.credential_id, (setup.queue,))
    assert rotated.secret != made.secret and load_credentials(path) == rotated
    with OrbitClient(credentials=made) as old, OrbitClient(credentials=rotated) as new:
        expect_error(ErrorCode.UNAUTHENTICATED, 401, old.queue_stats, setup.queue)
        assert new.queue_stats(setup.queue)["queue_id"] == setup.queue

    async def the_asyncio_twins() -> None:
        expires = int(time.time() * 1000) + 3_600_000
        async with AsyncOrbitClient(credentials=setup.env.admin) as admin:
            made = await admin.create_credential("producer", [setup.queue],
                                                 expires_at_ms=expires)
            listed = {c["credential_id"]: c for c in await admin.list_credentials()}
            assert listed[made.credential_id]["expires_at_ms"] == expires
            assert all("secret" not in c for c in listed.values())
            path = setup.tmp / "rotated-async.json"
            rotated = await admin.rotate_credential(made.credential_id, 60_000, path=path)
            assert rotated.credential_id == made.credential_id and rotated.secret != made.secret
            assert load_credentials(path) == rotated
        for creds in (made, rotated):  # the old secret works through its grace period
            async with AsyncOrbitClient(credentials=creds) as producer:
                assert (await producer.queue_stats(setup.queue))["queue_id"] == setup.queue

    asyncio.run(the_asyncio_twins())


def test_secret_never_reaches_debug_logs(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    async def through_httpx() -> None:  # the asyncio client's transport logs at DEBUG
        async with AsyncOrbitClient(credentials=setup.producer_creds) as p:
            await p.submit(setup.queue, spec())

    with caplog.at_level(logging.DEBUG):
        setup.producer.submit(setup.queue, spec())
        with pytest.raises(OrbitApiError):
            setup.producer.create_queue()
        creds = setup.admin.create_credential("producer", [setup.queue])
        asyncio.run(through_httpx())
    assert caplog.records, "httpx/httpcore debug logging should have produced records"
    text = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (setup.producer_creds.secret, creds.secret, setup.env.admin.secret):
        assert secret not in text


async def test_a_burst_larger_than_the_pool_waits_its_turn(setup: Setup) -> None:
    # Both connections are held by long polls, so the burst waits in the client longer than
    # the client's timeout: it must queue there, not time out in the connection pool and be
    # reported as an unreachable server.
    task = setup.producer.submit(setup.queue, spec())  # stays PENDING: nobody serves it
    port, before = setup.env.server.port, _established(setup.env.server.port)
    # HTTP alone: over the producer channel the long polls would hold no HTTP connection.
    async with AsyncOrbitClient(credentials=setup.producer_file, timeout=BURST_TIMEOUT_S,
                                max_connections=2, channel=False) as p:
        polls = [asyncio.create_task(p.get_task(task["id"], wait_ms=HELD_MS))
                 for _ in range(2)]
        await wait_until_async(lambda: len(_established(port) - before) == 2, timeout=5,
                               what="both long polls on the client's two connections")
        started = time.monotonic()
        answers = await asyncio.gather(*(p.queue_stats(setup.queue) for _ in range(300)))
        waited = time.monotonic() - started
        held = await asyncio.gather(*polls)
    assert waited > BURST_TIMEOUT_S, waited  # the burst waited its turn longer than that
    assert len(answers) == 300 and all(a["queue_id"] == setup.queue for a in answers)
    assert [t["state"] for t in held] == ["PENDING", "PENDING"]


def test_threads_can_share_one_client(setup: Setup) -> None:
    task = setup.producer.submit(setup.queue, spec())  # stays PENDING: nobody serves it
    port, before = setup.env.server.port, _established(setup.env.server.port)
    with (
        OrbitClient(credentials=setup.producer_file, timeout=BURST_TIMEOUT_S,
                    max_connections=2, channel=False) as p,  # HTTP's pool, as above
        ThreadPoolExecutor(16) as pool,
    ):
        polls = [pool.submit(p.get_task, task["id"], wait_ms=HELD_MS) for _ in range(2)]
        wait_until(lambda: len(_established(port) - before) == 2, timeout=5,
                   what="both long polls on the client's two connections")
        started = time.monotonic()
        answers = list(pool.map(lambda _: p.queue_stats(setup.queue), range(200)))
        waited = time.monotonic() - started
        held = [poll.result() for poll in polls]
    assert waited > BURST_TIMEOUT_S, waited  # the threads waited their turn longer than that
    assert all(a["queue_id"] == setup.queue for a in answers)
    assert [t["state"] for t in held] == ["PENDING", "PENDING"]
