"""The workflow routes of docs/http-api.md "Workflows": thin adapters over
services.workflows on the shared plumbing and authentication."""

from __future__ import annotations

import asyncio
import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .domain import bodies
from .domain.query import Choice, Int, Text
from .http_auth import Authenticator
from .http_plumbing import (
    MAX_BATCH_BODY_BYTES,
    JSONResponse,
    Params,
    bad_request,
    endpoint,
    json_body,
    path_id,
    shaped_body,
)
from .parts import ServerParts
from .submitting import Submitter

MAX_WAIT_MS = 60_000
# A GET with wait_ms reads the workflow's state (its nodes' counts) this often until it
# ended or is BLOCKED, then the whole workflow once.
WAIT_STEP_S = 0.1
_WAIT_QUERY = (Int("wait_ms", 0, MAX_WAIT_MS, 0),)
_STATES = ("", "RUNNING", "BLOCKED", "SUCCEEDED", "FAILED", "CANCELLED")
LIST_QUERY = (Choice("state", _STATES, ""), Int("limit", 1, 500, 50), Text("cursor"))
_SETTLED = frozenset({"BLOCKED", "SUCCEEDED", "FAILED", "CANCELLED"})


class WorkflowApi:
    def __init__(self, parts: ServerParts, auth: Authenticator) -> None:
        self.parts = parts
        self.auth = auth
        self.store = parts.store
        self.workflows = parts.services.workflows
        self.submitter = Submitter(parts)

    async def submit(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        principal = await self.auth.principal(request)  # before the body is read
        body = await json_body(request, MAX_BATCH_BODY_BYTES)
        if not isinstance(body, dict):
            raise bad_request("a workflow must be a JSON object")
        nodes = body.get("nodes")
        self.submitter.check_rate(principal, len(nodes) if isinstance(nodes, list) else 1)
        view, created, effects = await self.store.call(self.workflows.submit, principal,
                                                       queue_id, body)
        self.parts.act_on(effects)
        return JSONResponse(view, status_code=201 if created else 200)

    async def get(self, request: Request, q: Params) -> Response:
        workflow_id = path_id(request, "workflow_id")
        principal = await self.auth.principal(request)
        view = await self.store.call(self.workflows.get, principal, workflow_id)
        end = time.monotonic() + q["wait_ms"] / 1000
        state = view["state"]
        while state not in _SETTLED and time.monotonic() < end:
            await asyncio.sleep(min(WAIT_STEP_S, max(0.0, end - time.monotonic())))
            state = await self.store.call(self.workflows.state, principal, workflow_id)
        if state != view["state"]:  # the whole view once, when the wait ends
            view = await self.store.call(self.workflows.get, principal, workflow_id)
        return JSONResponse(view)

    async def list(self, request: Request, q: Params) -> Response:
        queue_id = path_id(request, "queue_id")
        return JSONResponse(await self.auth.run_as(
            request, self.workflows.list_workflows, queue_id, q["state"] or None, q["limit"],
            q["cursor"]))

    async def cancel(self, request: Request, q: Params) -> Response:
        workflow_id = path_id(request, "workflow_id")
        principal = await self.auth.principal(request)
        body = await shaped_body(request, bodies.CANCEL_REQUEST)
        view, effects = await self.store.call(self.workflows.cancel, principal, workflow_id,
                                              body.get("reason"))
        self.parts.act_on(effects)
        return JSONResponse(view)


def workflow_routes(parts: ServerParts) -> list[Route]:
    api = WorkflowApi(parts, Authenticator(parts))
    e = endpoint
    return [
        Route("/v1/queues/{queue_id}/workflows", e(api.submit), methods=["POST"]),
        Route("/v1/queues/{queue_id}/workflows", e(api.list, LIST_QUERY), methods=["GET"]),
        Route("/v1/workflows/{workflow_id}", e(api.get, _WAIT_QUERY), methods=["GET"]),
        Route("/v1/workflows/{workflow_id}/cancel", e(api.cancel), methods=["POST"]),
    ]
