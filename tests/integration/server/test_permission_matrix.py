"""Every HTTP route of the app with every kind of principal: none, a malformed token, a
wrong secret, a revoked credential, a worker, a producer of another queue, the queue's
producer and an admin. The routes are the app's router's own: one the matrix leaves out
fails test_the_matrix_covers_every_route, naming it. Each answer is the allowed one or the
typed refusal (401, 403 for a role, 404 for another queue's queue, task or schedule,
exactly as for a missing one), and a refusal changes nothing. Then every client frame and
op type of the worker WebSocket (hello, heartbeat, credit, and resume, start, renew,
finish, drain, claim in a request) with every principal: no hello, a malformed, wrong or
revoked credential, a producer, an admin, another queue's worker (refused at hello for this
queue, and in a session of its own queue unable to reach this queue's attempt) and the
queue's own worker (allowed). Both stores."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import websockets
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect, http_client, task_spec
from support.protocol_client import ECHO, ProtocolClient, random_instance
from support.server import ServerProcess

from orbit_server.app import OrbitServer
from orbit_server.config import ServerConfig
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

MISSING = "f" * 32
# Who may call a route: any caller (PUBLIC, a fixed answer), an admin only (ADMIN), any
# producer or admin, answering from its own queues (READERS), or a producer of the queue
# named or owning the task or schedule named, and admins (QUEUE).
PUBLIC, ADMIN, READERS, QUEUE = "public", "admin", "readers", "queue"


@dataclass(frozen=True)
class Case:
    """One request of a route: its ``access``, the query string and body, and the status an
    allowed caller gets (a PUBLIC route: every caller)."""

    access: str
    query: str = ""
    body: Any = None
    allowed: frozenset[int] = frozenset({200, 201})


def _schedule_body() -> dict[str, Any]:
    # Paused, and due once a year even when resumed: no task fires during the test.
    return {"cron": "0 0 1 1 *", "paused": True, "task": task_spec()}


def _workflow_body() -> dict[str, Any]:
    return {"nodes": [{"key": "a", "task": task_spec()},
                      {"key": "b", "task": task_spec(), "parents": ["a"]}]}


# Every route of the app, by (method, path template) as its router has it, with the requests
# the matrix sends it; test_the_matrix_covers_every_route holds this equal to the router.
# In order: a destructive request (revoke, cancel, delete) comes after the others on its
# target.
CASES: dict[tuple[str, str], list[Case]] = {
    ("GET", "/healthz"): [Case(PUBLIC, allowed=frozenset({200}))],
    ("GET", "/openapi.json"): [Case(PUBLIC, allowed=frozenset({200}))],
    ("GET", "/metrics"): [Case(PUBLIC, allowed=frozenset({200}))],
    ("GET", "/"): [Case(PUBLIC, allowed=frozenset({302}))],
    ("GET", "/ui"): [Case(PUBLIC, allowed=frozenset({308}))],
    ("GET", "/ui/"): [Case(PUBLIC, allowed=frozenset({200}))],
    ("GET", "/ui/{name:str}"): [Case(PUBLIC, allowed=frozenset({200}))],
    # Asked without a WebSocket upgrade: 426 for everyone.
    ("GET", "/v1/worker"): [Case(PUBLIC, allowed=frozenset({426}))],
    # The WebSocket speaks frames, not requests: every frame with every principal is
    # test_every_frame_type_with_every_principal below.
    ("WEBSOCKET", "/v1/worker"): [],
    ("GET", "/v1/producer"): [Case(PUBLIC, allowed=frozenset({426}))],
    # The producer channel with every principal: tests/integration/server/
    # test_producer_ws.py::test_only_producers_and_admins_open_a_channel.
    ("WEBSOCKET", "/v1/producer"): [],
    ("POST", "/v1/queues"): [Case(ADMIN, body={})],
    ("GET", "/v1/queues"): [Case(READERS)],
    ("GET", "/v1/queues/{queue_id}/stats"): [Case(QUEUE)],
    ("GET", "/v1/queues/{queue_id}/throughput"): [Case(QUEUE)],
    ("GET", "/v1/queues/{queue_id}/capabilities"): [Case(QUEUE)],
    ("GET", "/v1/queues/{queue_id}/tasks"): [Case(QUEUE), Case(QUEUE, "?state=PENDING")],
    ("GET", "/v1/workers"): [Case(READERS), Case(QUEUE, "?queue_id={queue_id}")],
    ("GET", "/v1/me"): [Case(READERS)],
    ("POST", "/v1/credentials"): [Case(ADMIN, body={"role": "producer", "queues": ["{queue_id}"]})],
    ("GET", "/v1/credentials"): [Case(ADMIN)],
    ("POST", "/v1/credentials/{credential_id}/rotate"): [Case(ADMIN, body={"grace_ms": 0})],
    ("DELETE", "/v1/credentials/{credential_id}"): [Case(ADMIN)],
    ("POST", "/v1/queues/{queue_id}/tasks"): [Case(QUEUE, body=task_spec())],
    ("POST", "/v1/queues/{queue_id}/tasks/batch"): [Case(QUEUE, body={"tasks": [task_spec()]})],
    ("GET", "/v1/tasks/{task_id}"): [Case(QUEUE), Case(QUEUE, "?wait_ms=10")],
    ("GET", "/v1/tasks/{task_id}/attempts"): [Case(QUEUE)],
    ("GET", "/v1/tasks/{task_id}/audit"): [Case(QUEUE)],
    # Allowed, but the task is not in NEEDS_REVIEW.
    ("POST", "/v1/tasks/{task_id}/review"): [Case(QUEUE, body={"action": "retry"},
                                                  allowed=frozenset({409}))],
    # Allowed, but the task has not ended FAILED or CANCELLED.
    ("POST", "/v1/tasks/{task_id}/retry"): [Case(QUEUE, body={}, allowed=frozenset({409}))],
    ("POST", "/v1/queues/{queue_id}/tasks/retry"): [Case(QUEUE, body={"dry_run": True})],
    ("POST", "/v1/queues/{queue_id}/tasks/cancel"): [Case(QUEUE, body={"dry_run": True})],
    ("POST", "/v1/queues/{queue_id}/tasks/review"): [
        Case(QUEUE, body={"action": "fail", "dry_run": True})],
    ("GET", "/v1/queues/{queue_id}/pauses"): [Case(QUEUE)],
    # A pause of a handler no task has, lifted by the resume after it.
    ("POST", "/v1/queues/{queue_id}/pause"): [
        Case(QUEUE, body={"handler": "matrix-nothing", "reason": "permission matrix"})],
    ("POST", "/v1/queues/{queue_id}/resume"): [Case(QUEUE, body={"handler": "matrix-nothing"})],
    ("POST", "/v1/tasks/{task_id}/cancel"): [Case(QUEUE, body={})],
    ("POST", "/v1/queues/{queue_id}/schedules"): [Case(QUEUE, body=_schedule_body())],
    ("GET", "/v1/queues/{queue_id}/schedules"): [Case(QUEUE)],
    ("GET", "/v1/schedules/{schedule_id}"): [Case(QUEUE)],
    ("POST", "/v1/schedules/{schedule_id}/pause"): [Case(QUEUE)],
    ("POST", "/v1/schedules/{schedule_id}/resume"): [Case(QUEUE)],
    ("DELETE", "/v1/schedules/{schedule_id}"): [Case(QUEUE)],
    ("GET", "/v1/queues/{queue_id}/limits"): [Case(QUEUE)],
    ("PUT", "/v1/queues/{queue_id}/limits/{pattern}"): [
        Case(ADMIN, body={"max_running": 2}, allowed=frozenset({200, 201}))],
    ("GET", "/v1/queues/{queue_id}/limits/{pattern}"): [Case(QUEUE)],
    ("DELETE", "/v1/queues/{queue_id}/limits/{pattern}"): [Case(ADMIN)],
    ("POST", "/v1/queues/{queue_id}/workflows"): [Case(QUEUE, body=_workflow_body())],
    ("GET", "/v1/queues/{queue_id}/workflows"): [Case(QUEUE), Case(QUEUE, "?state=RUNNING")],
    ("GET", "/v1/workflows/{workflow_id}"): [Case(QUEUE), Case(QUEUE, "?wait_ms=10")],
    ("POST", "/v1/workflows/{workflow_id}/cancel"): [Case(QUEUE, body={})],
    ("PUT", "/v1/queues/{queue_id}/fair"): [Case(ADMIN, body={"key": "customer"})],
    ("GET", "/v1/queues/{queue_id}/fair"): [Case(QUEUE)],
    # 404 once an earlier principal's DELETE turned it off.
    ("DELETE", "/v1/queues/{queue_id}/fair"): [
        Case(ADMIN, allowed=frozenset({200, 404}))],
}
_PARAM = re.compile(r"{(\w+)(?::\w+)?}")


def _fill(template: str, targets: dict[str, str]) -> str:
    return _PARAM.sub(lambda m: targets[m.group(1)], template)


def _body(body: Any, targets: dict[str, str]) -> Any:
    if isinstance(body, str):
        return _fill(body, targets)
    if isinstance(body, list):
        return [_body(b, targets) for b in body]
    if isinstance(body, dict):
        return {k: _body(v, targets) for k, v in body.items()}
    return body


def _expected(principal: str, case: Case) -> set[int]:
    if case.access == PUBLIC:
        return set(case.allowed)
    if principal in ("none", "malformed", "wrong", "revoked"):
        return {401}
    if principal == "worker":
        return {403}
    if case.access == ADMIN:
        return set(case.allowed) if principal == "admin" else {403}
    if principal == "stranger" and case.access == QUEUE:
        return {404}  # another queue's: exactly as a missing one (checked below)
    return set(case.allowed)


def _router_routes(tmp_path: Path) -> set[tuple[str, str]]:
    """(method, path template) of every route of the real app (HEAD left out: Starlette
    adds it to every GET), the routes of a mount under its prefix."""
    server = OrbitServer(ServerConfig(db_url=f"sqlite:///{tmp_path / 'routes.db'}"))
    try:
        found: set[tuple[str, str]] = set()
        pending: list[tuple[str, BaseRoute]] = [("", r) for r in server.app.routes]
        while pending:
            prefix, route = pending.pop()
            if isinstance(route, Mount):
                pending.extend((prefix + route.path, r) for r in route.routes)
            elif isinstance(route, WebSocketRoute):
                found.add(("WEBSOCKET", prefix + route.path))
            else:
                assert isinstance(route, Route), route
                found.update((m, prefix + route.path) for m in route.methods or ()
                             if m != "HEAD")
        return found
    finally:
        server.engine.dispose()


def test_the_matrix_covers_every_route(tmp_path: Path) -> None:
    routes = _router_routes(tmp_path)
    assert sorted(routes - set(CASES)) == [], "routes the permission matrix leaves out"
    assert sorted(set(CASES) - routes) == [], "matrix entries for routes the app lacks"


def _masked(response: httpx.Response) -> tuple[int, str]:
    """Status and body with every 32-hex ID replaced, so two answers compare as equal."""
    return response.status_code, re.sub(r"[0-9a-f]{32}", "<id>", response.text)


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
        # Fresh targets per principal: an allowed cancel, revoke or delete must not hide the
        # next.
        task = lane.submit()
        schedule = expect(lane.producer.post(f"/v1/queues/{lane.queue}/schedules",
                                             json=_schedule_body()), 201)
        workflow = expect(lane.producer.post(f"/v1/queues/{lane.queue}/workflows",
                                             json=_workflow_body()), 201)
        targets = {"queue_id": lane.queue, "task_id": task["id"], "schedule_id": schedule["id"],
                   "workflow_id": workflow["workflow_id"],
                   "credential_id": orbit.credential("producer", [lane.queue])["credential_id"],
                   "name": "app.js", "pattern": f"matrix:{principal}"}
        expect(orbit.admin_http.put(f"/v1/queues/{lane.queue}/limits/{targets['pattern']}",
                                    json={"max_running": 1}), 201)
        missing = {**targets, "queue_id": MISSING, "task_id": MISSING, "schedule_id": MISSING,
                   "workflow_id": MISSING}
        before = _targets_state(orbit, lane, targets)
        for (method, template), cases in CASES.items():
            for case in cases:
                path = _fill(template + case.query, targets)
                answer = client.request(method, path, json=_body(case.body, targets))
                wanted = _expected(principal, case)
                assert answer.status_code in wanted, (principal, method, path, answer.text[:300])
                assert "Traceback" not in answer.text
                if answer.status_code >= 400:
                    assert answer.json()["error"]["code"], answer.text
                if principal == "stranger" and case.access == QUEUE:
                    # Nothing is revealed of another queue: the answer for a missing one.
                    absent = client.request(method, _fill(template + case.query, missing),
                                            json=_body(case.body, missing))
                    assert _masked(answer) == _masked(absent), (method, path)
        if principal not in ("producer", "admin"):
            # Every refusal left the task, its audit, the schedule and the target credential
            # as they were.
            assert _targets_state(orbit, lane, targets) == before, principal


def _targets_state(orbit: OrbitEnv, lane: Lane, targets: dict[str, str]) -> tuple[Any, ...]:
    task_id = targets["task_id"]
    schedule = expect(lane.producer.get(f"/v1/schedules/{targets['schedule_id']}"), 200)
    listed = expect(orbit.admin_http.get("/v1/credentials"), 200)["credentials"]
    credential = next(c for c in listed if c["credential_id"] == targets["credential_id"])
    workflow = expect(lane.producer.get(f"/v1/workflows/{targets['workflow_id']}"), 200)
    return (lane.task(task_id), len(lane.audit(task_id)), schedule, credential, workflow)


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
