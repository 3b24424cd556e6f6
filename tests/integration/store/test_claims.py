"""The ``claim`` op at the service level, on both stores: several claims in one request (a
resent claim beside a new one) start different tasks, and a claim after a finish in the
same transaction never picks the task that finish just put back."""

from __future__ import annotations

from store_support import World

from orbit_server.service import ClaimRoom
from orbit_wire.frames import ClaimOp, FinishOp, Report
from orbit_wire.model import Outcome

ROOM = ClaimRoom(True, 8)


def test_two_claims_in_one_request_start_different_tasks(world: World) -> None:
    submitted = {world.submit()["id"] for _ in range(5)}
    b = world.hello()
    results, _ = world.service.apply_ops(b, [ClaimOp(world.msg(), 2), ClaimOp(world.msg(), 2)],
                                         ROOM)
    assert all(r.ok for r in results)
    claimed = [r.task_id for result in results for r in result.claimed or ()]
    assert len(claimed) == 4 and len(set(claimed)) == 4 and set(claimed) <= submitted
    for task_id in claimed:
        assert world.task(task_id)["state"] == "RUNNING"
    # The fifth is still there for the next claim; then the queue is empty (credit).
    (last,), _ = world.service.apply_ops(b, [ClaimOp(world.msg(), 2)], ROOM)
    assert [r.task_id for r in last.claimed or ()] == list(submitted - set(claimed))
    assert last.credited == 1


def test_a_retried_task_is_not_claimed_in_its_finishing_request(world: World) -> None:
    task = world.submit(idempotency="IDEMPOTENT", backoff={"initial_ms": 0, "max_ms": 0,
                                                            "multiplier": 1.0, "jitter": 0.0})
    b = world.hello()
    attempt_id, epoch = world.run_once(b)
    crash = FinishOp(world.msg(), attempt_id, epoch, Outcome.UNKNOWN, "HANDLER_CRASHED",
                     report=Report(signal=9))
    (done, claim), _ = world.service.apply_ops(b, [crash, ClaimOp(world.msg(), 1)], ROOM)
    assert done.ok and claim.ok and claim.claimed == ()  # still RUNNING when the claim looked
    assert world.task(task["id"])["state"] == "PENDING"  # retried: the next claim gets it
    (again,), _ = world.service.apply_ops(b, [ClaimOp(world.msg(), 1)], ROOM)
    assert [r.task_id for r in again.claimed or ()] == [task["id"]]
