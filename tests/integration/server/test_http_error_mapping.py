"""The HTTP error mapping of the adapters, in process: OrbitError → status by code, any other
exception → 500 INTERNAL without a traceback in the body, body limits before parsing."""

from __future__ import annotations

import warnings

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

with warnings.catch_warnings():  # starlette suggests another httpx package; httpx works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from orbit_server.http_plumbing import (
    MAX_BODY_BYTES,
    JSONResponse,
    Params,
    endpoint,
    parse_json_body,
    read_body,
    status_for,
)
from orbit_wire.errors import ErrorCode, OrbitError


async def _boom(request: Request, _query: Params) -> Response:
    raise RuntimeError("secret-token-123 leaked in a message")


async def _denied(request: Request, _query: Params) -> Response:
    raise OrbitError(ErrorCode.PERMISSION_DENIED, "no")


async def _echo(request: Request, _query: Params) -> Response:
    return JSONResponse(parse_json_body(await read_body(request, MAX_BODY_BYTES)))


@pytest.fixture
def client() -> TestClient:
    app = Starlette(routes=[Route("/boom", endpoint(_boom)), Route("/denied", endpoint(_denied)),
                            Route("/echo", endpoint(_echo), methods=["POST"])])
    return TestClient(app, raise_server_exceptions=False)


def test_unexpected_exception_is_500_without_details(client: TestClient,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    response = client.get("/boom")
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "INTERNAL", "message": "internal server error",
                                         "retryable": True}}
    assert "secret-token" not in response.text and "Traceback" not in response.text
    assert any("unhandled error" in r.getMessage() for r in caplog.records)  # logged instead


def test_orbit_error_maps_to_status(client: TestClient) -> None:
    response = client.get("/denied")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "PERMISSION_DENIED"


@pytest.mark.parametrize(("code", "status"), [
    (ErrorCode.BAD_REQUEST, 400), (ErrorCode.INVALID_JSON, 400),
    (ErrorCode.NESTING_TOO_DEEP, 400), (ErrorCode.NUMBER_OUT_OF_RANGE, 400),
    (ErrorCode.PAYLOAD_TOO_LARGE, 413), (ErrorCode.UNAUTHENTICATED, 401),
    (ErrorCode.PERMISSION_DENIED, 403), (ErrorCode.NOT_FOUND, 404), (ErrorCode.CONFLICT, 409),
    (ErrorCode.UNAVAILABLE, 503), (ErrorCode.INTERNAL, 500),
])
def test_status_table(code: ErrorCode, status: int) -> None:
    assert status_for(code) == status


def test_body_limits_and_parse_errors(client: TestClient) -> None:
    assert client.post("/echo", content=b'{"a": 1.50}').content == b'{"a":1.5}'
    too_big = client.post("/echo", content=b" " * (MAX_BODY_BYTES + 1))
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    bad = client.post("/echo", content=b"{")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_JSON"
    deep = client.post("/echo", content=b"[" * 2000 + b"]" * 2000)
    assert deep.json()["error"]["code"] == "NESTING_TOO_DEEP"
    wide = client.post("/echo", content=b'{"n": -99999999999999999999}')
    assert wide.json()["error"]["code"] == "NUMBER_OUT_OF_RANGE"
    in_string = client.post("/echo", content=b'{"s": "99999999999999999999"}')
    assert in_string.status_code == 200  # digits inside a string are not a number
