"""Two servers' reapers over one database at the same moment (two Services, two engines, two
threads): every lapsed lease is expired exactly once, with one audit entry, and neither pass
fails (on MySQL/MariaDB the scans skip rows the other reaper holds)."""

from __future__ import annotations

import random
import threading

from sqlalchemy import func, select
from store_support import CAP, World

from orbit_server.services import Effects, Services
from orbit_server.store import create_engine_for
from orbit_server.store.tables import attempts, audit


def test_two_reapers_expire_each_lease_once(world: World) -> None:
    specs: list[object] = [
        {"handler": CAP.handler, "handler_version": CAP.handler_version,
         "payload_version": CAP.payload_version, "payload": {"i": i},
         "idempotency": "IDEMPOTENT", "lease_ttl_ms": 1_000}
        for i in range(200)
    ]
    world.service.tasks.submit(world.producer, world.queue_id, specs)
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
    other_engine = create_engine_for(world.url)
    other = Services(other_engine, world.service.tx.config, world.clock, random.Random(3))
    results: list[Effects] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(2)

    def reap(svc: Services) -> None:
        try:
            gate.wait(timeout=10)
            for _ in range(5):  # bounded: each pass may leave rows the other one held
                results.append(svc.reaper.reap())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reap, args=(s,)) for s in (world.service, other)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=60)
        assert not any(th.is_alive() for th in threads)
    finally:
        other_engine.dispose()
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
