"""Two servers' reapers over one database at the same moment (two Services, two engines, two
threads): every lapsed lease is expired exactly once, with one audit entry, and neither pass
fails (on MySQL/MariaDB the scans skip rows the other reaper holds)."""

from __future__ import annotations

from sqlalchemy import func, select
from store_support import World

from orbit_server.services import Effects, Services
from orbit_server.store.tables import attempts, audit


def test_two_reapers_expire_each_lease_once(world: World) -> None:
    world.submit_many(200, idempotency="IDEMPOTENT", lease_ttl_ms=1_000)
    b = world.hello()
    started = 0
    for _ in range(10):  # bounded
        got = world.service.workers.reserve(b, 100)
        if not got:
            break
        for r in got:
            assert world.start(b, r.attempt_id, r.epoch).ok
            started += 1
    assert started == 200
    world.clock.advance(5_000)
    results: list[Effects] = []

    def reap(svc: Services) -> None:
        for _ in range(5):  # bounded: each pass may leave rows the other one held
            results.append(svc.reaper.reap())

    with world.other_service(3) as other:
        errors = world.race(lambda: reap(world.service), lambda: reap(other))
    assert not errors, errors
    with world.engine.connect() as conn:
        states = dict(conn.execute(select(attempts.c.state, func.count())
                                   .group_by(attempts.c.state)).all())
        assert states == {"FINISHED": 200}
        codes = dict(conn.execute(select(attempts.c.code, func.count())
                                  .group_by(attempts.c.code)).all())
        assert codes == {"LEASE_EXPIRED": 200}
        per_attempt = conn.execute(
            select(audit.c.attempt_id, func.count()).where(audit.c.kind == "attempt_finished")
            .group_by(audit.c.attempt_id)).all()
    assert len(per_attempt) == 200 and all(n == 1 for _, n in per_attempt)
    counts = world.service.tasks.queue_stats(world.producer, world.queue_id)["counts"]
    assert counts["PENDING"] == 200  # idempotent: each goes back for a retry, once
