"""The ``claim`` op at the service level, on both stores: several claims in one request (a
resent claim beside a new one) start different tasks, and a claim after a finish in the
same transaction never picks the task that finish just put back."""

from __future__ import annotations

from store_support import World

from orbit_server.services import ClaimRoom
from orbit_wire.frames import ClaimOp, FinishOp, Progress, RenewOp, Report
from orbit_wire.limits import MAX_PAYLOAD_BYTES_PER_FRAME
from orbit_wire.model import Outcome

ROOM = ClaimRoom(True, 8)


def test_two_claims_in_one_request_start_different_tasks(world: World) -> None:
    submitted = {world.submit()["id"] for _ in range(5)}
    b = world.hello()
    results, _ = world.service.workers.apply_ops(
        b, [ClaimOp(world.msg(), 2), ClaimOp(world.msg(), 2)], ROOM)
    assert all(r.ok for r in results)
    claimed = [r.task_id for result in results for r in result.claimed or ()]
    assert len(claimed) == 4 and len(set(claimed)) == 4 and set(claimed) <= submitted
    for task_id in claimed:
        assert world.task(task_id)["state"] == "RUNNING"
    # The fifth is still there for the next claim; then the queue is empty (credit).
    (last,), _ = world.service.workers.apply_ops(b, [ClaimOp(world.msg(), 2)], ROOM)
    assert [r.task_id for r in last.claimed or ()] == list(submitted - set(claimed))
    assert last.credited == 1


def test_a_retried_task_is_not_claimed_in_its_finishing_request(world: World) -> None:
    task = world.submit(idempotency="IDEMPOTENT", backoff={"initial_ms": 0, "max_ms": 0,
                                                            "multiplier": 1.0, "jitter": 0.0})
    b = world.hello()
    attempt_id, epoch = world.run_once(b)
    crash = FinishOp(world.msg(), attempt_id, epoch, Outcome.UNKNOWN, "HANDLER_CRASHED",
                     report=Report(signal=9))
    (done, claim), _ = world.service.workers.apply_ops(b, [crash, ClaimOp(world.msg(), 1)], ROOM)
    assert done.ok and claim.ok and claim.claimed == ()  # still RUNNING when the claim looked
    assert world.task(task["id"])["state"] == "PENDING"  # retried: the next claim gets it
    (again,), _ = world.service.workers.apply_ops(b, [ClaimOp(world.msg(), 1)], ROOM)
    assert [r.task_id for r in again.claimed or ()] == [task["id"]]


def test_reservations_stop_at_the_frames_payload_budget(world: World) -> None:
    # Seven tasks of 200 KiB: a frame's reservations may carry 1 MiB of payloads, so a
    # claim (whose answer is one frame) and a reserve (one reserve frame) take five each,
    # and say that more work is ready (the dispatcher claims again instead of waiting).
    big = "x" * (200 * 1024)
    ids = [world.submit(payload={"text": big})["id"] for _ in range(7)]
    assert MAX_PAYLOAD_BYTES_PER_FRAME == 1024 * 1024
    b = world.hello()
    (claim,), effects = world.service.workers.apply_ops(b, [ClaimOp(world.msg(), 7)],
                                                        ClaimRoom(True, 8))
    assert claim.ok and len(claim.claimed or ()) == 5 and claim.credited == 2
    assert effects.ready_queues == {world.queue_id}  # a hint: the queue is not empty
    reserved = world.service.workers.reserve(b, 7)
    assert len(reserved) == 2 and not reserved.more  # the queue is empty now
    claimed = [r.task_id for r in claim.claimed or ()] + [r.task_id for r in reserved]
    assert sorted(claimed) == sorted(ids)


def test_one_reservation_always_fits_and_reserve_says_when_more_are_ready(
        world: World) -> None:
    big = "y" * (250 * 1024)
    for _ in range(6):
        world.submit(payload={"text": big})
    b = world.hello()
    first = world.service.workers.reserve(b, 6)
    assert len(first) == 4 and first.more  # 4 x 250 KiB fit in 1 MiB, the fifth does not
    second = world.service.workers.reserve(b, 6)
    assert len(second) == 2 and not second.more
    # A small task after big ones is not held back by the budget.
    world.submit(payload={"text": "small"})
    assert len(world.service.workers.reserve(b, 6)) == 1


def test_claims_in_one_request_share_the_answers_payload_budget(world: World) -> None:
    big = "z" * (250 * 1024)
    for _ in range(6):
        world.submit(payload={"text": big})
    b = world.hello()
    first, second = world.service.workers.apply_ops(
        b, [ClaimOp(world.msg(), 3), ClaimOp(world.msg(), 3)], ClaimRoom(True, 8))[0]
    # 4 x 250 KiB fit in the response's 1 MiB; the second claim gets the fourth only.
    assert len(first.claimed or ()) == 3 and len(second.claimed or ()) == 1
    assert second.credited == 2


def test_checkpoints_count_in_the_frames_payload_budget(world: World) -> None:
    # Twenty small tasks, each retried after its attempt left 60 KiB of progress details:
    # their checkpoints ride in the reservations, so a frame (1 MiB of payloads and
    # checkpoints) takes seventeen and says more are ready; every checkpoint arrives whole.
    no_backoff = {"initial_ms": 0, "max_ms": 0, "multiplier": 1.0, "jitter": 0.0}
    ids = {world.submit(idempotency="IDEMPOTENT", backoff=no_backoff)["id"] for _ in range(20)}
    b = world.hello()
    details = '{"rows": "' + "r" * (60 * 1024) + '"}'
    taken = world.service.workers.reserve(b, 20)
    assert {r.task_id for r in taken} == ids and all(r.checkpoint is None for r in taken)
    for res in taken:
        attempt_id, epoch = res.attempt_id, res.epoch
        assert world.start(b, attempt_id, epoch).ok
        results, _ = world.service.workers.apply_ops(b, [
            RenewOp(world.msg(), attempt_id, epoch, progress=Progress(0.5, details)),
            FinishOp(world.msg(), attempt_id, epoch, Outcome.UNKNOWN, "HANDLER_CRASHED",
                     report=Report(signal=9))])
        assert all(r.ok for r in results), results
    first = world.service.workers.reserve(b, 20)
    assert len(first) == 17 and first.more  # 17 x 61 KiB fit in 1 MiB, the 18th does not
    second = world.service.workers.reserve(b, 20)
    assert len(second) == 3 and not second.more
    assert {r.task_id for r in [*first, *second]} == ids
    assert all(r.attempt_number == 2 and bytes(r.checkpoint) == details.encode()
               for r in [*first, *second])
