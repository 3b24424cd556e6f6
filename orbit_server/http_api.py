"""Thin Starlette routes for docs/http-api.md: parse, authenticate, one use case, encode.

Every use case runs on the store thread. A request without a body authenticates and runs its
operation in ONE hop (``HttpApi._as``); a request with a body is authenticated BEFORE its
body is read (``HttpApi._principal``: no store hop while the token is in the verified-token
cache), so an unauthenticated peer cannot make the server read or hold a body. Body
sizes are checked before parsing (413 PAYLOAD_TOO_LARGE), bodies are parsed with orjson (400
INVALID_JSON / NESTING_TOO_DEEP / NUMBER_OUT_OF_RANGE), OrbitError maps to a status by code,
and anything else is a 500 INTERNAL whose body never holds a traceback (it is logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from orbit_host.logs import fields
from orbit_wire.errors import AuthError, ErrorCode, OrbitError
from orbit_wire.frames import Reserve
from orbit_wire.ids import is_id
from orbit_wire.jsonvalue import check_int_range, walk_json
from orbit_wire.limits import MAX_VALUE_DEPTH
from orbit_wire.model import Capability, Role, TaskState

from .access_log import route_path
from .auth import Principal, require_role
from .domain import bodies
from .domain.fields import Body
from .domain.listing import parse_filter
from .openapi import openapi_document
from .parts import ServerParts
from .ratelimit import Buckets, retry_after
from .services import Effects, Reservations, Submitted

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger("orbit.http")

MAX_BODY_BYTES = 512 * 1024
MAX_BATCH_BODY_BYTES = 16 * 1024 * 1024
MAX_WAIT_MS = 60_000
MAX_THROUGHPUT_WINDOWS = 120
# A long poll re-reads the task at least this often even without a local wake-up, so a task
# finished through another replica sharing the database is still seen.
WAIT_SLICE_S = 1.0
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


def _bad(message: str, code: ErrorCode = ErrorCode.BAD_REQUEST) -> OrbitError:
    return OrbitError(code, message)


def parse_json_body(body: bytes) -> Any:
    """Parse a request body; raise OrbitError with INVALID_JSON / NESTING_TOO_DEEP /
    NUMBER_OUT_OF_RANGE. An empty body is an empty object."""
    if not body.strip():
        return {}
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth" in exc.msg or "recursion" in exc.msg:
            raise _bad("request body is nested too deeply", ErrorCode.NESTING_TOO_DEEP) from None
        if "infinity" in exc.msg:
            raise _bad("request body has a number out of range",
                       ErrorCode.NUMBER_OUT_OF_RANGE) from None
        raise _bad(f"request body is not valid JSON: {exc.msg}", ErrorCode.INVALID_JSON) from None
    check_int_range(body, what="request body")
    walk_json(value, what="request body", max_depth=MAX_VALUE_DEPTH + _BODY_EXTRA_DEPTH)
    return value


async def read_body(request: Request, limit: int) -> bytes:
    """Read at most ``limit`` bytes; refuse larger bodies before reading them when possible."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise _bad("Content-Length is not a number")
        if int(declared) > limit:
            raise _bad(f"request body is {declared} bytes; at most {limit}",
                       ErrorCode.PAYLOAD_TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _bad(f"request body is larger than {limit} bytes",
                           ErrorCode.PAYLOAD_TOO_LARGE)
            chunks.append(chunk)
    except ClientDisconnect:
        # The peer went away, or http_transport closed it for a body that did not arrive
        # in time (it logged that): nothing to answer and nothing to log again.
        raise _bad("the connection closed before the request body arrived") from None
    return b"".join(chunks)


def _obj(value: Any, what: str = "request body") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(f"{what} must be a JSON object")
    return value


async def _body(request: Request, shape: Body[Any], limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """Read, parse and check a body against its declared shape (the one openapi.py shows)."""
    return shape.parse(parse_json_body(await read_body(request, limit)), "request body")


def _path_id(request: Request, key: str) -> str:
    value = request.path_params[key]
    if not is_id(value):
        raise _bad(f"{key} must be a 32-character lowercase hex ID")
    return str(value)


Handler = Callable[[Request], Awaitable[Response]]


def _endpoint(fn: Handler) -> Handler:
    """Map OrbitError to its status and anything else to a 500 without a traceback."""

    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except OrbitError as exc:
            return error_response(exc)
        except Exception:
            log.exception("unhandled error in %s %s", request.method, route_path(request),
                          extra=fields("http_unhandled_error", method=request.method,
                                       path=route_path(request)))
            return error_response(OrbitError(ErrorCode.INTERNAL, "internal server error"))

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


class HttpApi:
    """The route handlers; each holds no state beyond the server parts it serves with."""

    def __init__(self, parts: ServerParts) -> None:
        self.parts = parts
        cfg = parts.config
        # Failed authentications, by credential ID and by peer address (one bucket set each).
        self._auth_failures = Buckets(cfg.auth_failures_per_s, cfg.auth_failures_burst)
        self._submits = Buckets(cfg.submits_per_s, cfg.submits_burst)
        self.store = parts.store
        self.admin = parts.services.admin
        self.tasks = parts.services.tasks
        self.listing = parts.services.listing
        self._openapi = orjson.dumps(openapi_document())

    def _bearer(self, request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(ErrorCode.UNAUTHENTICATED, "missing Authorization: Bearer credential")
        return token.strip()

    async def _principal(self, request: Request) -> Principal:
        """Authenticate the request from its headers alone (before any body is read)."""
        bearer = self._bearer(request)
        principal = self.admin.cached_principal(bearer)
        if principal is None:
            principal = await self._authenticate(request, bearer)
        return principal

    def _auth_keys(self, request: Request, bearer: str) -> tuple[str, str]:
        peer = request.client.host if request.client is not None else "?"
        return f"id:{bearer.partition('.')[0][:64]}", f"peer:{peer}"

    async def _authenticate(self, request: Request, bearer: str) -> Principal:
        """Verify on the store thread, unless this credential ID or peer failed too often
        lately (429 with Retry-After); a failure spends from both buckets."""
        keys = self._auth_keys(request, bearer)
        now = time.monotonic()
        wait = max(self._auth_failures.wait_s(key, now) for key in keys)
        if wait > 0:
            raise RateLimited("too many failed authentications; retry later", wait)
        try:
            return await self.store.call(self.admin.authenticate, bearer)
        except AuthError:
            for key in keys:
                self._auth_failures.spend(key, now)
            raise

    def _check_submit_rate(self, principal: Principal, count: int) -> None:
        wait = self._submits.take(principal.credential_id, time.monotonic(), count)
        if wait > 0:
            raise RateLimited(f"credential submits more than {self._submits.rate:g} tasks/s",
                              wait)

    async def _as(self, request: Request, fn: Callable[Concatenate[Principal, P], T], /,
                  *args: P.args, **kwargs: P.kwargs) -> T:
        """Authenticate, then run ``fn(principal, *args)`` on the store thread: one hop while
        the token is cached, two when it must be verified (through the failure limit)."""
        principal = await self._principal(request)
        return await self.store.call(fn, principal, *args, **kwargs)

    # -------------------------------------------------------------- public

    async def worker_without_upgrade(self, request: Request) -> Response:
        """``/v1/worker`` asked without a WebSocket upgrade: 426 saying what to do."""
        response = error_response(OrbitError(
            ErrorCode.BAD_REQUEST, "/v1/worker speaks the worker protocol over a WebSocket "
            "(docs/protocol.md): send an Upgrade: websocket request"))
        response.status_code = 426
        response.headers["Upgrade"] = "websocket"
        response.headers["Connection"] = "Upgrade"
        return response

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def openapi(self, request: Request) -> Response:
        return Response(self._openapi, media_type="application/json")

    # -------------------------------------------------------------- admin

    async def create_queue(self, request: Request) -> Response:
        principal = await self._principal(request)
        body = await _body(request, bodies.QUEUE_REQUEST)
        name = body.get("name")
        queue = await self.store.call(self.admin.create_queue, principal, name)
        return JSONResponse(queue, status_code=201)

    async def create_credential(self, request: Request) -> Response:
        principal = await self._principal(request)
        body = bodies.parse_credential_request(parse_json_body(
            await read_body(request, MAX_BODY_BYTES)))
        made = await self.store.call(self.admin.create_credential, principal, body["role"],
                                     body.get("queues", []), body.get("name"),
                                     body.get("expires_at_ms"))
        return JSONResponse(made, status_code=201)

    async def revoke_credential(self, request: Request) -> Response:
        credential_id = _path_id(request, "credential_id")
        answer, effects = await self._as(request, self.admin.revoke_credential, credential_id)
        self.parts.apply(effects)
        return JSONResponse(answer)

    async def list_credentials(self, request: Request) -> Response:
        return JSONResponse(await self._as(request, self.admin.list_credentials))

    async def rotate_credential(self, request: Request) -> Response:
        credential_id = _path_id(request, "credential_id")
        principal = await self._principal(request)
        body = await _body(request, bodies.ROTATE_REQUEST)
        answer, effects = await self.store.call(self.admin.rotate_credential, principal,
                                                credential_id, body.get("grace_ms", 0),
                                                body.get("expires_at_ms"))
        self.parts.apply(effects)
        return JSONResponse(answer)

    async def queue_stats(self, request: Request) -> Response:
        queue_id = _path_id(request, "queue_id")
        return JSONResponse(await self._as(request, self.tasks.queue_stats, queue_id))

    # -------------------------------------------------------------- lists

    async def list_queues(self, request: Request) -> Response:
        _no_params(request)
        return JSONResponse(await self._as(request, self.listing.list_queues))

    async def list_tasks(self, request: Request) -> Response:
        queue_id = _path_id(request, "queue_id")
        params = request.query_params
        filt = parse_filter({key: params.getlist(key) for key in params})
        return JSONResponse(await self._as(request, self.listing.list_tasks, queue_id, filt))

    async def list_workers(self, request: Request) -> Response:
        params = request.query_params
        unknown = sorted(k for k in params if k != "queue_id")
        if unknown:
            raise _bad(f"unknown parameter(s): {', '.join(unknown)}")
        queue_id = params.get("queue_id")
        if queue_id is not None and not is_id(queue_id):
            raise _bad("queue_id must be a 32-character lowercase hex ID")
        return JSONResponse(await self._as(request, self.listing.list_workers, queue_id))

    async def throughput(self, request: Request) -> Response:
        queue_id = _path_id(request, "queue_id")
        params = request.query_params
        unknown = sorted(k for k in params if k not in ("window_ms", "windows"))
        if unknown:
            raise _bad(f"unknown parameter(s): {', '.join(unknown)}")
        window_ms = _query_int(request, "window_ms", 1_000, 86_400_000, 60_000)
        windows = _query_int(request, "windows", 1, MAX_THROUGHPUT_WINDOWS, 30)
        return JSONResponse(await self._as(request, self.listing.throughput, queue_id,
                                           window_ms, windows))

    async def me(self, request: Request) -> Response:
        """The credential the request authenticated with (no secret): what the dashboard
        shows and offers (review actions only to the roles that may review)."""
        _no_params(request)
        principal = await self._principal(request)
        require_role(principal, (Role.ADMIN, Role.PRODUCER))
        return JSONResponse({"credential_id": principal.credential_id,
                             "role": principal.role.value,
                             "queues": sorted(principal.queues)})

    # -------------------------------------------------------------- producer

    async def submit(self, request: Request) -> Response:
        queue_id = _path_id(request, "queue_id")
        principal = await self._principal(request)
        self._check_submit_rate(principal, 1)
        spec = _obj(parse_json_body(await read_body(request, MAX_BODY_BYTES)), "TaskSpec")
        made, effects = await self._submit_one(principal, queue_id, spec)
        self.parts.apply(effects)
        task, created = made[0]
        return JSONResponse(task, status_code=201 if created else 200)

    async def _submit_one(self, principal: Principal, queue_id: str,
                          spec: dict[str, Any]) -> tuple[Submitted, Effects]:
        """Submit one task; when a worker of the queue waits with credit for its capability,
        claim for it in the submit's own transaction and send its ``reserve`` frame at once
        (one store hop and one commit less between a submit and its dispatch)."""
        dispatcher = self.parts.dispatcher
        session = None
        handler, version, payload_version = (spec.get("handler"), spec.get("handler_version"),
                                             spec.get("payload_version"))
        if (isinstance(handler, str) and isinstance(version, str)
                and isinstance(payload_version, str)):
            session = dispatcher.idle_session(queue_id,
                                              Capability(handler, version, payload_version))
        if session is None:
            return await self.store.call(self.tasks.submit, principal, queue_id, [spec])
        submit = self.tasks.submit_and_reserve
        async with session.lock:
            wanted = dispatcher.claim_size(session)
            binding = session.binding

            def run() -> tuple[Submitted, Effects, Reservations]:
                return submit(principal, queue_id, [spec], binding, wanted)

            # The worker lane, like every claim: a release for this session (its connection
            # closing) is submitted later and so runs after this reserve (FIFO per lane).
            made, effects, reservations = await self.store.call_worker(run)
            dispatcher.book_reserved(session, wanted, reservations)
            if reservations:
                session.send(Reserve(tuple(reservations)))
        return made, effects

    async def submit_batch(self, request: Request) -> Response:
        queue_id = _path_id(request, "queue_id")
        principal = await self._principal(request)
        body = await _body(request, bodies.BATCH_SHAPE, MAX_BATCH_BODY_BYTES)
        specs = body["tasks"]
        self._check_submit_rate(principal, len(specs))
        made, effects = await self.store.call(self.tasks.submit, principal, queue_id, specs)
        self.parts.apply(effects)
        return JSONResponse({"tasks": [task for task, _created in made]}, status_code=201)

    async def get_task(self, request: Request) -> Response:
        task_id = _path_id(request, "task_id")
        wait_ms = _wait_ms(request)
        if wait_ms == 0:
            return JSONResponse(await self._as(request, self.tasks.get_task, task_id))
        return JSONResponse(await self._wait_for_task(request, task_id, wait_ms))

    async def _wait_for_task(self, request: Request, task_id: str,
                             wait_ms: int) -> dict[str, Any]:
        """Read the task until it is terminal or NEEDS_REVIEW, or ``wait_ms`` has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        waiters = self.parts.waiters
        event = waiters.register(task_id)  # before the read, so no wake-up is missed
        try:
            principal = await self._principal(request)
            task = await self.store.call(self.tasks.get_task, principal, task_id)
            while not TaskState(task["state"]).settled:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(remaining, WAIT_SLICE_S))
                view, event.view = event.view, None
                event.clear()
                if view is not None and TaskState(view["state"]).settled:
                    # Read in the transaction that ended the task, for a task this caller
                    # was already allowed to read: no second read needed.
                    task = view
                    break
                task = await self.store.call(self.tasks.get_task, principal, task_id)
            return task
        finally:
            waiters.unregister(task_id, event)

    async def cancel_task(self, request: Request) -> Response:
        task_id = _path_id(request, "task_id")
        principal = await self._principal(request)
        body = await _body(request, bodies.CANCEL_REQUEST)
        task, effects = await self.store.call(self.tasks.cancel_task, principal, task_id,
                                              body.get("reason"))
        self.parts.apply(effects)
        return JSONResponse(task)

    async def list_attempts(self, request: Request) -> Response:
        task_id = _path_id(request, "task_id")
        return JSONResponse(await self._as(request, self.tasks.list_attempts, task_id))

    async def audit_trail(self, request: Request) -> Response:
        task_id = _path_id(request, "task_id")
        return JSONResponse(await self._as(request, self.tasks.audit_trail, task_id))

    async def review(self, request: Request) -> Response:
        task_id = _path_id(request, "task_id")
        principal = await self._principal(request)
        body = bodies.parse_review_request(parse_json_body(
            await read_body(request, MAX_BODY_BYTES)))
        task, effects = await self.store.call(self.tasks.review, principal, task_id,
                                              body["action"], body.get("result"),
                                              body.get("reason"))
        self.parts.apply(effects)
        return JSONResponse(task)


def _no_params(request: Request) -> None:
    if request.query_params:
        raise _bad(f"unknown parameter(s): {', '.join(sorted(request.query_params))}")


def _query_int(request: Request, key: str, lo: int, hi: int, default: int) -> int:
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not lo <= int(raw) <= hi:
        raise _bad(f"{key} must be an integer in [{lo}, {hi}]")
    return int(raw)


def _wait_ms(request: Request) -> int:
    raw = request.query_params.get("wait_ms")
    if raw is None:
        return 0
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_WAIT_MS:
        raise _bad(f"wait_ms must be an integer in [0, {MAX_WAIT_MS}]")
    return int(raw)


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


def http_routes(parts: ServerParts) -> list[Route]:
    """Every HTTP route (the OpenAPI document must list each one; a test checks it)."""
    api = HttpApi(parts)
    e = _endpoint
    return [
        # The router tries routes in order: a producer's submit and long poll come first.
        Route("/v1/queues/{queue_id}/tasks", e(api.submit), methods=["POST"]),
        Route("/v1/tasks/{task_id}", e(api.get_task), methods=["GET"]),
        Route("/healthz", e(api.healthz), methods=["GET"]),
        Route("/openapi.json", e(api.openapi), methods=["GET"]),
        # HTTP requests only; the WebSocket route of the same path (app.py) takes upgrades.
        Route("/v1/worker", e(api.worker_without_upgrade), methods=["GET"]),
        Route("/v1/queues", e(api.create_queue), methods=["POST"]),
        Route("/v1/queues", e(api.list_queues), methods=["GET"]),
        Route("/v1/queues/{queue_id}/tasks", e(api.list_tasks), methods=["GET"]),
        Route("/v1/workers", e(api.list_workers), methods=["GET"]),
        Route("/v1/queues/{queue_id}/stats", e(api.queue_stats), methods=["GET"]),
        Route("/v1/queues/{queue_id}/throughput", e(api.throughput), methods=["GET"]),
        Route("/v1/me", e(api.me), methods=["GET"]),
        Route("/v1/credentials", e(api.create_credential), methods=["POST"]),
        Route("/v1/credentials", e(api.list_credentials), methods=["GET"]),
        Route("/v1/credentials/{credential_id}/rotate", e(api.rotate_credential),
              methods=["POST"]),
        Route("/v1/credentials/{credential_id}", e(api.revoke_credential), methods=["DELETE"]),
        Route("/v1/queues/{queue_id}/tasks/batch", e(api.submit_batch), methods=["POST"]),
        Route("/v1/tasks/{task_id}/cancel", e(api.cancel_task), methods=["POST"]),
        Route("/v1/tasks/{task_id}/attempts", e(api.list_attempts), methods=["GET"]),
        Route("/v1/tasks/{task_id}/audit", e(api.audit_trail), methods=["GET"]),
        Route("/v1/tasks/{task_id}/review", e(api.review), methods=["POST"]),
    ]
