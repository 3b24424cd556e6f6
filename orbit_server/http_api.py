"""The HTTP routes of docs/http-api.md (tasks, queues, credentials, workers), thin: parse,
authenticate, one use case on the store thread, encode. The plumbing they share is in
``http_plumbing`` (the route wrapper, bodies, errors), authentication in ``http_auth``; the
schedule routes are ``http_schedules``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Role

from .auth import Principal, require_role
from .domain import bodies
from .domain.fields import Body
from .domain.listing import LIST_QUERY, RETRY_QUERY, task_filter
from .domain.query import Id, Int
from .http_auth import Authenticator
from .http_plumbing import (
    MAX_BATCH_BODY_BYTES,
    JSONResponse,
    Params,
    endpoint,
    error_response,
    json_body,
    object_body,
    path_id,
    shaped_body,
)
from .openapi import openapi_document
from .parts import ServerParts
from .retrying import retry_matching
from .services import Effects
from .submitting import Submitter

MAX_WAIT_MS = 60_000
MAX_THROUGHPUT_WINDOWS = 120
# The query parameters of the routes that take any (the OpenAPI document shows each).
WAIT_QUERY = (Int("wait_ms", 0, MAX_WAIT_MS, 0),)
WORKERS_QUERY = (Id("queue_id"),)
THROUGHPUT_QUERY = (Int("window_ms", 1_000, 86_400_000, 60_000),
                    Int("windows", 1, MAX_THROUGHPUT_WINDOWS, 30))


class HttpApi:
    """The route handlers; each holds no state beyond the server parts it serves with."""

    def __init__(self, parts: ServerParts, auth: Authenticator) -> None:
        self.parts = parts
        self.auth = auth
        self.submitter = Submitter(parts)
        self.store = parts.store
        self.admin = parts.services.admin
        self.tasks = parts.services.tasks
        self.listing = parts.services.listing
        self._openapi = orjson.dumps(openapi_document())

    # -------------------------------------------------------------- public

    async def worker_without_upgrade(self, request: Request, q: Params) -> Response:
        return _upgrade_required("/v1/worker speaks the worker protocol over a WebSocket "
                                 "(docs/protocol.md)")

    async def producer_without_upgrade(self, request: Request, q: Params) -> Response:
        return _upgrade_required("/v1/producer is the producer channel, a WebSocket "
                                 "(docs/producers.md)")

    async def healthz(self, request: Request, q: Params) -> Response:
        return JSONResponse({"status": "ok"})

    async def openapi(self, request: Request, q: Params) -> Response:
        return Response(self._openapi, media_type="application/json")

    # -------------------------------------------------------------- admin

    async def create_queue(self, request: Request, q: Params) -> Response:
        principal = await self.auth.principal(request)
        body = await shaped_body(request, bodies.QUEUE_REQUEST)
        name = body.get("name")
        queue = await self.store.call(self.admin.create_queue, principal, name)
        return JSONResponse(queue, status_code=201)

    async def create_credential(self, request: Request, q: Params) -> Response:
        principal = await self.auth.principal(request)
        body = bodies.parse_credential_request(await json_body(request))
        made = await self.store.call(self.admin.create_credential, principal, body["role"],
                                     body.get("queues", []), body.get("name"),
                                     body.get("expires_at_ms"))
        return JSONResponse(made, status_code=201)

    async def revoke_credential(self, request: Request, q: Params) -> Response:
        credential_id = path_id(request, "credential_id")
        answer, effects = await self.auth.run_as(request, self.admin.revoke_credential,
                                                 credential_id)
        self.parts.act_on(effects)
        return JSONResponse(answer)

    async def list_credentials(self, request: Request, q: Params) -> Response:
        return JSONResponse(await self.auth.run_as(request, self.admin.list_credentials))

    async def rotate_credential(self, request: Request, q: Params) -> Response:
        credential_id = path_id(request, "credential_id")
        principal = await self.auth.principal(request)
        body = await shaped_body(request, bodies.ROTATE_REQUEST)
        answer, effects = await self.store.call(self.admin.rotate_credential, principal,
                                                credential_id, body.get("grace_ms", 0),
                                                body.get("expires_at_ms"))
        self.parts.act_on(effects)
        return JSONResponse(answer)

    async def queue_stats(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(request, self.tasks.queue_stats, queue_id))

    # -------------------------------------------------------------- lists

    async def list_queues(self, request: Request, q: Params) -> Response:
        return JSONResponse(await self.auth.run_as(request, self.listing.list_queues))

    async def list_tasks(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(request, self.listing.list_tasks, queue_id,
                                           task_filter(q)))

    async def list_workers(self, request: Request, q: Params) -> Response:
        return JSONResponse(await self.auth.run_as(request, self.listing.list_workers,
                                                   q["queue_id"]))

    async def capabilities(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(request, self.listing.capabilities,
                                                   queue_id))

    async def throughput(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(request, self.listing.throughput, queue_id,
                                           q["window_ms"], q["windows"]))

    async def me(self, request: Request, q: Params) -> Response:
        """The credential the request authenticated with (no secret): what the dashboard
        shows and offers (review actions only to the roles that may review)."""
        principal = await self.auth.principal(request)
        require_role(principal, (Role.ADMIN, Role.PRODUCER))
        return JSONResponse({"credential_id": principal.credential_id,
                             "role": principal.role.value,
                             "queues": sorted(principal.queues)})

    # -------------------------------------------------------------- producer

    async def submit(self, request: Request, q: Params) -> Response:
        """One task; with ``wait_ms``, answered once it settled or the wait ended."""
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)
        self.submitter.check_rate(principal, 1)
        spec = await object_body(request, "TaskSpec")
        [(task, created)] = await self.submitter.submit(principal, queue_id, [spec])
        if q["wait_ms"]:
            task = await self.submitter.settle(principal, task["id"], q["wait_ms"], task)
        return JSONResponse(task, status_code=201 if created else 200)

    async def submit_batch(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)
        body = await shaped_body(request, bodies.BATCH_SHAPE, MAX_BATCH_BODY_BYTES)
        specs = body["tasks"]
        self.submitter.check_rate(principal, len(specs))
        made = await self.submitter.submit(principal, queue_id, specs)
        return JSONResponse({"tasks": [task for task, _created in made]}, status_code=201)

    async def get_task(self, request: Request, q: Params) -> Response:
        task_id = path_id(request, "task_id")
        wait_ms = q["wait_ms"]
        if wait_ms == 0:
            return JSONResponse(await self.auth.run_as(request, self.tasks.get_task, task_id))
        principal = await self.auth.principal(request)
        return JSONResponse(await self.submitter.settle(principal, task_id, wait_ms))

    async def cancel_task(self, request: Request, q: Params) -> Response:
        return await self._task_change(request, bodies.CANCEL_REQUEST, self.tasks.cancel_task)

    async def retry_task(self, request: Request, q: Params) -> Response:
        return await self._task_change(request, bodies.RETRY_REQUEST,
                                       self.parts.services.retries.retry_task)

    async def _task_change(self, request: Request, shape: Body[Any],
                           change: Callable[[Principal, str, str | None],
                                            tuple[dict[str, Any], Effects]]) -> Response:
        """One task changed with an optional reason (cancel, retry): its view."""
        task_id = path_id(request, "task_id")
        principal = await self.auth.principal(request)
        body = await shaped_body(request, shape)
        task, effects = await self.store.call(change, principal, task_id, body.get("reason"))
        self.parts.act_on(effects)
        return JSONResponse(task)

    async def retry_tasks(self, request: Request, q: Params) -> Response:
        """A queue's FAILED/CANCELLED tasks the query selects, run again (or counted)."""
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)
        body = await shaped_body(request, bodies.BULK_RETRY_REQUEST)
        return JSONResponse(await retry_matching(self.parts, principal, queue_id, q,
                                                 body.get("reason"), body.get("dry_run", False)))

    async def list_attempts(self, request: Request, q: Params) -> Response:
        task_id = path_id(request, "task_id")
        return JSONResponse(await self.auth.run_as(request, self.tasks.list_attempts, task_id))

    async def audit_trail(self, request: Request, q: Params) -> Response:
        task_id = path_id(request, "task_id")
        return JSONResponse(await self.auth.run_as(request, self.tasks.audit_trail, task_id))

    async def review(self, request: Request, q: Params) -> Response:
        task_id = path_id(request, "task_id")
        principal = await self.auth.principal(request)
        body = bodies.parse_review_request(await json_body(request))
        task, effects = await self.store.call(self.tasks.review, principal, task_id,
                                              body["action"], body.get("result"),
                                              body.get("reason"))
        self.parts.act_on(effects)
        return JSONResponse(task)


def _upgrade_required(what: str) -> Response:
    """A WebSocket endpoint asked without an upgrade: 426 saying what to do."""
    response = error_response(OrbitError(
        ErrorCode.BAD_REQUEST, f"{what}: send an Upgrade: websocket request"))
    response.status_code = 426
    response.headers["Upgrade"] = "websocket"
    response.headers["Connection"] = "Upgrade"
    return response


def http_routes(parts: ServerParts) -> list[Route]:
    """Every HTTP route (the OpenAPI document must list each one; a test checks it)."""
    api = HttpApi(parts, Authenticator(parts))
    e = endpoint
    return [
        # The router tries routes in order: a producer's submit and long poll come first.
        Route("/v1/queues/{queue_id}/tasks", e(api.submit, WAIT_QUERY), methods=["POST"]),
        Route("/v1/tasks/{task_id}", e(api.get_task, WAIT_QUERY), methods=["GET"]),
        Route("/healthz", e(api.healthz), methods=["GET"]),
        Route("/openapi.json", e(api.openapi), methods=["GET"]),
        # HTTP requests only; the WebSocket route of the same path (app.py) takes upgrades.
        Route("/v1/worker", e(api.worker_without_upgrade), methods=["GET"]),
        Route("/v1/producer", e(api.producer_without_upgrade), methods=["GET"]),
        Route("/v1/queues", e(api.create_queue), methods=["POST"]),
        Route("/v1/queues", e(api.list_queues), methods=["GET"]),
        Route("/v1/queues/{queue_id}/tasks", e(api.list_tasks, LIST_QUERY), methods=["GET"]),
        Route("/v1/workers", e(api.list_workers, WORKERS_QUERY), methods=["GET"]),
        Route("/v1/queues/{queue_id}/stats", e(api.queue_stats), methods=["GET"]),
        Route("/v1/queues/{queue_id}/capabilities", e(api.capabilities), methods=["GET"]),
        Route("/v1/queues/{queue_id}/throughput", e(api.throughput, THROUGHPUT_QUERY),
              methods=["GET"]),
        Route("/v1/me", e(api.me), methods=["GET"]),
        Route("/v1/credentials", e(api.create_credential), methods=["POST"]),
        Route("/v1/credentials", e(api.list_credentials), methods=["GET"]),
        Route("/v1/credentials/{credential_id}/rotate", e(api.rotate_credential),
              methods=["POST"]),
        Route("/v1/credentials/{credential_id}", e(api.revoke_credential), methods=["DELETE"]),
        Route("/v1/queues/{queue_id}/tasks/batch", e(api.submit_batch), methods=["POST"]),
        Route("/v1/tasks/{task_id}/cancel", e(api.cancel_task), methods=["POST"]),
        Route("/v1/tasks/{task_id}/attempts", e(api.list_attempts), methods=["GET"]),
        Route("/v1/tasks/{task_id}/audit", e(api.audit_trail), methods=["GET"]),
        Route("/v1/tasks/{task_id}/review", e(api.review), methods=["POST"]),
        Route("/v1/tasks/{task_id}/retry", e(api.retry_task), methods=["POST"]),
        Route("/v1/queues/{queue_id}/tasks/retry", e(api.retry_tasks, RETRY_QUERY),
              methods=["POST"]),
    ]
