"""The HTTP access log: one ``http_request`` record per request on ``orbit.access``.

Fields: ``method``, ``path`` (the matched route's template, e.g. ``/v1/tasks/{task_id}``, or
``<unmatched>``), ``status``, ``duration_ms`` and ``client`` (the peer address). Never the
query string or a header: a bearer token or a filter value must not reach the log. uvicorn's
own access log stays off (it writes the raw target, query string included).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orbit_host.logs import fields

__all__ = ["AccessLog", "route_path"]

log = logging.getLogger("orbit.access")
UNMATCHED = "<unmatched>"


def route_path(request: HTTPConnection | Mapping[str, Any]) -> str:
    """The template of the route that served ``request`` (no IDs, no query string)."""
    scope = request.scope if isinstance(request, HTTPConnection) else request
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else UNMATCHED


class AccessLog:
    """ASGI middleware; a pass-through when ``orbit.access`` is off at INFO."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises before it answers

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            duration_ms = round((time.perf_counter() - started) * 1000, 2)
            method, path = scope["method"], route_path(scope)
            client = scope.get("client")
            log.info("%s %s %d %.2f ms", method, path, status, duration_ms, extra=fields(
                "http_request", method=method, path=path, status=status,
                duration_ms=duration_ms, client=client[0] if client else None))
