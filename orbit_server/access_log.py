"""The HTTP access log: one ``http_request`` record per request on ``orbit.access``.

Fields: ``method``, ``path`` (the matched route's template, e.g. ``/v1/tasks/{task_id}``, or
``<unmatched>``), ``status``, ``duration_ms`` and ``client`` (the peer address). Never the
query string or a header: a bearer token or a filter value must not reach the log. uvicorn's
own access log stays off (it writes the raw target, query string included).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orbit_host.logs import fields

__all__ = ["ObservedRequests", "RequestObserver", "access_log_enabled", "log_request",
           "route_path"]

log = logging.getLogger("orbit.access")
UNMATCHED = "<unmatched>"


def route_path(request: HTTPConnection | Mapping[str, Any]) -> str:
    """The template of the route that served ``request`` (no IDs, no query string)."""
    scope = request.scope if isinstance(request, HTTPConnection) else request
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else UNMATCHED


# What a finished HTTP request is handed to: its scope, status and duration in seconds.
RequestObserver = Callable[[Scope, int, float], None]


class ObservedRequests:
    """ASGI middleware: each HTTP request's status and duration go to every observer once it
    ends (the access log, the metrics): one wrapper and one clock pair for all of them."""

    def __init__(self, app: ASGIApp, observers: Sequence[RequestObserver]) -> None:
        self.app = app
        self.observers = tuple(observers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.observers:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server error middleware answers if the app raises

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            seconds = time.perf_counter() - started
            for observe in self.observers:
                observe(scope, status, seconds)


def access_log_enabled() -> bool:
    """Whether ``orbit.access`` writes at INFO (``--no-access-log`` raises it)."""
    return log.isEnabledFor(logging.INFO)


class _Template:
    """The attributes every access record shares, from one record made the stdlib's way:
    a request's record copies them instead of looking up its caller's frame, thread and
    process again (observers run on the event loop's thread), and gets its message
    formatted once, so the formatters find the same record as ``log.info`` would make."""

    fixed: dict[str, Any] | None = None

    @classmethod
    def record(cls, created: float) -> logging.LogRecord:
        fixed = cls.fixed
        if fixed is None:
            fixed = cls.fixed = vars(log.makeRecord(log.name, logging.INFO, __file__, 0, "",
                                                    (), None, "log_request")).copy()
        record = logging.LogRecord.__new__(logging.LogRecord)
        values = record.__dict__
        values.update(fixed)
        values["created"] = created
        values["msecs"] = int((created - int(created)) * 1000) + 0.0
        values["relativeCreated"] = fixed["relativeCreated"] + (created - fixed["created"]) * 1000
        return record


def log_request(scope: Scope, status: int, seconds: float) -> None:
    """The access log's record of one finished request (one ``log.info`` would write, for
    less: it runs for every request)."""
    if not log.isEnabledFor(logging.INFO):
        return
    method, path = scope["method"], route_path(scope)
    duration_ms = round(seconds * 1000, 2)
    client = scope.get("client")
    record = _Template.record(time.time())
    values = record.__dict__
    values["msg"] = f"{method} {path} {status} {duration_ms:.2f} ms"
    values.update(fields("http_request", method=method, path=path, status=status,
                         duration_ms=duration_ms, client=client[0] if client else None))
    log.handle(record)
