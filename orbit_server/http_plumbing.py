"""The request plumbing every HTTP route shares (docs/http-api.md "Errors"): the route
wrapper, query parameters, path IDs, bodies, JSON answers and the error mapping.

A route's handler is wrapped by ``endpoint``: its query parameters are parsed first as the
route declares them (``domain.query``), then the handler runs; an OrbitError becomes its
status by code, anything else a 500 INTERNAL whose body never holds a traceback (it is
logged). Body sizes are checked before parsing (413 PAYLOAD_TOO_LARGE); bodies are parsed
with orjson (400 INVALID_JSON / NESTING_TOO_DEEP / NUMBER_OUT_OF_RANGE).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from orbit_host.logs import fields
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id
from orbit_wire.jsonvalue import check_int_range, walk_json
from orbit_wire.limits import MAX_VALUE_DEPTH

from .access_log import route_path
from .domain.fields import Body
from .domain.query import Param, parse_query
from .ratelimit import retry_after

log = logging.getLogger("orbit.http")

MAX_BODY_BYTES = 512 * 1024
MAX_BATCH_BODY_BYTES = 16 * 1024 * 1024
# Structural nesting a request body may have around its values (batch → tasks → spec).
_BODY_EXTRA_DEPTH = 4

_STATUS_BY_CODE: dict[ErrorCode, int] = {
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.INSTANCE_CONFLICT: 409,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.STALE_EPOCH: 409,
    ErrorCode.LEASE_EXPIRED: 409,
    ErrorCode.MESSAGE_ID_REUSED: 409,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
}


class JSONResponse(Response):
    """orjson-encoded JSON; ``orjson.Fragment`` values (stored JSON text) pass through exactly."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def status_for(code: ErrorCode) -> int:
    return _STATUS_BY_CODE.get(code, 400)


class RateLimited(OrbitError):
    """429 with a Retry-After header."""

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(ErrorCode.RATE_LIMITED, message)
        self.retry_after = retry_after(wait_s)


def error_response(exc: OrbitError) -> JSONResponse:
    response = JSONResponse({"error": exc.to_dict()}, status_code=status_for(exc.code))
    if isinstance(exc, RateLimited):
        response.headers["Retry-After"] = str(exc.retry_after)
    return response


def bad_request(message: str, code: ErrorCode = ErrorCode.BAD_REQUEST) -> OrbitError:
    return OrbitError(code, message)


# ------------------------------------------------------------------ the route wrapper

Handler = Callable[[Request], Awaitable[Response]]
# A route's handler: the request and its query parameters as the route declared them.
Params = dict[str, Any]
RouteHandler = Callable[[Request, Params], Awaitable[Response]]


def endpoint(fn: RouteHandler, query: Sequence[Param] = ()) -> Handler:
    """Parse the query parameters ``query`` declares (any other is refused, before
    authentication), call ``fn``; map OrbitError to its status and anything else to a 500
    without a traceback."""

    async def wrapped(request: Request) -> Response:
        try:
            raw = request.query_params
            params = parse_query({key: raw.getlist(key) for key in raw}, query)
            return await fn(request, params)
        except OrbitError as exc:
            return error_response(exc)
        except Exception:
            log.exception("unhandled error in %s %s", request.method, route_path(request),
                          extra=fields("http_unhandled_error", method=request.method,
                                       path=route_path(request)))
            return error_response(OrbitError(ErrorCode.INTERNAL, "internal server error"))

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    wrapped.__dict__["query"] = tuple(query)  # what the route declares (a test reads it)
    return wrapped


def path_id(request: Request, key: str) -> str:
    value = request.path_params[key]
    if not is_id(value):
        raise bad_request(f"{key} must be a 32-character lowercase hex ID")
    return str(value)


# ------------------------------------------------------------------ bodies

def parse_json_body(body: bytes) -> Any:
    """Parse a request body; raise OrbitError with INVALID_JSON / NESTING_TOO_DEEP /
    NUMBER_OUT_OF_RANGE. An empty body is an empty object."""
    if not body.strip():
        return {}
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth" in exc.msg or "recursion" in exc.msg:
            raise bad_request("request body is nested too deeply",
                              ErrorCode.NESTING_TOO_DEEP) from None
        if "infinity" in exc.msg:
            raise bad_request("request body has a number out of range",
                              ErrorCode.NUMBER_OUT_OF_RANGE) from None
        raise bad_request(f"request body is not valid JSON: {exc.msg}",
                          ErrorCode.INVALID_JSON) from None
    check_int_range(body, what="request body")
    walk_json(value, what="request body", max_depth=MAX_VALUE_DEPTH + _BODY_EXTRA_DEPTH)
    return value


async def read_body(request: Request, limit: int) -> bytes:
    """Read at most ``limit`` bytes; refuse larger bodies before reading them when possible."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise bad_request("Content-Length is not a number")
        if int(declared) > limit:
            raise bad_request(f"request body is {declared} bytes; at most {limit}",
                              ErrorCode.PAYLOAD_TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise bad_request(f"request body is larger than {limit} bytes",
                                  ErrorCode.PAYLOAD_TOO_LARGE)
            chunks.append(chunk)
    except ClientDisconnect:
        # The peer went away, or http_transport closed it for a body that did not arrive
        # in time (it logged that): nothing to answer and nothing to log again.
        raise bad_request("the connection closed before the request body arrived") from None
    return b"".join(chunks)


async def json_body(request: Request, limit: int = MAX_BODY_BYTES) -> Any:
    """The request body read (within ``limit``) and parsed as JSON."""
    return parse_json_body(await read_body(request, limit))


async def object_body(request: Request, what: str) -> dict[str, Any]:
    """A body that must be a JSON object (``what`` names it in the refusal); its fields are
    checked by the use case."""
    value = await json_body(request)
    if not isinstance(value, dict):
        raise bad_request(f"{what} must be a JSON object")
    return value


async def shaped_body(request: Request, shape: Body[Any], limit: int = MAX_BODY_BYTES
                      ) -> dict[str, Any]:
    """Read, parse and check a body against its declared shape (the one openapi.py shows)."""
    return shape.parse(await json_body(request, limit), "request body")


# ------------------------------------------------------------------ Starlette's own errors

async def _starlette_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods answer in the API's error format too."""
    status = getattr(exc, "status_code", 500)
    if status == 404:
        return error_response(OrbitError(ErrorCode.NOT_FOUND, f"no route {request.url.path}"))
    if status == 405:
        # Each method is its own Route: the Allow header is every route's on this path.
        path = request.url.path
        allowed = sorted({method for route in request.app.router.routes
                          if isinstance(route, Route) and route.path_regex.match(path)
                          for method in route.methods or ()})
        return JSONResponse({"error": OrbitError(
            ErrorCode.BAD_REQUEST, f"method {request.method} is not allowed here").to_dict()},
            status_code=405, headers={"Allow": ", ".join(allowed)})
    log.error("unhandled HTTP error %s on %s", status, route_path(request),
              extra=fields("http_unhandled_error", method=request.method,
                           path=route_path(request), status=status))
    return error_response(OrbitError(ErrorCode.INTERNAL, "internal server error"))


def http_exception_handlers(
) -> dict[int | type[Exception], Callable[[Request, Exception], Awaitable[Response]]]:
    """Starlette exception handlers that keep every error in ``{"error": {...}}`` form."""
    return {404: _starlette_error, 405: _starlette_error}
