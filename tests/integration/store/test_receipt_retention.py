"""Receipts past the retention are deleted oldest first, a bounded batch per transaction, and
an op resent after its receipt is gone is answered from the attempt's state, never applied
twice (on a real SQLite file and on MariaDB)."""

from __future__ import annotations

from sqlalchemy import select
from store_support import World, as_json

from orbit_server.store.rows import INSERT_RECEIPT
from orbit_server.store.tables import receipts
from orbit_wire.model import Disposition, Outcome

HOUR = 3_600_000


def _created(world: World) -> list[int]:
    with world.engine.connect() as conn:
        return list(conn.scalars(select(receipts.c.created_at_ms)
                                 .order_by(receipts.c.created_at_ms)))


def test_old_receipts_go_oldest_first_in_batches_fresh_ones_stay(world: World) -> None:
    retention = world.service.tx.config.receipt_retention_ms
    batch = world.service.tx.config.reap_batch
    assert (retention, batch) == (24 * HOUR, 1_000)  # the defaults
    cutoff = world.clock() - retention
    # 2,500 receipts past the retention, one per millisecond, except that the 999th to the
    # 1,003rd share one millisecond; 10 younger than the retention.
    old_at = [cutoff - 10_000 + min(i, 998) if i < 1003 else cutoff - 10_000 + i
              for i in range(2_500)]
    fresh_at = [cutoff + i for i in range(10)]  # exactly the retention old: kept
    with world.engine.begin() as conn:
        INSERT_RECEIPT.run(conn, [world.receipt_row(f"old-{i}", at_ms=at, instance_id="f" * 32)
                                  for i, at in enumerate(old_at + fresh_at)])

    # First batch: up to the 1,000th oldest, and the rows sharing its millisecond.
    assert world.service.reaper.prune_receipts() == 1_003
    assert _created(world) == sorted(old_at[1_003:] + fresh_at)
    assert world.service.reaper.prune_receipts() == 1_000
    assert world.service.reaper.prune_receipts() == 497  # fewer than a batch: none left
    assert _created(world) == fresh_at
    assert world.service.reaper.prune_receipts() == 0
    world.clock.advance(5)  # the five oldest fresh ones pass the retention
    assert world.service.reaper.prune_receipts() == 5
    assert _created(world) == fresh_at[5:]


def test_a_resend_after_its_receipt_was_pruned_is_answered_and_applied_once(
        world: World) -> None:
    t = world.submit()
    b = world.hello()
    (r,) = world.service.workers.reserve(b, 1)
    assert world.start(b, r.attempt_id, r.epoch, msg="s1").ok
    first, _ = world.finish(b, r.attempt_id, r.epoch, Outcome.SUCCEEDED, result={"n": 1},
                            msg="f1")
    assert first.ok and first.disposition is Disposition.ACCEPTED

    world.clock.advance(world.service.tx.config.receipt_retention_ms + 1)
    assert world.service.reaper.prune_receipts() >= 2  # this instance's start and finish
    assert world.count(receipts) == 0

    # The same finish again: no receipt, so it is decided anew, and the attempt is closed.
    again, effects = world.finish(b, r.attempt_id, r.epoch, Outcome.SUCCEEDED,
                                  result={"n": 2}, msg="f1")
    assert again.ok and again.disposition is Disposition.EVIDENCE_ONLY
    assert not effects.terminal_tasks and not effects.ready_queues
    task = as_json(world.task(t["id"]))
    assert task["state"] == "SUCCEEDED" and task["attempts"] == 1
    assert task["result"] == {"n": 1}
    # The same start again: refused, so no worker runs the handler a second time.
    restart = world.start(b, r.attempt_id, r.epoch, msg="s1")
    assert not restart.ok
