"""The flow-control limit routes of docs/http-api.md "Limits": thin adapters over
services.limits, on the same plumbing and authentication as every other route. A pattern
in the path is a key (``licence:matlab``) or ``name:*``. A queue's fair dispatch is here too
(``/v1/queues/{queue_id}/fair``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .http_auth import Authenticator
from .http_plumbing import JSONResponse, Params, endpoint, object_body, path_id
from .parts import ServerParts


class LimitApi:
    """The limit route handlers, over the server parts and the authenticator."""

    def __init__(self, parts: ServerParts, auth: Authenticator) -> None:
        self.auth = auth
        self.store = parts.store
        self.limits = parts.services.limits
        self.fair = parts.services.fair
        self.dispatcher = parts.dispatcher

    async def put(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        pattern = str(request.path_params["pattern"])
        principal = await self.auth.principal(request)  # before the body is read
        body = await object_body(request, "LimitRequest")
        made = await self.store.call(self.limits.set_limit, principal, queue_id, pattern, body)
        self.dispatcher.queues_ready([queue_id])  # a larger limit may let held tasks start
        return JSONResponse(made, status_code=201 if made["created"] else 200)

    async def get(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        pattern = str(request.path_params["pattern"])
        return JSONResponse(await self.auth.run_as(request, self.limits.get_limit, queue_id,
                                                   pattern))

    async def list(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(request, self.limits.list_limits, queue_id))

    async def delete(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        pattern = str(request.path_params["pattern"])
        gone = await self.auth.run_as(request, self.limits.delete_limit, queue_id, pattern)
        self.dispatcher.queues_ready([queue_id])  # the tasks it held may start
        return JSONResponse(gone)


    async def put_fair(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)  # before the body is read
        body = await object_body(request, "FairRequest")
        return JSONResponse(await self.store.call(self.fair.set_fair, principal, queue_id,
                                                  body))

    async def get_fair(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(request, self.fair.get_fair, queue_id))

    async def delete_fair(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(request, self.fair.fair_off, queue_id))


def limit_routes(parts: ServerParts) -> list[Route]:
    api = LimitApi(parts, Authenticator(parts))
    e = endpoint
    return [
        Route("/v1/queues/{queue_id}/limits", e(api.list), methods=["GET"]),
        Route("/v1/queues/{queue_id}/limits/{pattern}", e(api.put), methods=["PUT"]),
        Route("/v1/queues/{queue_id}/limits/{pattern}", e(api.get), methods=["GET"]),
        Route("/v1/queues/{queue_id}/limits/{pattern}", e(api.delete), methods=["DELETE"]),
        Route("/v1/queues/{queue_id}/fair", e(api.put_fair), methods=["PUT"]),
        Route("/v1/queues/{queue_id}/fair", e(api.get_fair), methods=["GET"]),
        Route("/v1/queues/{queue_id}/fair", e(api.delete_fair), methods=["DELETE"]),
    ]
