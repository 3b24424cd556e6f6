"""A handler's progress, its checkpoint and the progress timeout, through a real server and
a scripted worker over the real WebSocket (both stores).

A renew or finish carrying ``progress`` is kept on the attempt and shown by the API; bad
details are refused alone (the renew keeps its lease, an audit row names the code); the last
details of an attempt that did not succeed reach the next reservation as its checkpoint
(a retry, a review's retry, an operator's retry); ``progress_timeout_ms`` round-trips from
a submit and from a declared policy to the reservation; a PROGRESS_TIMEOUT kill is accepted
as its cause.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
from support.cli import Cli
from support.lanes import NO_BACKOFF, Lane, wait_for_state
from support.orbit_http import OrbitEnv, expect, expect_error, task_spec
from support.protocol_client import ECHO, ProtocolClient
from support.waiting import UNIT

from orbit_wire.frames import FinishOp, Hello, Progress, RenewOp, Report
from orbit_wire.model import Outcome
from orbit_wire.policy import CapabilityPolicy
from orbit_wire.tasktype import TaskType


def _renew(wc: ProtocolClient, attempt_id: str, epoch: int, progress: Progress) -> RenewOp:
    return RenewOp(wc.msg_id(), attempt_id, epoch, progress=progress)


async def test_a_renews_progress_is_on_the_attempt_and_bad_details_are_refused_alone(
        orbit: OrbitEnv, lane: Lane) -> None:
    task = lane.submit(max_attempts=1)
    wc = await lane.connect(credit=1)
    try:
        [res] = await wc.reservations(1)
        assert res.checkpoint is None and res.progress_timeout_ms is None  # a first attempt
        assert (await wc.start(res)).ok
        [before] = lane.attempts(task["id"])["attempts"]
        assert before["progress"] is None
        ok = await wc.one(_renew(wc, res.attempt_id, res.epoch,
                                 Progress(0.25, '{"done": 250, "of": 1000}')))
        assert ok.ok and ok.lease_ms, ok
        [seen] = lane.attempts(task["id"])["attempts"]
        assert seen["progress"]["fraction"] == 0.25
        assert seen["progress"]["details"] == {"done": 250, "of": 1000}
        assert seen["progress"]["at_ms"] >= seen["started_at_ms"]
        # Details that break a value rule: the renew still holds its lease, the fraction is
        # kept, the stored details stay the last good ones, and the audit names the code.
        bad = await wc.one(_renew(wc, res.attempt_id, res.epoch, Progress(0.5, '{"a": ')))
        assert bad.ok and bad.lease_ms, bad
        [after] = lane.attempts(task["id"])["attempts"]
        assert after["progress"]["fraction"] == 0.5
        assert after["progress"]["details"] == {"done": 250, "of": 1000}
        refused = [e for e in lane.audit(task["id"]) if e["kind"] == "progress_refused"]
        assert [e["detail"] for e in refused] == [{"code": "INVALID_JSON"}]
        # Details alone keep the fraction; a renew without progress changes nothing.
        assert (await wc.one(_renew(wc, res.attempt_id, res.epoch,
                                    Progress(details_json='{"done": 600}')))).ok
        assert (await wc.renew(res)).ok
        [later] = lane.attempts(task["id"])["attempts"]
        assert later["progress"]["fraction"] == 0.5
        assert later["progress"]["details"] == {"done": 600}
        # The finish's own progress is the last word; a success leaves no checkpoint.
        finish = msgspec.structs.replace(
            wc.finish_op(res, "SUCCEEDED", result_json='{"ok": true}'),
            progress=Progress(1.0, '{"done": 1000}'))
        assert (await wc.one(finish)).ok
    finally:
        await wc.close()
    [done] = lane.attempts(task["id"])["attempts"]
    assert done["progress"]["fraction"] == 1.0 and done["progress"]["details"] == {"done": 1000}
    view = lane.task(task["id"])
    assert view["state"] == "SUCCEEDED" and view["checkpoint"] is None
    metrics = orbit.admin_http.get("/metrics").text
    assert f'orbit_progress_reports_total{{queue="{lane.queue}",result="stored"}} 3.0' in metrics
    assert (f'orbit_progress_reports_total{{queue="{lane.queue}",result="INVALID_JSON"}} 1'
            in metrics)


async def test_the_next_attempt_gets_the_last_details_of_the_one_that_failed(
        lane: Lane) -> None:
    task = lane.submit(max_attempts=3)
    wc = await lane.connect(credit=1)
    try:
        [first] = await wc.reservations(1)
        assert first.attempt_number == 1 and first.checkpoint is None
        assert (await wc.start(first)).ok
        assert (await wc.one(_renew(wc, first.attempt_id, first.epoch,
                                    Progress(0.3, '{"row": 300}')))).ok
        failed = msgspec.structs.replace(
            wc.finish_op(first, "FAILED", code="FLAKY", retryable=True),
            progress=Progress(0.4, '{"row": 400, "cursor": "k-400"}'))
        assert (await wc.one(failed)).ok
        assert lane.task(task["id"])["checkpoint"] == {"row": 400, "cursor": "k-400"}
        await wc.credit(1)
        [second] = await wc.reservations(1)
        assert second.attempt_number == 2
        assert second.checkpoint == {"row": 400, "cursor": "k-400"}
        # An attempt that ends without reporting details leaves the earlier checkpoint.
        assert (await wc.start(second)).ok
        assert (await wc.finish(second, "FAILED", code="FLAKY", retryable=True)).ok
        await wc.credit(1)
        [third] = await wc.reservations(1)
        assert third.attempt_number == 3
        assert third.checkpoint == {"row": 400, "cursor": "k-400"}
        assert (await wc.start(third)).ok
        assert (await wc.finish(third, "SUCCEEDED", result_json="1")).ok
    finally:
        await wc.close()


async def test_an_operators_retry_and_a_reviews_retry_hand_over_the_checkpoint(
        lane: Lane) -> None:
    ended = lane.submit(max_attempts=1)
    reviewed = lane.submit(max_attempts=1, idempotency="NON_IDEMPOTENT")
    wc = await lane.connect(credit=2)
    try:
        reservations = {r.task_id: r for r in await wc.reservations(2)}
        for task_id, outcome, code in ((ended["id"], "FAILED", "BROKE"),
                                       (reviewed["id"], "UNKNOWN", "HANDLER_CRASHED")):
            res = reservations[task_id]
            assert (await wc.start(res)).ok
            finish = msgspec.structs.replace(
                wc.finish_op(res, outcome, code=code),
                progress=Progress(0.9, f'{{"task": "{task_id}", "step": 9}}'))
            assert (await wc.one(finish)).ok
        assert lane.task(ended["id"])["state"] == "FAILED"
        assert lane.task(reviewed["id"])["state"] == "NEEDS_REVIEW"
        expect(lane.producer.post(f"/v1/tasks/{ended['id']}/retry", json={}), 200)
        expect(lane.review(reviewed["id"], "retry"), 200)
        await wc.credit(2)
        again = {r.task_id: r for r in await wc.reservations(2)}
        for task_id in (ended["id"], reviewed["id"]):
            assert again[task_id].attempt_number == 2
            assert again[task_id].checkpoint == {"task": task_id, "step": 9}
    finally:
        await wc.close()


async def test_progress_timeout_round_trips_and_its_kill_is_its_own_cause(
        orbit: OrbitEnv, lane: Lane) -> None:
    # Out of bounds: refused naming the field.
    for bad in (99, 86_400_001):
        error = expect_error(lane.producer.post(f"/v1/queues/{lane.queue}/tasks",
                                                json=task_spec(progress_timeout_ms=bad)), 400,
                             "BAD_REQUEST")
        assert "progress_timeout_ms" in error["message"], error
    task = lane.submit(max_attempts=1, progress_timeout_ms=1500)
    assert task["policy"]["progress_timeout_ms"] == 1500
    assert lane.task(task["id"])["policy"]["progress_timeout_ms"] == 1500
    plain = lane.submit(max_attempts=1)
    assert plain["policy"]["progress_timeout_ms"] is None
    wc = await lane.connect(credit=2)
    try:
        got = {r.task_id: r for r in await wc.reservations(2)}
        assert got[task["id"]].progress_timeout_ms == 1500
        assert got[plain["id"]].progress_timeout_ms is None
        res = got[task["id"]]
        assert (await wc.start(res)).ok
        killed = FinishOp(wc.msg_id(), res.attempt_id, res.epoch, Outcome.UNKNOWN,
                          code="PROGRESS_TIMEOUT",
                          report=Report(kill_reason="PROGRESS_TIMEOUT", signal=9))
        answer = await wc.one(killed)
        assert answer.ok and answer.disposition == "ACCEPTED", answer
    finally:
        await wc.close()
    view = lane.task(task["id"])
    assert view["failure"]["code"] == "PROGRESS_TIMEOUT", view
    [attempt] = lane.attempts(task["id"])["attempts"]
    assert attempt["code"] == "PROGRESS_TIMEOUT" and attempt["kill_reason"] == "PROGRESS_TIMEOUT"


async def test_a_declared_progress_timeout_fills_a_submit_that_left_it_out(
        orbit: OrbitEnv, lane: Lane) -> None:
    declared = TaskType("test.echo", "v1", "v1", progress_timeout_ms=2500)
    assert declared.policy.progress_timeout_ms == 2500
    assert declared.spec({"n": 1})["progress_timeout_ms"] == 2500
    wc = await ProtocolClient.connect(lane.ws_url)
    try:
        await wc.send(Hello(lane.worker.credential_id, lane.worker.secret, wc.instance_id,
                            wc.instance_secret, lane.queue, (ECHO,), 1,
                            policies=(CapabilityPolicy(ECHO, declared.policy),)))
        await asyncio.wait_for(wc.welcomes.get(), 10 * UNIT)
        task = expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks",
                                         json=task_spec(backoff=NO_BACKOFF)), 201)
        assert task["policy"]["progress_timeout_ms"] == 2500
        assert task["policy_source"] == "registered"
        own = lane.submit(progress_timeout_ms=60_000)
        assert own["policy"]["progress_timeout_ms"] == 60_000
    finally:
        await wc.close()


async def test_the_cli_shows_a_running_attempts_progress_and_the_policy(
        lane: Lane, tmp_path: Path) -> None:
    cli = Cli.producer_of(lane, tmp_path)
    task_id = (await asyncio.to_thread(
        cli.ok, "tasks", "submit", "--handler", "test.echo", "--handler-version", "v1",
        "--payload-version", "v1", "--payload", "{}", "--progress-timeout", "30s")).strip()
    wc = await lane.connect(credit=1)
    try:
        [res] = await wc.reservations(1)
        assert res.progress_timeout_ms == 30_000
        assert (await wc.start(res)).ok
        assert (await wc.one(_renew(wc, res.attempt_id, res.epoch,
                                    Progress(0.42, '{"row": 420}')))).ok
        shown = (await asyncio.to_thread(cli.tty, "tasks", "get", task_id)).text
        assert "progress timeout 30 s" in shown, shown
        assert '42% · {"row":420}' in shown, shown
        table = (await asyncio.to_thread(cli.tty, "tasks", "attempts", task_id)).text
        assert "progress" in table and "42%" in table, table
    finally:
        await wc.close()


async def test_a_worker_lost_mid_loop_leaves_its_last_details_to_the_next_attempt(
        lane: Lane) -> None:
    task = lane.submit(max_attempts=2, idempotency="IDEMPOTENT", lease_ttl_ms=500)
    wc = await lane.connect(credit=1)
    try:
        [first] = await wc.reservations(1)
        assert (await wc.start(first)).ok
        assert (await wc.one(_renew(wc, first.attempt_id, first.epoch,
                                    Progress(0.5, '{"done": 5}')))).ok
    finally:
        await wc.abort()  # vanishes: no finish, the reaper ends the attempt at its lease end
    await wait_for_state(lane, task["id"], {"PENDING"}, timeout_s=20)
    [lost] = lane.attempts(task["id"])["attempts"]
    assert lost["code"] == "LEASE_EXPIRED" and lost["progress"]["details"] == {"done": 5}
    again = await lane.connect(credit=1)
    try:
        [second] = await again.reservations(1, timeout=20)
        assert second.attempt_number == 2 and second.checkpoint == {"done": 5}
    finally:
        await again.close()
