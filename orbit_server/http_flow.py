"""The flow-control routes of docs/flow-control.md: pause and resume a queue, a capability
or a capability version, the queue's pauses, and the bulk actions by filter (cancel,
review) beside the bulk retry of http_api. Thin adapters over services.pauses and the bulk
walk of ``retrying``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from orbit_wire.jsonvalue import encode_value

from .domain import flow_bodies
from .domain.bodies import ReviewAction
from .domain.listing import CANCEL_QUERY, REVIEW_QUERY
from .http_auth import Authenticator
from .http_plumbing import JSONResponse, Params, endpoint, json_body, path_id, shaped_body
from .parts import ServerParts
from .retrying import act_on_matching
from .services.retries import BulkAction, BulkChange

_REVIEWS = {ReviewAction.RETRY: BulkAction.REVIEW_RETRY,
            ReviewAction.SUCCEED: BulkAction.REVIEW_SUCCEED,
            ReviewAction.FAIL: BulkAction.REVIEW_FAIL}


class FlowApi:
    def __init__(self, parts: ServerParts, auth: Authenticator) -> None:
        self.parts = parts
        self.auth = auth
        self.store = parts.store
        self.pauses = parts.services.pauses

    async def pause(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)
        body = flow_bodies.parse_pause_request(await json_body(request))
        return JSONResponse(await self.store.call(
            self.pauses.pause, principal, queue_id, body.get("handler"),
            body.get("handler_version"), body["reason"]))

    async def resume(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)
        body = flow_bodies.parse_resume_request(await json_body(request))
        answer, effects = await self.store.call(
            self.pauses.resume, principal, queue_id, body.get("handler"),
            body.get("handler_version"), body.get("reason"))
        self.parts.act_on(effects)  # the queue's workers claim again at once
        return JSONResponse(answer)

    async def list_pauses(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(request, self.pauses.of_queue, queue_id))

    async def cancel_tasks(self, request: Request, q: Params) -> Response:
        """The queue's PENDING, RUNNING and NEEDS_REVIEW tasks the query selects, cancelled
        (or counted)."""
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)
        body = await shaped_body(request, flow_bodies.BULK_CANCEL_REQUEST)
        change = BulkChange(BulkAction.CANCEL, body.get("reason"))
        return JSONResponse(await act_on_matching(self.parts, principal, queue_id, q, change,
                                                  body.get("dry_run", False)))

    async def review_tasks(self, request: Request, q: Params) -> Response:
        """The queue's NEEDS_REVIEW tasks the query selects, each resolved alike (or
        counted)."""
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)
        body = flow_bodies.parse_bulk_review_request(await json_body(request))
        action = ReviewAction(body["action"])
        result_json = None
        if action is ReviewAction.SUCCEED:
            result_json = encode_value(body["result"], what="result").decode()
        change = BulkChange(_REVIEWS[action], body.get("reason"), result_json)
        return JSONResponse(await act_on_matching(self.parts, principal, queue_id, q, change,
                                                  body.get("dry_run", False)))


def flow_routes(parts: ServerParts) -> list[Route]:
    api = FlowApi(parts, Authenticator(parts))
    e = endpoint
    return [
        Route("/v1/queues/{queue_id}/pause", e(api.pause), methods=["POST"]),
        Route("/v1/queues/{queue_id}/resume", e(api.resume), methods=["POST"]),
        Route("/v1/queues/{queue_id}/pauses", e(api.list_pauses), methods=["GET"]),
        Route("/v1/queues/{queue_id}/tasks/cancel", e(api.cancel_tasks, CANCEL_QUERY),
              methods=["POST"]),
        Route("/v1/queues/{queue_id}/tasks/review", e(api.review_tasks, REVIEW_QUERY),
              methods=["POST"]),
    ]
