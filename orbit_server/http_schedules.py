"""The schedule routes of docs/http-api.md "Schedules": thin adapters over
services.schedules, with the parsing, authentication and error mapping of http_api."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .http_api import (
    MAX_BODY_BYTES,
    HttpApi,
    JSONResponse,
    Params,
    _endpoint,
    _obj,
    _path_id,
    parse_json_body,
    read_body,
)
from .parts import ServerParts


class ScheduleApi(HttpApi):
    def __init__(self, parts: ServerParts) -> None:
        super().__init__(parts)
        self.schedules = parts.services.schedules

    async def create(self, request: Request, q: Params) -> Response:
        queue_id = _path_id(request, "queue_id")
        principal = await self._principal(request)  # before the body is read
        body = _obj(parse_json_body(await read_body(request, MAX_BODY_BYTES)), "Schedule")
        made = await self.store.call(self.schedules.create, principal, queue_id, body)
        return JSONResponse(made, status_code=201)

    async def list(self, request: Request, q: Params) -> Response:
        queue_id = _path_id(request, "queue_id")
        return JSONResponse(await self._as(request, self.schedules.list_schedules, queue_id))

    async def get(self, request: Request, q: Params) -> Response:
        schedule_id = _path_id(request, "schedule_id")
        return JSONResponse(await self._as(request, self.schedules.get,
                                           schedule_id))

    async def pause(self, request: Request, q: Params) -> Response:
        schedule_id = _path_id(request, "schedule_id")
        return JSONResponse(await self._as(request, self.schedules.pause,
                                           schedule_id))

    async def resume(self, request: Request, q: Params) -> Response:
        schedule_id = _path_id(request, "schedule_id")
        return JSONResponse(await self._as(request, self.schedules.resume,
                                           schedule_id))

    async def delete(self, request: Request, q: Params) -> Response:
        schedule_id = _path_id(request, "schedule_id")
        return JSONResponse(await self._as(request, self.schedules.delete,
                                           schedule_id))


def schedule_routes(parts: ServerParts) -> list[Route]:
    api = ScheduleApi(parts)
    e = _endpoint
    return [
        Route("/v1/queues/{queue_id}/schedules", e(api.create), methods=["POST"]),
        Route("/v1/queues/{queue_id}/schedules", e(api.list), methods=["GET"]),
        Route("/v1/schedules/{schedule_id}", e(api.get), methods=["GET"]),
        Route("/v1/schedules/{schedule_id}", e(api.delete), methods=["DELETE"]),
        Route("/v1/schedules/{schedule_id}/pause", e(api.pause), methods=["POST"]),
        Route("/v1/schedules/{schedule_id}/resume", e(api.resume), methods=["POST"]),
    ]
