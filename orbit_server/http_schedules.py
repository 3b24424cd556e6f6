"""The schedule routes of docs/http-api.md "Schedules": thin adapters over
services.schedules, on the same plumbing (``http_plumbing``) and authentication
(``http_auth``, with the one failed-login budget) as every other route."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .http_auth import Authenticator
from .http_plumbing import (
    MAX_BATCH_BODY_BYTES,
    JSONResponse,
    Params,
    bad_request,
    endpoint,
    json_body,
    path_id,
)
from .parts import ServerParts


class ScheduleApi:
    """The schedule route handlers, over the server parts and the authenticator."""

    def __init__(self, parts: ServerParts, auth: Authenticator) -> None:
        self.auth = auth
        self.store = parts.store
        self.schedules = parts.services.schedules

    async def create(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)  # before the body is read
        # A schedule may carry a workflow of up to 10,000 nodes: a batch's body limit.
        body = await json_body(request, MAX_BATCH_BODY_BYTES)
        if not isinstance(body, dict):
            raise bad_request("Schedule must be a JSON object")
        made = await self.store.call(self.schedules.create, principal, queue_id, body)
        return JSONResponse(made, status_code=201)

    async def list(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(request, self.schedules.list_schedules,
                                                   queue_id))

    async def get(self, request: Request, q: Params) -> Response:
        schedule_id = path_id(request, "schedule_id")
        return JSONResponse(await self.auth.run_as(request, self.schedules.get, schedule_id))

    async def pause(self, request: Request, q: Params) -> Response:
        schedule_id = path_id(request, "schedule_id")
        return JSONResponse(await self.auth.run_as(request, self.schedules.pause, schedule_id))

    async def resume(self, request: Request, q: Params) -> Response:
        schedule_id = path_id(request, "schedule_id")
        return JSONResponse(await self.auth.run_as(request, self.schedules.resume,
                                                   schedule_id))

    async def delete(self, request: Request, q: Params) -> Response:
        schedule_id = path_id(request, "schedule_id")
        return JSONResponse(await self.auth.run_as(request, self.schedules.delete,
                                                   schedule_id))


def schedule_routes(parts: ServerParts) -> list[Route]:
    api = ScheduleApi(parts, Authenticator(parts))
    e = endpoint
    return [
        Route("/v1/queues/{queue_id}/schedules", e(api.create), methods=["POST"]),
        Route("/v1/queues/{queue_id}/schedules", e(api.list), methods=["GET"]),
        Route("/v1/schedules/{schedule_id}", e(api.get), methods=["GET"]),
        Route("/v1/schedules/{schedule_id}", e(api.delete), methods=["DELETE"]),
        Route("/v1/schedules/{schedule_id}/pause", e(api.pause), methods=["POST"]),
        Route("/v1/schedules/{schedule_id}/resume", e(api.resume), methods=["POST"]),
    ]
