"""Authentication of HTTP requests (docs/security.md "What is checked where"): the bearer
token from the headers alone, before any body is read, through the verified-token cache and
the one failed-login budget (``ServerParts.logins``) every route and the worker hello share.

A request without a body authenticates and runs its use case in ONE hop while its token is
cached (``Authenticator.run_as``); one with a body authenticates first (``principal``), so an
unauthenticated peer cannot make the server read or hold a body.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from starlette.requests import HTTPConnection

from orbit_wire.errors import AuthError, ErrorCode, OrbitError

from .auth import Principal
from .http_plumbing import RateLimited
from .parts import ServerParts

P = ParamSpec("P")
T = TypeVar("T")


def bearer_token(request: HTTPConnection) -> str:
    """The token of ``Authorization: Bearer <token>``; UNAUTHENTICATED without one."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError(ErrorCode.UNAUTHENTICATED, "missing Authorization: Bearer credential")
    return token.strip()


class Authenticator:
    """Who a request is, from its headers; what the routes of every group share."""

    def __init__(self, parts: ServerParts) -> None:
        self._store = parts.store
        self._admin = parts.services.admin
        self._logins = parts.logins

    async def principal(self, request: HTTPConnection) -> Principal:
        """Authenticate the request from its headers alone (before any body is read)."""
        bearer = bearer_token(request)
        principal = self._admin.cached_principal(bearer)
        if principal is None:
            principal = await self._verify(request, bearer)
        return principal

    def cached(self, request: HTTPConnection) -> Principal | None:
        """The request's principal if its token was verified lately (no store hop), else
        None (``principal`` verifies it)."""
        try:
            return self._admin.cached_principal(bearer_token(request))
        except OrbitError:
            return None

    async def _verify(self, request: HTTPConnection, bearer: str) -> Principal:
        """Verify on the store thread, unless this credential ID or peer failed too often
        lately (429 with Retry-After); a failure spends from both budgets."""
        peer = request.client.host if request.client is not None else "?"
        keys = self._logins.keys(bearer.partition(".")[0], peer)
        now = time.monotonic()
        wait = self._logins.wait_s(keys, now)
        if wait > 0:
            raise RateLimited("too many failed authentications; retry later", wait)
        try:
            return await self._store.call(self._admin.authenticate, bearer)
        except AuthError:
            self._logins.failed(keys, now)
            raise

    async def run_as(self, request: HTTPConnection, fn: Callable[Concatenate[Principal, P], T], /,
                     *args: P.args, **kwargs: P.kwargs) -> T:
        """Authenticate, then run ``fn(principal, *args)`` on the store thread: one hop while
        the token is cached, two when it must be verified (through the failure budget)."""
        principal = await self.principal(request)
        return await self._store.call(fn, principal, *args, **kwargs)
