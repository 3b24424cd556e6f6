"""Leases never overlap, renewals hold a lease, and a SIGKILLed server loses nothing durable."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from support.lanes import NO_BACKOFF, Lane
from support.orbit_http import OrbitEnv, expect, http_client, task_spec
from support.protocol_client import ProtocolClient, random_instance
from support.server import ServerProcess
from support.waiting import UNIT, ms, wait_until_async

from orbit_wire.frames import FinishOp, StartOp
from orbit_wire.model import Outcome

pytestmark = pytest.mark.asyncio


def _lane(srv: ServerProcess) -> tuple[OrbitEnv, Lane]:
    admin = srv.bootstrap_admin()
    env = OrbitEnv(srv, admin, http_client(srv.url, admin.bearer))
    return env, Lane.open(env)


async def test_retry_waits_for_lease_expiry_plus_kill_grace(
        server_factory: Callable[..., ServerProcess]) -> None:
    srv = server_factory(kill_grace_ms=1000)
    env, lane = _lane(srv)
    try:
        task = lane.submit(idempotency="IDEMPOTENT", max_attempts=2, lease_ttl_ms=300)
        a = await lane.connect(credit=1)
        [r1] = await a.reservations(1)
        assert (await a.start(r1)).ok
        loop = asyncio.get_running_loop()
        started_at = loop.time()
        await a.abort()  # the worker vanishes with its attempt running
        async with await lane.connect(credit=1) as b:
            [r2] = await b.reservations(1, timeout=20)
            waited = loop.time() - started_at
            assert r2.task_id == task["id"] and r2.epoch == r1.epoch + 1
        # The new attempt was not dispatched before lease expiry (300 ms) + kill grace (1 s).
        assert waited >= 1.0, waited  # generous: the server-side check below is exact
        first, second = lane.attempts(task["id"])["attempts"]
        assert first["code"] == "LEASE_EXPIRED"
        assert second["reserved_at_ms"] >= first["lease_expires_at_ms"] + 1000
    finally:
        env.close()
        env.admin_http.close()


async def test_renewals_keep_the_lease_and_no_second_attempt_starts(lane: Lane) -> None:
    # The scenario: a renewal every 150 ms under a 400 ms lease (both scale with the unit).
    lease_ms = ms(400)
    task = lane.submit(idempotency="IDEMPOTENT", max_attempts=3, lease_ttl_ms=lease_ms)
    async with await lane.connect(credit=1) as a, await lane.connect(credit=1) as b:
        [r] = await a.reservations(1)
        assert (await a.start(r)).ok
        for _ in range(10):  # 1.5 s, well past the 400 ms lease
            await asyncio.sleep(0.15 * UNIT)
            renewed = await a.renew(r)
            assert renewed.ok and renewed.lease_ms and renewed.lease_ms <= lease_ms
        assert b.reserved.empty()
        done = await a.finish(r, "SUCCEEDED", result_json='{"held":true}')
        assert done.disposition == "ACCEPTED" and done.task_state == "SUCCEEDED"
    [attempt] = lane.attempts(task["id"])["attempts"]
    assert attempt["renewals"] >= 10


async def test_lease_never_extends_past_attempt_timeout(lane: Lane) -> None:
    task = lane.submit(lease_ttl_ms=5000, attempt_timeout_ms=600)
    async with await lane.connect(credit=1) as wc:
        [r] = await wc.reservations(1)
        started = await wc.start(r)
        assert started.ok and started.lease_ms is not None and started.lease_ms <= 600
        await asyncio.sleep(0.8 * UNIT)  # the scenario: a renewal past the 600 ms timeout
        late = await wc.renew(r)
        assert not late.ok and late.error_code in ("LEASE_EXPIRED", "STALE_EPOCH")
    got = await wait_until_async(lambda: _unless_running(lane.task(task["id"])), timeout=5,
                                 interval=0.05, what="the task to leave RUNNING")
    assert got["state"] == "NEEDS_REVIEW"


def _unless_running(task: dict[str, Any]) -> dict[str, Any] | None:
    return None if task["state"] == "RUNNING" else task


async def test_sigkill_restart_loses_nothing_and_replays_receipts(
        server_factory: Callable[..., ServerProcess]) -> None:
    srv = server_factory()
    env, lane = _lane(srv)
    try:
        specs = [task_spec(payload={"i": i}, backoff=NO_BACKOFF, lease_ttl_ms=60000)
                 for i in range(30)]
        made = expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks/batch",
                                         json={"tasks": specs}), 201)["tasks"]
        ids = {t["id"] for t in made}
        instance = random_instance()
        wc = await lane.connect(capacity=10, credit=20, instance=instance)
        rs = await wc.reservations(20)
        starts = [StartOp(f"s-{r.attempt_id}", r.attempt_id, r.epoch) for r in rs]
        start_answers = (await wc.request(*starts)).results
        assert all(a.ok for a in start_answers)
        finished = rs[:10]
        finishes = [FinishOp(f"f-{r.attempt_id}", r.attempt_id, r.epoch, Outcome.SUCCEEDED,
                             result_json=f'{{"done":{i},"x":1.10}}')
                    for i, r in enumerate(finished)]
        finish_answers = (await wc.request(*finishes)).results
        assert all(a.ok and a.task_state == "SUCCEEDED" for a in finish_answers)
        # Crash the server with 10 attempts running and 10 tasks never dispatched.
        srv.kill()
        await wc.wait_closed(timeout=10)
        await wc.close()
        srv.start()
        # Every accepted task is still there; every confirmed result is intact.
        for t in made:
            got = lane.task(t["id"])
            assert got["id"] in ids
        for i, r in enumerate(finished):
            raw = lane.task_raw(r.task_id)
            assert f'{{"done":{i},"x":1.10}}' in raw
        async with await lane.connect(capacity=10, instance=instance) as again:
            # Retransmitted ops (same msg_id) get their original answers and apply once.
            replay = (await again.request(*finishes)).results
            assert [(a.ok, a.disposition, a.task_state) for a in replay] == \
                   [(a.ok, a.disposition, a.task_state) for a in finish_answers]
            restarted = (await again.request(*starts)).results
            assert all(a.ok for a in restarted)
            # The attempts that were running are still RUNNING (their leases are durable).
            running = rs[10:]
            resumed = await again.resume([(r.attempt_id, r.epoch) for r in running])
            assert resumed.attempts is not None
            assert {e.status for e in resumed.attempts} == {"RUNNING"}
            answers = (await again.request(*[
                FinishOp(again.msg_id(), r.attempt_id, r.epoch, Outcome.SUCCEEDED,
                         result_json='{"after":"restart"}') for r in running])).results
            assert all(a.task_state == "SUCCEEDED" for a in answers)
            # The 10 tasks never dispatched are dispatched now.
            await again.credit(10)
            rest = await again.reservations(10)
            assert {r.task_id for r in rest} == ids - {r.task_id for r in rs}
        for r in finished:
            history = lane.attempts(r.task_id)
            assert len(history["attempts"]) == 1 and history["evidence"] == []
            assert lane.task(r.task_id)["attempts"] == 1
    finally:
        env.close()
        env.admin_http.close()


async def test_bad_connections_never_disturb_a_working_one(lane: Lane) -> None:
    task = lane.submit()
    async with await lane.connect(credit=1) as good:
        [r] = await good.reservations(1)
        assert (await good.start(r)).ok
        for junk in ("{", b"\x00", '{"type":"zzz"}', '{"type":"credit","credits":0}', "[]" * 10):
            bad = await ProtocolClient.connect(lane.ws_url)
            try:
                await bad.send_raw(junk)
                await bad.wait_closed()
            finally:
                await bad.close()
        await good.heartbeat()
        done = await good.finish(r, "SUCCEEDED", result_json='{"ok":true}')
        assert done.task_state == "SUCCEEDED"
    assert lane.task(task["id"])["state"] == "SUCCEEDED"


async def test_sigterm_with_connected_workers_exits_cleanly(lane: Lane) -> None:
    task = lane.submit()
    wc = await lane.connect(credit=1)
    try:
        [r] = await wc.reservations(1)
        assert (await wc.start(r)).ok
        srv = lane.env.server
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        code = await asyncio.to_thread(srv.stop)
        assert code == 0, srv.log_tail()
        assert loop.time() - t0 < 9 * UNIT
        assert await wc.wait_closed() is not None
    finally:
        await wc.close()
    srv.start()
    # The started attempt survived the restart with its lease; the task is still RUNNING.
    assert lane.task(task["id"])["state"] == "RUNNING"
