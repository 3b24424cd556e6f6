"""Finding 1 of the security review: revocation reaches live worker sessions.

A worker connected before its credential was revoked is closed (fatal UNAUTHENTICATED,
close 4006) within one heartbeat, and its lease is fenced: a start, renew or finish sent
after the revocation is not accepted. A rotated secret keeps working for its grace period
only; an expired credential is refused. Both stores.
"""

from __future__ import annotations

import contextlib
import time

from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect, expect_error, task_spec
from support.protocol_client import ECHO, ProtocolClient
from support.waiting import UNIT, wait_until

from orbit_wire.frames import FinishOp, Hello, RenewOp, Request
from orbit_wire.model import Outcome


async def test_revocation_closes_the_live_session_and_fences_its_lease(orbit: OrbitEnv,
                                                                      lane: Lane) -> None:
    task = lane.submit(max_attempts=1, lease_ttl_ms=30_000)
    wc = await lane.connect(credit=1)
    try:
        heartbeat_s = (wc.welcome.heartbeat_ms if wc.welcome else 1000) / 1000
        [res] = await wc.reservations(1)
        assert (await wc.start(res)).ok
        expect(orbit.admin_http.delete(f"/v1/credentials/{lane.worker.credential_id}"), 200)
        # Whatever the revoked session still sends is not taken (the store tests check the
        # fence itself: services.workers refuses the request whole).
        with contextlib.suppress(Exception):
            await wc.send(Request(10_000, (
                RenewOp(wc.msg_id(), res.attempt_id, res.epoch),
                FinishOp(wc.msg_id(), res.attempt_id, res.epoch, Outcome.SUCCEEDED,
                         result_json='{"stolen": true}'))))
        code = await wc.wait_closed(timeout=heartbeat_s + 1)
        assert code == 4006, code
        error = await wc.error(timeout=1)
        assert error.code == "UNAUTHENTICATED" and error.fatal
    finally:
        await wc.close()
    view = lane.task(task["id"])
    assert view["state"] == "RUNNING" and view["result"] is None, view
    # A new hello is refused too.
    again = await ProtocolClient.connect(lane.ws_url)
    try:
        await again.send(Hello(lane.worker.credential_id, lane.worker.secret,
                               again.instance_id, again.instance_secret, lane.queue, (ECHO,), 1))
        assert await again.expect_fatal("UNAUTHENTICATED") == 4006
    finally:
        await again.close()


def test_rotation_grace_and_expiry(orbit: OrbitEnv, lane: Lane) -> None:
    made = orbit.credential("producer", [lane.queue], name="rotating")
    old = orbit.client(f"{made['credential_id']}.{made['secret']}")
    expect(old.post(f"/v1/queues/{lane.queue}/tasks", json=task_spec()), 201)
    grace_ms = int(1500 * UNIT)
    rotated = expect(orbit.admin_http.post(f"/v1/credentials/{made['credential_id']}/rotate",
                                           json={"grace_ms": grace_ms}), 200)
    assert rotated["secret"] != made["secret"] and rotated["previous_secret_until_ms"]
    new = orbit.client(f"{made['credential_id']}.{rotated['secret']}")
    expect(new.post(f"/v1/queues/{lane.queue}/tasks", json=task_spec()), 201)
    expect(old.post(f"/v1/queues/{lane.queue}/tasks", json=task_spec()), 201)  # grace
    wait_until(lambda: old.get(f"/v1/queues/{lane.queue}/stats").status_code == 401,
               timeout=grace_ms / 1000 / UNIT + 10, interval=0.1,
               what="the rotated-out secret to be refused after its grace period")
    expect(new.get(f"/v1/queues/{lane.queue}/stats"), 200)
    # Listed without secrets, with last use and the rotation's grace end.
    listed = expect(orbit.admin_http.get("/v1/credentials"), 200)["credentials"]
    mine = next(c for c in listed if c["credential_id"] == made["credential_id"])
    assert mine["last_used_at_ms"] and mine["previous_secret_until_ms"]
    assert "secret" not in mine and made["secret"] not in str(listed)
    # Expiry: refused from the instant on.
    expires = time.time_ns() // 1_000_000 + int(1000 * UNIT)
    short = orbit.credential_with(role="producer", queues=[lane.queue], expires_at_ms=expires)
    client = orbit.client(f"{short['credential_id']}.{short['secret']}")
    expect(client.get(f"/v1/queues/{lane.queue}/stats"), 200)
    wait_until(lambda: client.get(f"/v1/queues/{lane.queue}/stats").status_code == 401,
               timeout=15, interval=0.1, what="the expired credential to be refused")
    expect_error(client.get(f"/v1/queues/{lane.queue}/stats"), 401, "UNAUTHENTICATED")
