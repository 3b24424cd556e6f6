"""The workflow routes of docs/http-api.md "Workflows": thin adapters over
services.workflows on the shared plumbing and authentication."""

from __future__ import annotations

import asyncio
import contextlib
import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .auth import Principal
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
from .store.db import is_sqlite
from .submitting import WAIT_SLICE_S, WAIT_SLICE_SQLITE_S, Submitter
from .waiters import TaskWaiter

MAX_WAIT_MS = 60_000
# A GET with wait_ms watches the workflow's sinks not ended yet (it cannot end before they
# did) and reads its state (its nodes' counts, one grouped read) when one of them may have
# settled (a wake-up of this server's task waiters) or every wait slice (the waiters' own
# re-read: 1 s on SQLite, 0.5 s on MariaDB, which bounds how late a BLOCKED workflow, or a
# sink another replica ended, is seen). Once a sink woke (a chord's callback ended, or was
# cancelled while other nodes run on), or when none is open or more than MAX_WATCHED_SINKS
# are (a wide group), it reads every WAIT_STEP_S instead; the whole workflow once, at the
# end.
WAIT_STEP_S = 0.1
MAX_WATCHED_SINKS = 1000
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
        self._slice_s = WAIT_SLICE_SQLITE_S if is_sqlite(parts.config.db_url) else WAIT_SLICE_S

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
        if q["wait_ms"]:
            await self._settle(principal, workflow_id, q["wait_ms"])
        return JSONResponse(await self.store.call(self.workflows.get, principal, workflow_id))

    async def _settle(self, principal: Principal, workflow_id: str, wait_ms: int) -> None:
        """Return once the workflow ended or is BLOCKED, or ``wait_ms`` passed (see
        WAIT_STEP_S). The sinks are watched before the first state read (one that ended
        between the two reads is seen at the next slice at the latest)."""
        end = time.monotonic() + wait_ms / 1000
        sinks = await self.store.call(self.workflows.open_sinks, principal, workflow_id,
                                      MAX_WATCHED_SINKS + 1)
        watched = sinks if len(sinks) <= MAX_WATCHED_SINKS else []
        event = TaskWaiter()
        waiters = self.parts.waiters
        for task_id in watched:
            waiters.watch(task_id, event)
        try:
            woken = not watched
            state = await self.store.call(self.workflows.state, principal, workflow_id)
            while state not in _SETTLED:
                left = end - time.monotonic()
                if left <= 0:
                    return
                if woken:
                    await asyncio.sleep(min(WAIT_STEP_S, left))
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(event.wait(), min(self._slice_s, left))
                    woken = event.is_set()
                state = await self.store.call(self.workflows.state, principal, workflow_id)
        finally:
            for task_id in watched:
                waiters.unregister(task_id, event)

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
