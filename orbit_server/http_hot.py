"""The hot HTTP routes served ahead of Starlette's middleware and router: a submit
(``POST /v1/queues/{queue_id}/tasks``), a task read and its long poll (``GET
/v1/tasks/{task_id}``).

They are the same ``Route`` objects as in the app, with the same handler, authentication,
errors, OpenAPI entry, access log and metrics: this front only matches their two paths by
splitting the path instead of trying regular expressions, and calls the route's handler
without the middleware layers and the router's per-request wrappers, which cost a submit
about a quarter of its server CPU (docs/benchmarks.md, "Lean hot path"). Every other
request, and any request these two paths would not match the same way (another method, a
root path), goes to the Starlette app unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .access_log import ObservedRequests, RequestObserver

SUBMIT_PATH = "/v1/queues/{queue_id}/tasks"
TASK_PATH = "/v1/tasks/{task_id}"


class HotRoutes:
    """ASGI: the submit and the task read straight to their handlers; the rest to ``app``."""

    def __init__(self, app: Starlette, observers: Sequence[RequestObserver]) -> None:
        self.app = app
        routes = {(method, route.path): route for route in app.routes
                  if isinstance(route, Route) for method in route.methods or ()}
        self._submit = routes["POST", SUBMIT_PATH]
        self._read = routes["GET", TASK_PATH]
        # The same observers as the app's (access log, metrics), timed the same way.
        self._observed = ObservedRequests(self._serve, observers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path") or not self._match(scope):
            await self.app(scope, receive, send)
            return
        await self._observed(scope, receive, send)

    def _match(self, scope: Scope) -> bool:
        """Whether the request is a hot route's; if so, the scope says which (as the
        router would write it: the route, its endpoint, the path parameters)."""
        method = scope["method"]
        if method == "POST":
            parts = scope["path"].split("/")
            if (len(parts) != 5 or parts[4] != "tasks" or parts[2] != "queues"
                    or parts[1] != "v1" or parts[0] or not parts[3]):
                return False
            route, params = self._submit, {"queue_id": parts[3]}
        elif method == "GET":
            parts = scope["path"].split("/")
            if len(parts) != 4 or parts[2] != "tasks" or parts[1] != "v1" or parts[0] \
                    or not parts[3]:
                return False
            route, params = self._read, {"task_id": parts[3]}
        else:
            return False
        scope["app"] = self.app
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = params
        return True

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The handler answers every error itself (http_plumbing.endpoint).
        response = await scope["endpoint"](Request(scope, receive, send))
        await response(scope, receive, send)
