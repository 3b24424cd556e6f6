"""The worker protocol at the service level: hello, reserve, start/renew/finish, fencing,
receipts, evidence, release, resume — every row of the outcome table (docs/handlers.md) — on
a real SQLite file."""

from __future__ import annotations

import orjson
import pytest
from sqlalchemy import text
from store_support import CAP, World, as_json

from orbit_wire.errors import AuthError, ErrorCode, OrbitError, ProtocolError
from orbit_wire.frames import (
    AttemptRef,
    DrainOp,
    FinishOp,
    Hello,
    RenewOp,
    Report,
    Reserve,
    ResumeOp,
    StartOp,
    encode,
)
from orbit_wire.ids import new_id
from orbit_wire.model import Capability, Outcome

# ------------------------------------------------------------------------ hello


def test_hello_binds_instance_and_rejects_conflicts(world: World) -> None:
    iid = new_id(world.clock())
    b = world.hello(iid)
    assert b.instance_id == iid and b.queue_id == world.queue_id and b.capabilities == (CAP,)
    assert world.hello(iid).instance_id == iid  # reconnect with the same secret
    with pytest.raises(OrbitError) as exc:
        world.hello(iid, secret="another")
    assert exc.value.code is ErrorCode.INSTANCE_CONFLICT
    with world.engine.connect() as conn:
        stored = conn.execute(text("SELECT secret_hash FROM instances WHERE id = :id"),
                              {"id": iid}).scalar_one()
    assert "instance-secret" not in stored and len(stored) == 64


def test_a_revoked_credentials_session_is_fenced(world: World) -> None:
    first = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    world.service.admin.revoke_credential(world.admin, world.worker_cred["credential_id"])
    with pytest.raises(AuthError) as fenced:
        world.renew(b, aid, ep)
    assert fenced.value.code is ErrorCode.UNAUTHENTICATED
    with pytest.raises(AuthError):
        world.finish(b, aid, ep, Outcome.SUCCEEDED, result={"x": 1})
    world.submit()
    assert not world.service.workers.reserve(b, 4)
    assert world.attempts(first["id"])[0]["state"] == "RUNNING"  # only its lease decides


def test_drain_is_answered_and_replayed(world: World) -> None:
    b = world.hello()
    (first,), _ = world.service.workers.apply_ops(b, [DrainOp("d")])
    (again,), _ = world.service.workers.apply_ops(b, [DrainOp("d")])
    assert first.ok and again == first
    (reused,), _ = world.service.workers.apply_ops(b, [StartOp("d", "a" * 32, 1)])
    assert reused.error_code is ErrorCode.MESSAGE_ID_REUSED


def test_hello_auth_role_scope_and_protocol(world: World) -> None:
    base = dict(credential_id=world.worker_cred["credential_id"],
                credential_secret=world.worker_cred["secret"], instance_id=new_id(1),
                instance_secret="s", queue_id=world.queue_id, capabilities=(CAP,), capacity=1)
    with pytest.raises(AuthError) as exc:
        world.service.workers.worker_hello(Hello(**{**base, "credential_secret": "nope"}))
    assert exc.value.code is ErrorCode.UNAUTHENTICATED
    with pytest.raises(AuthError) as exc:
        world.service.workers.worker_hello(Hello(**{**base, "queue_id": "c" * 32}))
    assert exc.value.code is ErrorCode.PERMISSION_DENIED
    prod = world.service.admin.create_credential(world.admin, "producer", [world.queue_id], None)
    with pytest.raises(AuthError) as exc:
        world.service.workers.worker_hello(Hello(**{**base,
                                                    "credential_id": prod["credential_id"],
                                                    "credential_secret": prod["secret"]}))
    assert exc.value.code is ErrorCode.PERMISSION_DENIED
    with pytest.raises(ProtocolError) as perr:
        world.service.workers.worker_hello(Hello(**{**base, "protocol": 2}))
    assert perr.value.code is ErrorCode.UNSUPPORTED_PROTOCOL
    world.service.admin.revoke_credential(world.admin, world.worker_cred["credential_id"])
    with pytest.raises(AuthError):
        world.service.workers.worker_hello(Hello(**base))


# ------------------------------------------------------------------------ reserve


def test_reserve_only_exact_capability_and_encodes(world: World) -> None:
    other = world.submit(handler="other")
    wrong_version = world.submit(handler_version="v2")
    t = world.submit(payload={"big": 123456789012345678})
    b = world.hello()
    got = world.service.workers.reserve(b, 10)
    assert [r.task_id for r in got] == [t["id"]]
    r = got[0]
    assert r.epoch == 1 and r.attempt_number == 1 and r.capability == CAP
    frame = orjson.loads(encode(Reserve(tuple(got))))
    assert frame["reservations"][0]["payload"] == {"big": 123456789012345678}
    assert b'123456789012345678' in encode(Reserve(tuple(got)))
    assert world.task(t["id"])["state"] == "RUNNING"
    assert world.task(t["id"])["attempts"] == 0  # not spent before start
    assert world.service.workers.reserve(b, 10) == []
    both = world.hello(caps=(Capability("other", "v1", "v1"),
                             Capability("text.normalize", "v2", "v1")))
    claimed = {r.task_id for r in world.service.workers.reserve(both, 10)}
    assert claimed == {other["id"], wrong_version["id"]}


def test_reserve_claims_oldest_first_up_to_n(world: World) -> None:
    ids = []
    for _ in range(5):
        ids.append(world.submit()["id"])
        world.clock.advance(1)
    b = world.hello()
    assert [r.task_id for r in world.service.workers.reserve(b, 3)] == ids[:3]
    assert [r.task_id for r in world.service.workers.reserve(b, 3)] == ids[3:]
    assert world.service.workers.reserve(b, 0) == []


# ------------------------------------------------------------------------ outcome table rows


def test_success_stores_exact_result_text(world: World) -> None:
    t = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    text = '{"text":"HELLO ORBIT","n":1.50,"big":9223372036854775807}'
    res, effects = world.finish(b, aid, ep, Outcome.SUCCEEDED, result_json=text)
    assert res.ok and res.disposition == "ACCEPTED" and res.task_state == "SUCCEEDED"
    assert effects.terminal_tasks == [t["id"]]
    view = world.task(t["id"])
    assert orjson.dumps(view["result"]).decode() == text  # exact number text kept
    assert view["state"] == "SUCCEEDED" and view["attempts"] == 1
    (a,) = world.attempts(t["id"])
    assert a["state"] == "FINISHED" and a["decision"] == "SUCCEEDED"
    assert a["decision_rule"] == "handler_succeeded" and a["child_pid"] == 4242
    assert a["exit_code"] == 0 and a["cpu_ms"] == 5


def test_object_rejected_fails_with_empty_details(world: World) -> None:
    t = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    res, _ = world.finish(b, aid, ep, Outcome.FAILED, code="OBJECT_REJECTED")
    assert res.task_state == "FAILED"
    view = as_json(world.task(t["id"]))
    assert view["failure"] == {"code": "OBJECT_REJECTED", "details": {}}
    assert world.attempts(t["id"])[0]["decision_rule"] == "explicit_failure"


def test_object_rejected_keeps_details(world: World) -> None:
    t = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    world.finish(b, aid, ep, Outcome.FAILED, code="OBJECT_REJECTED", details_json='{"f":1.0}')
    assert orjson.dumps(world.task(t["id"])["failure"]["details"]) == b'{"f":1.0}'


def test_temporary_rejection_retries_after_backoff_then_exhausts(world: World) -> None:
    t = world.submit(max_attempts=2, backoff={"initial_ms": 1000, "jitter": 0})
    b = world.hello()
    aid, ep = world.run_once(b)
    res, effects = world.finish(b, aid, ep, Outcome.FAILED, code="TEMPORARY_REJECTION",
                                retryable=True)
    assert res.task_state == "PENDING"
    view = world.task(t["id"])
    assert view["next_attempt_at_ms"] == world.clock() + 1000
    assert effects.next_due_ms == world.clock() + 1000 and not effects.ready_queues
    assert world.service.workers.reserve(b, 1) == []  # backoff not over
    world.clock.advance(1000)
    assert world.service.reaper.reap().ready_queues == {world.queue_id}  # the wake-up fires
    aid2, ep2 = world.run_once(b)
    assert ep2 == ep + 1
    res, _ = world.finish(b, aid2, ep2, Outcome.FAILED, code="TEMPORARY_REJECTION",
                          retryable=True)
    assert res.task_state == "FAILED"
    assert world.task(t["id"])["failure"]["code"] == "TEMPORARY_REJECTION"
    rules = [a["decision_rule"] for a in world.attempts(t["id"])]
    assert rules == ["retryable_failure_retry", "retry_budget_exhausted"]


def test_retry_blocked_by_total_deadline(world: World) -> None:
    t = world.submit(deadline_ms=5000, backoff={"initial_ms": 10_000, "max_ms": 10_000})
    b = world.hello()
    aid, ep = world.run_once(b)
    res, _ = world.finish(b, aid, ep, Outcome.FAILED, code="TEMPORARY_REJECTION", retryable=True)
    assert res.task_state == "FAILED"
    assert world.attempts(t["id"])[0]["decision_rule"] == "deadline_exhausted"


@pytest.mark.parametrize("code", ["HANDLER_ERROR", "HANDLER_CRASHED", "INVALID_HANDLER_RESULT",
                                  "LEASE_LOST"])
def test_unknown_outcomes_non_idempotent_go_to_review(world: World, code: str) -> None:
    t = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    res, effects = world.finish(b, aid, ep, Outcome.UNKNOWN, code=code,
                                report=Report(signal=9, kill_reason="LEASE_LOST"))
    assert res.task_state == "NEEDS_REVIEW" and effects.terminal_tasks == [t["id"]]
    (a,) = world.attempts(t["id"])
    assert a["outcome"] == "UNKNOWN" and a["code"] == code and a["signal"] == 9
    assert a["decision_rule"] == "unknown_outcome_non_idempotent"


def test_unknown_outcome_idempotent_retries_then_reviews_at_budget(world: World) -> None:
    t = world.submit(idempotency="IDEMPOTENT", max_attempts=2, backoff={"initial_ms": 0})
    b = world.hello()
    aid, ep = world.run_once(b)
    res, effects = world.finish(b, aid, ep, Outcome.UNKNOWN, code="HANDLER_ERROR")
    assert res.task_state == "PENDING" and effects.ready_queues == {world.queue_id}
    aid, ep = world.run_once(b)
    res, _ = world.finish(b, aid, ep, Outcome.UNKNOWN, code="HANDLER_CRASHED")
    assert res.task_state == "NEEDS_REVIEW"  # uncertain last attempt: review, not FAILED
    rules = [a["decision_rule"] for a in world.attempts(t["id"])]
    assert rules == ["unknown_outcome_idempotent_retry", "retry_budget_exhausted"]


def test_non_idempotent_retryable_failure_after_uncertain_history_goes_to_review(
        world: World) -> None:
    t = world.submit(max_attempts=3, backoff={"initial_ms": 0})
    b = world.hello()
    aid, ep = world.run_once(b)
    world.finish(b, aid, ep, Outcome.UNKNOWN, code="HANDLER_ERROR")
    assert world.task(t["id"])["state"] == "NEEDS_REVIEW"
    _view, effects = world.service.tasks.review(world.producer, t["id"], "retry", None, "checked")
    assert effects.ready_queues == {world.queue_id}
    aid, ep = world.run_once(b)
    res, _ = world.finish(b, aid, ep, Outcome.FAILED, code="TEMPORARY_REJECTION", retryable=True)
    assert res.task_state == "NEEDS_REVIEW"
    rules = [a["decision_rule"] for a in world.attempts(t["id"])]
    assert rules == ["unknown_outcome_non_idempotent", "uncertain_history"]


def test_idempotent_task_retries_after_uncertain_history(world: World) -> None:
    t = world.submit(idempotency="IDEMPOTENT", max_attempts=5, backoff={"initial_ms": 0})
    b = world.hello()
    aid, ep = world.run_once(b)
    world.finish(b, aid, ep, Outcome.UNKNOWN, code="HANDLER_ERROR")
    aid, ep = world.run_once(b)
    res, _ = world.finish(b, aid, ep, Outcome.FAILED, code="TEMPORARY_REJECTION", retryable=True)
    assert res.task_state == "PENDING"
    assert world.task(t["id"])["attempts"] == 2


def test_invalid_result_becomes_unknown_invalid_handler_result(world: World) -> None:
    b = world.hello()
    for bad in ("{", "[" * 40 + "]" * 40, "1" * 30, '"' + "x" * 300_000 + '"'):
        t = world.submit()
        aid, ep = world.run_once(b)
        res, _ = world.finish(b, aid, ep, Outcome.SUCCEEDED, result_json=bad)
        assert res.disposition == "ACCEPTED" and res.task_state == "NEEDS_REVIEW", bad
        (a,) = world.attempts(t["id"])
        assert (a["outcome"], a["code"]) == ("UNKNOWN", "INVALID_HANDLER_RESULT")
        assert world.task(t["id"])["result"] is None


def test_a_null_result_succeeds(world: World) -> None:
    # A handler that returned None: SUCCEEDED, its result JSON null, no failure.
    b = world.hello()
    t = world.submit()
    aid, ep = world.run_once(b)
    res, _ = world.finish(b, aid, ep, Outcome.SUCCEEDED, result_json="null")
    assert (res.disposition, res.task_state) == ("ACCEPTED", "SUCCEEDED")
    view = orjson.loads(orjson.dumps(world.task(t["id"])))  # as the HTTP answer reads
    assert (view["state"], view["result"], view["failure"]) == ("SUCCEEDED", None, None)
    assert "result" in view
    (a,) = world.attempts(t["id"])
    assert (a["outcome"], a["code"], a["decision"]) == ("SUCCEEDED", None, "SUCCEEDED")


# ------------------------------------------------------------------------ leases and fencing


def test_start_grants_min_of_ttl_timeout_deadline(world: World) -> None:
    world.submit(lease_ttl_ms=30_000, attempt_timeout_ms=10_000)
    b = world.hello()
    (r,) = world.service.workers.reserve(b, 1)
    assert world.start(b, r.attempt_id, r.epoch).lease_ms == 10_000
    world.submit(lease_ttl_ms=30_000, deadline_ms=4_000)
    (r,) = world.service.workers.reserve(b, 1)
    assert world.start(b, r.attempt_id, r.epoch).lease_ms == 4_000


def test_renew_extends_and_never_past_the_attempt_timeout(world: World) -> None:
    t = world.submit(lease_ttl_ms=3_000, attempt_timeout_ms=5_000)
    b = world.hello()
    aid, ep = world.run_once(b)
    world.clock.advance(1_000)
    assert world.renew(b, aid, ep).lease_ms == 3_000
    world.clock.advance(2_500)
    assert world.renew(b, aid, ep).lease_ms == 1_500  # shorter: attempt timeout at 5 s
    world.clock.advance(1_500)
    res = world.renew(b, aid, ep)
    assert not res.ok and res.error_code is ErrorCode.LEASE_EXPIRED
    assert world.attempts(t["id"])[0]["renewals"] == 2


def test_stale_epoch_and_other_instance_are_fenced(world: World) -> None:
    world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    res = world.renew(b, aid, ep + 1)
    assert not res.ok and res.error_code is ErrorCode.STALE_EPOCH
    intruder = world.hello()
    res = world.renew(intruder, aid, ep)
    assert not res.ok and res.error_code is ErrorCode.NOT_FOUND
    res, _ = world.finish(intruder, aid, ep, Outcome.SUCCEEDED, result={"x": 1})
    assert not res.ok and res.error_code is ErrorCode.NOT_FOUND
    res = world.start(b, "d" * 32, 1)
    assert not res.ok and res.error_code is ErrorCode.NOT_FOUND


def test_duplicate_start_answers_remaining_lease_without_extending(world: World) -> None:
    world.submit(lease_ttl_ms=10_000)
    b = world.hello()
    aid, ep = world.run_once(b)
    world.clock.advance(4_000)
    assert world.start(b, aid, ep).lease_ms == 6_000


def test_late_finish_after_lease_expiry_is_evidence_only(world: World) -> None:
    t = world.submit(lease_ttl_ms=1_000)
    b = world.hello()
    aid, ep = world.run_once(b)
    world.clock.advance(1_000)  # lease expires exactly now
    res, effects = world.finish(b, aid, ep, Outcome.SUCCEEDED, result={"late": True})
    assert res.ok and res.disposition == "EVIDENCE_ONLY" and not effects.terminal_tasks
    assert world.task(t["id"])["state"] == "RUNNING"  # the reaper decides, not the report
    (e,) = world.evidence(t["id"])
    assert e["reason"] == "LEASE_EXPIRED" and e["result"] == {"late": True}
    world.service.reaper.reap()
    view = world.task(t["id"])
    assert view["state"] == "NEEDS_REVIEW" and view["result"] is None
    (a,) = world.attempts(t["id"])
    assert (a["outcome"], a["code"]) == ("UNKNOWN", "LEASE_EXPIRED")


def test_evidence_never_clears_uncertainty(world: World) -> None:
    t = world.submit(idempotency="IDEMPOTENT", max_attempts=3, lease_ttl_ms=1_000,
                     backoff={"initial_ms": 0})
    b = world.hello()
    aid, ep = world.run_once(b)
    world.clock.advance(1_000)
    world.service.reaper.reap()  # UNKNOWN/LEASE_EXPIRED: idempotent, retry after the kill grace
    view = world.task(t["id"])
    assert view["state"] == "PENDING"
    assert view["next_attempt_at_ms"] == world.clock() + 2_000  # expiry + kill grace
    assert world.service.workers.reserve(b, 1) == []
    res, _ = world.finish(b, aid, ep, Outcome.SUCCEEDED, result={"ok": 1})
    assert res.disposition == "EVIDENCE_ONLY" and res.task_state == "PENDING"
    world.clock.advance(2_000)
    aid2, ep2 = world.run_once(b)
    # A stale finish for the first attempt is still evidence (stale epoch for the new one).
    res, _ = world.finish(b, aid, ep, Outcome.SUCCEEDED, result={"ok": 2})
    assert res.disposition == "EVIDENCE_ONLY"
    reasons = [e["reason"] for e in world.evidence(t["id"])]
    assert reasons == ["ATTEMPT_FINISHED", "ATTEMPT_FINISHED"]
    with world.engine.connect() as conn:
        uncertain = conn.execute(text("SELECT uncertain FROM tasks WHERE id = :id"),
                                 {"id": t["id"]}).scalar_one()
    assert uncertain == 1
    res, _ = world.finish(b, aid2, ep2, Outcome.SUCCEEDED, result={"ok": 3})
    assert res.disposition == "ACCEPTED"
    assert as_json(world.task(t["id"])["result"]) == {"ok": 3}


def test_finish_with_wrong_epoch_is_evidence(world: World) -> None:
    t = world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    res, _ = world.finish(b, aid, ep + 5, Outcome.FAILED, code="X")
    assert res.disposition == "EVIDENCE_ONLY"
    assert world.evidence(t["id"])[0]["reason"] == "STALE_EPOCH"
    assert world.task(t["id"])["state"] == "RUNNING"


# ------------------------------------------------------------------------ receipts


def test_receipts_replay_the_answer_and_apply_once(world: World) -> None:
    t = world.submit(idempotency="IDEMPOTENT", backoff={"initial_ms": 0})
    b = world.hello()
    (r,) = world.service.workers.reserve(b, 1)
    first = world.start(b, r.attempt_id, r.epoch, msg="s1")
    world.clock.advance(10_000)
    again = world.start(b, r.attempt_id, r.epoch, msg="s1")
    assert first.lease_ms is not None
    assert again.ok and again.lease_ms == first.lease_ms - 10_000  # never longer on replay
    res1, _ = world.finish(b, r.attempt_id, r.epoch, Outcome.UNKNOWN, code="HANDLER_ERROR",
                           msg="f1")
    res2, effects = world.finish(b, r.attempt_id, r.epoch, Outcome.UNKNOWN,
                                 code="HANDLER_ERROR", msg="f1")
    assert res1 == res2 and not effects.terminal_tasks and not effects.ready_queues
    assert len(world.attempts(t["id"])) == 1
    assert world.task(t["id"])["attempts"] == 1
    reused = world.renew(b, r.attempt_id, r.epoch, msg="f1")
    assert not reused.ok and reused.error_code is ErrorCode.MESSAGE_ID_REUSED
    # Receipts are per instance: another instance may use the same msg_id.
    other = world.hello()
    res = world.renew(other, r.attempt_id, r.epoch, msg="f1")
    assert res.error_code is ErrorCode.NOT_FOUND


def test_replayed_start_after_lease_end_is_lease_expired(world: World) -> None:
    world.submit(lease_ttl_ms=1_000)
    b = world.hello()
    (r,) = world.service.workers.reserve(b, 1)
    assert world.start(b, r.attempt_id, r.epoch, msg="s").ok
    world.clock.advance(1_000)
    res = world.start(b, r.attempt_id, r.epoch, msg="s")
    assert not res.ok and res.error_code is ErrorCode.LEASE_EXPIRED


def test_batch_of_ops_in_one_request(world: World) -> None:
    made, _ = world.service.tasks.submit(world.producer, world.queue_id,
                                   [world.spec(payload=i) for i in range(100)])
    b = world.hello()
    res = world.service.workers.reserve(b, 100)
    assert len(res) == 100
    starts = [StartOp(f"s{i}", r.attempt_id, r.epoch) for i, r in enumerate(res)]
    results, _ = world.service.workers.apply_ops(b, starts)
    assert all(x.ok for x in results)
    finishes = [FinishOp(f"f{i}", r.attempt_id, r.epoch, Outcome.SUCCEEDED,
                         result_json=str(i)) for i, r in enumerate(res)]
    # Start-then-finish in the same request also works (records are shared in the batch).
    results, effects = world.service.workers.apply_ops(b, [*finishes, DrainOp("d1")])
    assert all(x.ok and x.disposition == "ACCEPTED" for x in results[:-1])
    assert results[-1].ok and len(effects.terminal_tasks) == 100
    stats = world.service.tasks.queue_stats(world.producer, world.queue_id)
    assert stats["counts"]["SUCCEEDED"] == 100 and stats["running_attempts"] == 0
    assert {world.task(t["id"])["state"] for t, _ in made} == {"SUCCEEDED"}


def test_start_and_finish_in_one_request(world: World) -> None:
    t = world.submit()
    b = world.hello()
    (r,) = world.service.workers.reserve(b, 1)
    results, _ = world.service.workers.apply_ops(b, [
        StartOp("a", r.attempt_id, r.epoch), RenewOp("b", r.attempt_id, r.epoch),
        FinishOp("c", r.attempt_id, r.epoch, Outcome.SUCCEEDED, result_json="1"),
        FinishOp("c", r.attempt_id, r.epoch, Outcome.SUCCEEDED, result_json="1"),
    ])
    assert [x.ok for x in results] == [True, True, True, True]
    assert results[2] == results[3]
    assert world.task(t["id"])["state"] == "SUCCEEDED"


# ------------------------------------------------------------------------ release and resume


def test_release_returns_unstarted_reservations_without_spending(world: World) -> None:
    t = world.submit()
    started = world.submit()
    b = world.hello()
    # Tasks submitted in the same millisecond come back in no fixed order on every engine.
    res = sorted(world.service.workers.reserve(b, 2), key=lambda r: r.task_id != t["id"])
    assert world.start(b, res[1].attempt_id, res[1].epoch).ok
    effects = world.service.workers.release_reservations(b.instance_id)
    assert effects.ready_queues == {world.queue_id}
    view = world.task(t["id"])
    assert view["state"] == "PENDING" and view["attempts"] == 0 and view["epoch"] == 1
    assert world.task(started["id"])["state"] == "RUNNING"
    (a,) = world.attempts(t["id"])
    assert a["state"] == "RELEASED" and a["decision"] == "RELEASED"
    res2 = world.start(b, res[0].attempt_id, res[0].epoch)
    assert not res2.ok and res2.error_code is ErrorCode.LEASE_EXPIRED
    (again,) = world.service.workers.reserve(b, 5)
    assert again.task_id == t["id"] and again.epoch == 2 and again.attempt_number == 1


def test_resume_reports_running_or_lost(world: World) -> None:
    world.submit(lease_ttl_ms=10_000)
    world.clock.advance(1)  # FIFO by available_at; ties have no order on every engine
    world.submit(lease_ttl_ms=1_000)
    b = world.hello()
    (r1,) = world.service.workers.reserve(b, 1)
    (r2,) = world.service.workers.reserve(b, 1)
    world.start(b, r1.attempt_id, r1.epoch)
    world.start(b, r2.attempt_id, r2.epoch)
    world.clock.advance(2_000)
    refs = (AttemptRef(r1.attempt_id, r1.epoch), AttemptRef(r2.attempt_id, r2.epoch),
            AttemptRef(r1.attempt_id, r1.epoch + 1), AttemptRef("e" * 32, 1))
    (out,), _ = world.service.workers.apply_ops(b, [ResumeOp("r1", refs)])
    assert out.ok and out.attempts is not None
    statuses = [(e.status, e.lease_ms, e.reason) for e in out.attempts]
    assert statuses == [("RUNNING", 8_000, None), ("LOST", None, "LEASE_EXPIRED"),
                        ("LOST", None, "STALE_EPOCH"), ("LOST", None, "NOT_FOUND")]


def test_start_after_task_deadline_ends_the_task(world: World) -> None:
    t = world.submit(deadline_ms=1_000)
    b = world.hello()
    (r,) = world.service.workers.reserve(b, 1)
    world.clock.advance(1_000)
    res = world.start(b, r.attempt_id, r.epoch)
    assert not res.ok and res.error_code is ErrorCode.LEASE_EXPIRED
    view = world.task(t["id"])
    assert view["state"] == "FAILED" and view["failure"]["code"] == "DEADLINE_EXCEEDED"
