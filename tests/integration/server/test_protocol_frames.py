"""Every frame type of docs/protocol.md, and bad input after hello, against a real server."""

from __future__ import annotations

import asyncio

import pytest
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect
from support.protocol_client import ECHO, ProtocolClient, random_instance
from support.waiting import UNIT, ms, wait_until_async

from orbit_wire.frames import (
    Credit,
    DrainOp,
    FinishOp,
    Heartbeat,
    Hello,
    Request,
    StartOp,
)
from orbit_wire.model import Capability, Outcome

pytestmark = pytest.mark.asyncio


async def test_hello_welcome_heartbeat(lane: Lane) -> None:
    async with await ProtocolClient.connect(lane.ws_url) as wc:
        welcome = await wc.hello_as(lane.worker, capacity=3)
        server = lane.env.server
        assert welcome.session_ttl_ms == server.session_ttl_ms
        assert welcome.heartbeat_ms == min(server.session_ttl_ms // 3, 5000)
        assert welcome.kill_grace_ms == server.kill_grace_ms
        assert welcome.server_time_ms > 1_600_000_000_000
        assert welcome.max_batch_ops == 256
        for _ in range(3):
            await wc.heartbeat()
        assert wc.order == ["welcome", "heartbeat_ack", "heartbeat_ack", "heartbeat_ack"]


async def test_credit_bounds_reservations_and_reserve_batches(lane: Lane) -> None:
    tasks = [lane.submit(payload={"i": i}) for i in range(5)]
    async with await lane.connect(capacity=4) as wc:
        # No credit, no reservation: the first reserve frame answers the credit, with exactly
        # its three; then never more than the credit: the next frame holds the last two.
        await wc.credit(3)
        got = await wc.only_reserved(3)
        assert {r.task_id for r in got} <= {t["id"] for t in tasks}
        assert sum(len(f.reservations) for f in wc.reserve_frames) == 3
        await wc.credit(5)
        rest = await wc.only_reserved(2)
        assert {r.task_id for r in got + rest} == {t["id"] for t in tasks}


async def test_only_exact_capabilities_are_dispatched(lane: Lane) -> None:
    lane.submit()  # test.echo v1/v1
    other = Capability("test.echo", "v2", "v1")
    async with await lane.connect(credit=2, capabilities=(other,)) as wc:
        # A task of its own capability, submitted later, is the first and only one it gets.
        mine = await asyncio.to_thread(lane.submit, handler_version="v2")
        await wc.only_reserved(1, among=[mine["id"]])
    async with await lane.connect(credit=2, capabilities=(other, ECHO)) as wc:
        [r] = await wc.reservations(1)
        assert r.capability == ECHO


async def test_outstanding_credit_above_twice_capacity_is_limit_exceeded(lane: Lane) -> None:
    async with await lane.connect(capacity=2) as wc:
        await wc.credit(4)  # exactly 2 x capacity is fine
        await wc.heartbeat()
        await wc.credit(1)
        assert await wc.expect_fatal("LIMIT_EXCEEDED") == 4004


async def test_drain_stops_reservations(lane: Lane) -> None:
    async with await lane.connect(capacity=4) as wc:
        drained = await wc.drain()
        assert drained.ok
        task = lane.submit()
        await wc.credit(4)
        await wc.heartbeat()  # the session is still alive
        # Another worker gets the task while the drained session holds on: it was never
        # reserved to the drained one.
        async with await lane.connect(credit=1) as wc2:
            await wc2.only_reserved(1, among=[task["id"]])
        assert wc.reserve_frames == []


async def test_batched_request_answers_in_order(lane: Lane) -> None:
    for _ in range(3):
        lane.submit()
    async with await lane.connect(credit=3) as wc:
        rs = await wc.reservations(3)
        starts = [StartOp(wc.msg_id(), r.attempt_id, r.epoch) for r in rs]
        response = await wc.request(*starts)
        assert [x.msg_id for x in response.results] == [op.msg_id for op in starts]
        assert all(x.ok and x.lease_ms for x in response.results)
        finishes = [FinishOp(wc.msg_id(), r.attempt_id, r.epoch, Outcome.SUCCEEDED,
                             result_json=f'{{"i":{i}}}') for i, r in enumerate(rs)]
        response = await wc.request(*finishes)
        assert [x.task_state for x in response.results] == ["SUCCEEDED"] * 3


async def test_resume_reports_running_and_lost(lane: Lane) -> None:
    lane.submit()
    brief = lane.submit(lease_ttl_ms=200, idempotency="IDEMPOTENT", max_attempts=1)
    instance = random_instance()
    wc = await lane.connect(credit=2, instance=instance)
    rs = await wc.reservations(2)
    for r in rs:
        assert (await wc.start(r)).ok
    await wc.close()
    # The 200 ms lease expires (the reaper ends its task); the default 30 s one does not.
    await wait_until_async(lambda: lane.task(brief["id"])["state"] != "RUNNING", timeout=10,
                           what="the 200 ms lease to expire")
    async with await lane.connect(instance=instance) as wc2:
        res = await wc2.resume([(r.attempt_id, r.epoch) for r in rs])
        assert res.ok and res.attempts is not None
        status = {e.attempt_id: e.status for e in res.attempts}
        short = next(r for r in rs if r.lease_ttl_ms == 200)
        long = next(r for r in rs if r.lease_ttl_ms != 200)
        assert status == {short.attempt_id: "LOST", long.attempt_id: "RUNNING"}
        running = next(e for e in res.attempts if e.status == "RUNNING")
        assert running.lease_ms and running.lease_ms > 0


async def test_retransmitted_ops_get_the_stored_answer(lane: Lane) -> None:
    task = lane.submit()
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        first = await wc.start(r, msg_id="start-1")
        again = await wc.start(r, msg_id="start-1")
        assert first.ok and again.ok
        # A replayed start answers the lease that is left (never more than first granted).
        assert first.lease_ms and again.lease_ms and 0 < again.lease_ms <= first.lease_ms
        done = await wc.finish(r, "SUCCEEDED", result_json='{"v":1}', msg_id="fin-1")
        dup = await wc.finish(r, "SUCCEEDED", result_json='{"v":2}', msg_id="fin-1")
        assert (dup.ok, dup.disposition, dup.task_state) == (True, "ACCEPTED", "SUCCEEDED")
        assert done.disposition == dup.disposition
        reused = await wc.renew(r, msg_id="fin-1")
        assert not reused.ok and reused.error_code == "MESSAGE_ID_REUSED"
    assert lane.task(task["id"])["result"] == {"v": 1}  # applied once
    assert lane.attempts(task["id"])["evidence"] == []


async def test_concurrent_request_is_refused(lane: Lane) -> None:
    async with await lane.connect() as wc:
        ops = tuple(DrainOp(f"d{i}") for i in range(200))
        await wc.send(Request(1, ops))
        await wc.send(Request(2, (DrainOp("x"),)))
        assert await wc.expect_fatal("CONCURRENT_REQUEST") == 4003


async def test_request_id_reuse_and_second_hello_are_out_of_order(lane: Lane) -> None:
    async with await lane.connect() as wc:
        await wc.request(DrainOp("a"), request_id=5)
        await wc.send(Request(5, (DrainOp("b"),)))
        assert await wc.expect_fatal("OUT_OF_ORDER") == 4003
    async with await lane.connect() as wc:
        await wc.send_raw('{"type": "hello"}')  # decoded first: a bad hello is BAD_FRAME
        assert await wc.expect_fatal("BAD_FRAME") == 4001
    wc = await ProtocolClient.connect(lane.ws_url)
    try:
        await wc.hello_as(lane.worker)
        await wc.send(Hello(lane.worker.credential_id, lane.worker.secret, wc.instance_id,
                            wc.instance_secret, lane.queue, (ECHO,), 1))
        assert await wc.expect_fatal("OUT_OF_ORDER") == 4003
    finally:
        await wc.close()


async def test_bad_values_inside_frames(lane: Lane) -> None:
    async with await lane.connect() as wc:
        await wc.send_raw('{"type": "credit", "credits": 99999999999999999999999}')
        assert await wc.expect_fatal("BAD_FRAME") == 4001
    async with await lane.connect() as wc:
        await wc.send_raw('{"type": "credit", "credits": 1.5}')
        assert await wc.expect_fatal("BAD_FRAME") == 4001
    async with await lane.connect() as wc:
        await wc.send_raw('{"type": "request", "id": 1, "ops": [{"op": "fly", "msg_id": "m"}]}')
        assert await wc.expect_fatal("UNKNOWN_FRAME_TYPE") == 4001
    async with await lane.connect() as wc:
        ops = ",".join(f'{{"op":"drain","msg_id":"m{i}"}}' for i in range(257))
        await wc.send_raw(f'{{"type": "request", "id": 1, "ops": [{ops}]}}')
        assert await wc.expect_fatal("LIMIT_EXCEEDED") == 4004


async def test_stale_epoch_and_foreign_attempts_are_refused_per_op(orbit: OrbitEnv,
                                                                   lane: Lane) -> None:
    task = lane.submit(max_attempts=3)
    async with await lane.connect(credit=2) as wc:
        [r1] = await wc.reservations(1)
        assert (await wc.start(r1)).ok
        res = await wc.finish(r1, "FAILED", code="TEMPORARY_REJECTION", retryable=True)
        assert res.task_state == "PENDING"
        [r2] = await wc.reservations(1)
        assert (await wc.start(r2)).ok
        stale = await wc.renew(r2, epoch=1)
        assert not stale.ok and stale.error_code in ("STALE_EPOCH", "LEASE_EXPIRED")
        old = await wc.renew(r1)
        assert not old.ok and old.error_code in ("STALE_EPOCH", "LEASE_EXPIRED")
        # A worker of another queue cannot touch this attempt: that op fails, nothing else.
        other_queue = orbit.queue()
        other = orbit.worker_credential(other_queue)
        async with await ProtocolClient.connect(lane.ws_url) as intruder:
            await intruder.hello_as(other)
            response = await intruder.request(
                StartOp(intruder.msg_id(), r2.attempt_id, r2.epoch), DrainOp(intruder.msg_id())
            )
            denied, drained = response.results
            assert not denied.ok and denied.error_code == "NOT_FOUND"
            assert drained.ok
            fin = await intruder.finish(r2, "SUCCEEDED", result_json="1")
            assert not fin.ok and fin.error_code == "NOT_FOUND"
        missing = await wc.one(StartOp(wc.msg_id(), "f" * 32, 1))
        assert not missing.ok and missing.error_code == "NOT_FOUND"
        # The rightful worker is unaffected.
        ok = await wc.finish(r2, "SUCCEEDED", result_json='{"ok":1}')
        assert ok.task_state == "SUCCEEDED"
    assert lane.task(task["id"])["state"] == "SUCCEEDED"


async def test_credentials_are_checked_at_hello(orbit: OrbitEnv, lane: Lane) -> None:
    async def hello_fails(cred_id: str, secret: str, queue: str, code: str,
                          protocol: int = 1) -> None:
        wc = await ProtocolClient.connect(lane.ws_url)
        try:
            await wc.send(Hello(
                cred_id, secret, wc.instance_id, wc.instance_secret, queue, (ECHO,), 1,
                protocol=protocol))
            assert await wc.expect_fatal(code) in (4005, 4006, 4007)
        finally:
            await wc.close()

    w = lane.worker
    await hello_fails(w.credential_id, "0" * 64, lane.queue, "UNAUTHENTICATED")
    await hello_fails("0" * 32, w.secret, lane.queue, "UNAUTHENTICATED")
    await hello_fails(w.credential_id, w.secret, lane.queue, "UNSUPPORTED_PROTOCOL", protocol=2)
    other_queue = orbit.queue()
    await hello_fails(w.credential_id, w.secret, other_queue, "PERMISSION_DENIED")
    producer = orbit.credential("producer", [lane.queue])
    await hello_fails(producer["credential_id"], producer["secret"], lane.queue,
                      "PERMISSION_DENIED")
    revoked = orbit.worker_credential(lane.queue)
    expect(orbit.admin_http.delete(f"/v1/credentials/{revoked.credential_id}"), 200)
    await hello_fails(revoked.credential_id, revoked.secret, lane.queue, "UNAUTHENTICATED")


async def test_instance_secret_is_bound(lane: Lane) -> None:
    iid, secret = random_instance()
    async with await lane.connect(instance=(iid, secret)):
        pass
    wc = await ProtocolClient.connect(lane.ws_url, instance_id=iid, instance_secret="x" * 64)
    try:
        await wc.send(Hello(
            lane.worker.credential_id, lane.worker.secret, iid, "x" * 64, lane.queue,
            (ECHO,), 1))
        assert await wc.expect_fatal("INSTANCE_CONFLICT") == 4007
    finally:
        await wc.close()


async def test_reconnect_replaces_older_connection_and_releases(lane: Lane) -> None:
    task = lane.submit()
    instance = random_instance()
    old = await lane.connect(credit=1, instance=instance)
    [r] = await old.reservations(1)
    new = await lane.connect(instance=instance)
    try:
        assert await old.wait_closed() == 4009
        # The older connection's unstarted reservation was released: start fails...
        res = await new.start(r)
        assert not res.ok
        # ...and the task is dispatched again, with a new epoch, once credit is offered.
        await new.credit(1)
        [again] = await new.reservations(1)
        assert again.task_id == task["id"] and again.epoch == r.epoch + 1
        assert lane.task(task["id"])["attempts"] == 0  # a release spends no attempt
    finally:
        await new.close()
        await old.close()
    decisions = [a["decision"] for a in lane.attempts(task["id"])["attempts"]]
    assert "RELEASED" in decisions


async def test_closing_releases_unstarted_reservations(lane: Lane) -> None:
    task = lane.submit()
    wc = await lane.connect(credit=1)
    [r] = await wc.reservations(1)
    await wc.close()
    async with await lane.connect(credit=1) as wc2:
        [again] = await wc2.reservations(1)
        assert again.task_id == task["id"] and again.epoch == r.epoch + 1


async def test_silent_connection_is_closed_after_session_ttl(server_factory: object) -> None:
    from support.orbit_http import OrbitEnv, http_client

    # The scenario: heartbeats 150 ms apart keep a 500 ms session (both scale with the unit).
    srv = server_factory(session_ttl_ms=ms(500))  # type: ignore[operator]
    admin = srv.bootstrap_admin()
    with http_client(srv.url, admin.bearer) as admin_http:
        env = OrbitEnv(srv, admin, admin_http)
        lane = Lane.open(env)
        task = lane.submit()
        wc = await lane.connect(credit=1)
        try:
            [r] = await wc.reservations(1)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            assert await wc.wait_closed(timeout=10) == 4008
            assert 0.3 * UNIT < loop.time() - t0 < 8 * UNIT
        finally:
            await wc.close()
        # A heartbeating worker stays connected past the TTL.
        async with await lane.connect(credit=1) as live:
            [again] = await live.reservations(1)  # released by the closed session
            assert again.task_id == task["id"] and again.epoch == r.epoch + 1
            for _ in range(8):
                await asyncio.sleep(0.15 * UNIT)
                await live.send(Heartbeat())
            assert not live.closed.is_set()
        env.close()


async def test_credit_frame_spent_by_reserve_and_reset_per_connection(lane: Lane) -> None:
    lane.submit()
    lane.submit()
    wc = await lane.connect(capacity=1)
    await wc.send(Credit(2))
    rs = await wc.reservations(2)
    assert len(rs) == 2
    await wc.close()
    # A new connection starts with zero credit even though the old one had none left: its
    # first reserve frame answers its own credit, with both released tasks.
    async with await lane.connect(capacity=1) as wc2:
        await wc2.credit(2)
        await wc2.only_reserved(2)


async def test_dispatch_is_shared_between_idle_sessions(lane: Lane) -> None:
    async with await lane.connect(credit=8) as a, await lane.connect(credit=8) as b:
        await a.heartbeat()
        await b.heartbeat()
        got = {a.instance_id: 0, b.instance_id: 0}
        for _ in range(12):
            lane.submit()
            gets = {asyncio.create_task(wc.reserved.get()): wc for wc in (a, b)}
            done, pending = await asyncio.wait(gets, timeout=10 * UNIT,
                                               return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            assert len(done) == 1, "one task goes to exactly one session"
            first = done.pop()
            wc, r = gets[first], first.result()
            got[wc.instance_id] += 1
            assert (await wc.start(r)).ok
            res = await wc.finish(r, "SUCCEEDED", result_json="1")
            assert res.task_state == "SUCCEEDED"
            await wc.credit(1)
        assert sum(got.values()) == 12
        assert min(got.values()) >= 4, got  # least recently served first: nobody starves
