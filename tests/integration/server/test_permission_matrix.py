"""Every HTTP route of the task and credential API with every kind of principal: none, a
malformed token, a wrong secret, a revoked credential, a worker, a producer of another
queue, the queue's producer and an admin. Each answer is the allowed one or the typed
refusal (401, 403 for a role, 404 for another queue, exactly as for a missing one), and a
refusal changes nothing. Both stores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect, http_client, task_spec
from support.server import ServerProcess

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


def test_every_route_with_every_principal(
        server_factory: Callable[..., ServerProcess]) -> None:
    # The failed-authentication limit off: every refusal here must be the plain 401
    # (test_security_limits.py tests the limit).
    srv = server_factory(extra_args=("--auth-failures-per-s", "0"))
    admin = srv.bootstrap_admin()
    with http_client(srv.url, admin.bearer) as admin_http:
        orbit = OrbitEnv(srv, admin, admin_http)
        try:
            queue = orbit.queue()
            lane = Lane(orbit, queue, orbit.producer(queue), orbit.worker_credential(queue))
            _matrix(orbit, lane)
        finally:
            orbit.close()


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
