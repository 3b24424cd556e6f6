"""Every HTTP route of the task and credential API with every kind of principal: none, a
malformed token, a wrong secret, a revoked credential, a worker, a producer of another
queue, the queue's producer and an admin. Each answer is the allowed one or the typed
refusal (401, 403 for a role, 404 for another queue, exactly as for a missing one), and a
refusal changes nothing. Then every client frame and op type of the worker WebSocket
(hello, heartbeat, credit, and resume, start, renew, finish, drain, claim in a request)
with every principal: no hello, a malformed, wrong or revoked credential, a producer, an
admin, another queue's worker (refused at hello for this queue, and in a session of its
own queue unable to reach this queue's attempt) and the queue's own worker (allowed).
Both stores."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import websockets
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect, http_client, task_spec
from support.protocol_client import ECHO, ProtocolClient, random_instance
from support.server import ServerProcess

from orbit_wire.frames import (
    AttemptRef,
    ClaimOp,
    ClientFrame,
    Credit,
    DrainOp,
    FinishOp,
    Heartbeat,
    Hello,
    Op,
    RenewOp,
    Request,
    Reservation,
    ResumeOp,
    StartOp,
)
from orbit_wire.model import Outcome

ADMIN_ONLY = {"create_queue", "create_credential", "list_credentials", "rotate", "revoke"}


def _routes(queue: str, task: str, cred: str) -> dict[str, tuple[str, str, Any]]:
    return {
        "create_queue": ("POST", "/v1/queues", {}),
        "stats": ("GET", f"/v1/queues/{queue}/stats", None),
        "throughput": ("GET", f"/v1/queues/{queue}/throughput", None),
        "me": ("GET", "/v1/me", None),
        "create_credential": ("POST", "/v1/credentials", {"role": "producer", "queues": [queue]}),
        "list_credentials": ("GET", "/v1/credentials", None),
        "rotate": ("POST", f"/v1/credentials/{cred}/rotate", {"grace_ms": 0}),
        "revoke": ("DELETE", f"/v1/credentials/{cred}", None),
        "submit": ("POST", f"/v1/queues/{queue}/tasks", task_spec()),
        "batch": ("POST", f"/v1/queues/{queue}/tasks/batch", {"tasks": [task_spec()]}),
        "get": ("GET", f"/v1/tasks/{task}", None),
        "attempts": ("GET", f"/v1/tasks/{task}/attempts", None),
        "audit": ("GET", f"/v1/tasks/{task}/audit", None),
        "review": ("POST", f"/v1/tasks/{task}/review", {"action": "retry"}),
        "cancel": ("POST", f"/v1/tasks/{task}/cancel", {}),
    }


def _expected(principal: str, route: str) -> set[int]:
    if principal in ("none", "malformed", "wrong", "revoked"):
        return {401}
    if principal == "worker":
        return {403}
    if route in ADMIN_ONLY:
        return {403} if principal != "admin" else {200, 201}
    if principal == "stranger":
        return {200} if route == "me" else {404}  # itself, but no other queue
    if route == "review":
        return {409}  # allowed, but the task is not in NEEDS_REVIEW
    return {200, 201}


@contextlib.contextmanager
def _lane_env(server_factory: Callable[..., ServerProcess]) -> Iterator[tuple[OrbitEnv, Lane]]:
    # The failed-authentication limit off: every refusal here must be the plain one
    # (test_security_limits.py tests the limit).
    srv = server_factory(extra_args=("--auth-failures-per-s", "0"))
    admin = srv.bootstrap_admin()
    with http_client(srv.url, admin.bearer) as admin_http:
        orbit = OrbitEnv(srv, admin, admin_http)
        try:
            yield orbit, Lane.open(orbit)
        finally:
            orbit.close()


def test_every_route_with_every_principal(
        server_factory: Callable[..., ServerProcess]) -> None:
    with _lane_env(server_factory) as (orbit, lane):
        _matrix(orbit, lane)


def _matrix(orbit: OrbitEnv, lane: Lane) -> None:
    stranger_queue = orbit.queue()
    revoked = orbit.credential("producer", [lane.queue])
    expect(orbit.admin_http.delete(f"/v1/credentials/{revoked['credential_id']}"), 200)
    worker = lane.worker
    principals: dict[str, httpx.Client] = {
        "none": orbit.client(),
        "malformed": orbit.client("x.y"),
        "wrong": orbit.client(f"{revoked['credential_id']}.{'0' * 64}"),
        "revoked": orbit.client(f"{revoked['credential_id']}.{revoked['secret']}"),
        "worker": orbit.client(worker.bearer),
        "stranger": orbit.producer(stranger_queue),
        "producer": lane.producer,
        "admin": orbit.admin_http,
    }
    order = ["none", "malformed", "wrong", "revoked", "worker", "stranger", "producer", "admin"]
    for principal in order:
        client = principals[principal]
        # A fresh target per principal: an allowed cancel or revoke must not hide the next.
        task = lane.submit()
        target = orbit.credential("producer", [lane.queue])["credential_id"]
        before = (lane.task(task["id"]), len(lane.audit(task["id"])))
        for route, (method, path, body) in _routes(lane.queue, task["id"], target).items():
            answer = client.request(method, path, json=body)
            wanted = _expected(principal, route)
            assert answer.status_code in wanted, (principal, route, answer.text[:300])
            assert "Traceback" not in answer.text
            if answer.status_code >= 400:
                assert answer.json()["error"]["code"], answer.text
        if principal not in ("producer", "admin"):
            # Every refusal left the task, its audit and the target credential as they were.
            assert (lane.task(task["id"]), len(lane.audit(task["id"]))) == before, principal
            listed = expect(orbit.admin_http.get("/v1/credentials"), 200)["credentials"]
            mine = next(c for c in listed if c["credential_id"] == target)
            assert mine["revoked_at_ms"] is None and mine["previous_secret_until_ms"] is None


# ---------------------------------------------------------------- the worker WebSocket

FRAMES = ("hello", "heartbeat", "credit", "resume", "start", "renew", "finish", "drain",
          "claim")
# What a hello from each principal that may not open a session gets (fatal, then closed).
HELLO_REFUSED = {
    "malformed": {"UNAUTHENTICATED", "BAD_FRAME"},
    "wrong": {"UNAUTHENTICATED"},
    "revoked": {"UNAUTHENTICATED"},
    "producer": {"PERMISSION_DENIED"},
    "admin": {"PERMISSION_DENIED"},
    # Another queue's worker: refused by scope, the same for a queue that does not exist.
    "stranger": {"PERMISSION_DENIED"},
}


def _frame(kind: str, wc: ProtocolClient, res: Reservation) -> ClientFrame:
    """One client frame of ``kind``; the ops aim at the lane worker's reservation."""
    ops: dict[str, Op] = {
        "resume": ResumeOp(wc.msg_id(), (AttemptRef(res.attempt_id, res.epoch),)),
        "start": StartOp(wc.msg_id(), res.attempt_id, res.epoch),
        "renew": RenewOp(wc.msg_id(), res.attempt_id, res.epoch),
        "finish": FinishOp(wc.msg_id(), res.attempt_id, res.epoch, Outcome.SUCCEEDED,
                           result_json='{"stolen": true}'),
        "drain": DrainOp(wc.msg_id()),
        "claim": ClaimOp(wc.msg_id(), 4),
    }
    if kind == "heartbeat":
        return Heartbeat()
    if kind == "credit":
        return Credit(4)
    return Request(1, (ops[kind],))


async def _refused_session(ws_url: str, hello: Hello | None, kind: str,
                           res: Reservation) -> str:
    """A connection that may not open a session: its hello (if any) and then one frame of
    ``kind`` sent at once; returns the fatal error's code (the connection is closed)."""
    wc = await ProtocolClient.connect(ws_url)
    try:
        if hello is not None:
            await wc.send(hello)
        if kind != "hello":
            with contextlib.suppress(websockets.ConnectionClosed):
                await wc.send(_frame(kind, wc, res))
        error = await wc.error()
        assert error.fatal, error
        assert await wc.wait_closed() is not None
        assert wc.reserved.empty() and wc.responses.empty() and wc.welcomes.empty()
        return str(error.code)
    finally:
        await wc.close()


async def test_every_frame_type_with_every_principal(
        server_factory: Callable[..., ServerProcess]) -> None:
    with _lane_env(server_factory) as (orbit, lane):
        await _frame_matrix(orbit, lane)


async def _frame_matrix(orbit: OrbitEnv, lane: Lane) -> None:
    other_queue = orbit.queue()
    stranger = orbit.worker_credential(other_queue)
    orbit.producer(other_queue).post(f"/v1/queues/{other_queue}/tasks", json=task_spec())
    revoked = orbit.worker_credential(lane.queue)
    expect(orbit.admin_http.delete(f"/v1/credentials/{revoked.credential_id}"), 200)
    producer = orbit.credential("producer", [lane.queue])
    task = lane.submit()
    async with await lane.connect(credit=1) as owner:
        [res] = await owner.reservations(1)
        before = (lane.task(task["id"]), len(lane.audit(task["id"])))

        def hello(credential_id: str, secret: str, queue: str = lane.queue) -> Hello:
            iid, isecret = random_instance()
            return Hello(credential_id, secret, iid, isecret, queue, (ECHO,), 2)

        hellos: dict[str, Hello | None] = {
            "none": None,
            "malformed": hello("x", "y"),
            "wrong": hello(lane.worker.credential_id, "0" * 43),
            "revoked": hello(revoked.credential_id, revoked.secret),
            "producer": hello(producer["credential_id"], producer["secret"]),
            "admin": hello(orbit.admin.credential_id, orbit.admin.secret),
            "stranger": hello(stranger.credential_id, stranger.secret),
        }
        missing = hello(stranger.credential_id, stranger.secret, "f" * 32)
        for target in (missing, hellos["stranger"]):
            assert await _refused_session(lane.ws_url, target, "hello", res) == (
                "PERMISSION_DENIED")
        for principal, first in hellos.items():
            for kind in FRAMES:
                if first is None and kind == "hello":
                    continue  # "none" says no hello at all
                code = await _refused_session(lane.ws_url, first, kind, res)
                wanted = {"OUT_OF_ORDER"} if first is None else HELLO_REFUSED[principal]
                assert code in wanted, (principal, kind, code)
            assert (lane.task(task["id"]), len(lane.audit(task["id"]))) == before, principal

        # Another queue's worker in a session of its own queue: every frame is answered, and
        # none reaches this queue's attempt (the same NOT_FOUND as for a missing one).
        async with await ProtocolClient.connect(lane.ws_url) as other:
            await other.hello_as(stranger)
            await other.heartbeat()
            for kind in ("resume", "start", "renew", "finish"):
                [result] = (await other.request(*_frame(kind, other, res).ops)).results
                if kind == "resume":
                    assert result.ok and result.attempts is not None
                    assert [a.status for a in result.attempts] == ["LOST"], result
                else:
                    assert not result.ok and result.error_code == "NOT_FOUND", (kind, result)
            [claimed] = (await other.request(*_frame("claim", other, res).ops)).results
            assert claimed.ok and all(r.task_id != task["id"] for r in claimed.claimed or ())
            [drained] = (await other.request(*_frame("drain", other, res).ops)).results
            assert drained.ok
            await other.send(Credit(4))
            await other.heartbeat()
        assert (lane.task(task["id"]), len(lane.audit(task["id"]))) == before

        # The queue's own worker: every frame type is allowed.
        await owner.heartbeat()
        assert (await owner.start(res)).ok
        [resumed] = (await owner.request(*_frame("resume", owner, res).ops)).results
        assert resumed.ok and [a.status for a in resumed.attempts or ()] == ["RUNNING"]
        assert (await owner.renew(res)).ok
        done = await owner.finish(res, "SUCCEEDED", result_json='{"ok": 1}')
        assert done.ok and done.task_state == "SUCCEEDED"
        [claimed] = (await owner.request(*_frame("claim", owner, res).ops)).results
        assert claimed.ok
        await owner.send(Credit(1))
        assert (await owner.drain()).ok
    assert lane.task(task["id"])["result"] == {"ok": 1}
