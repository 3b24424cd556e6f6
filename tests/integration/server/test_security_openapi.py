"""Finding 10 of the security review, on a real server: the OpenAPI document says what the
server accepts. Names are validated as documented (minLength, pattern), null is refused
where a value is required, unknown fields are refused and documented as such, a 405 says
which methods the path has, and a plain GET /v1/worker gets the documented 426."""

from __future__ import annotations

from support.orbit_http import OrbitEnv, expect, expect_error, task_spec


def test_the_document_and_the_server_agree(orbit: OrbitEnv) -> None:
    doc = expect(orbit.client().get("/openapi.json"), 200)
    schemas = doc["components"]["schemas"]
    spec = schemas["TaskSpec"]
    assert spec["additionalProperties"] is False
    assert spec["properties"]["handler"]["minLength"] == 1
    # Whole strings only, in ECMA's reading and in Python's (whose $ also matches before a
    # final newline): the server refuses "h\n" and the document says so.
    assert spec["properties"]["handler"]["pattern"] == "^[A-Za-z0-9._:/-]+$(?!\\n)"
    assert schemas["QueueRequest"]["properties"]["name"]["type"] == "string"
    queue = orbit.queue()
    producer = orbit.producer(queue)
    for bad in ({"handler": ""}, {"handler": None}, {"max_attempts": None},
                {"unknown": 1}, {"backoff": {"jitter": None}}):
        expect_error(producer.post(f"/v1/queues/{queue}/tasks", json={**task_spec(), **bad}),
                     400, "BAD_REQUEST")
    for body in ({"name": None}, {"name": ""}, {"name": "q", "extra": True}):
        expect_error(orbit.admin_http.post("/v1/queues", json=body), 400, "BAD_REQUEST")
    expect_error(orbit.admin_http.post("/v1/credentials", json={"role": "admin", "name": None}),
                 400, "BAD_REQUEST")
    # 405 names every method of the path (each is its own route).
    answer = orbit.admin_http.delete("/v1/queues")
    assert answer.status_code == 405
    assert set(answer.headers["allow"].split(", ")) >= {"GET", "POST"}
    # A plain GET of the WebSocket endpoint: the 426 the document describes.
    assert "426" in doc["paths"]["/v1/worker"]["get"]["responses"]
    plain = orbit.client().get("/v1/worker")
    assert plain.status_code == 426 and plain.headers["upgrade"] == "websocket"
    assert plain.json()["error"]["code"] == "BAD_REQUEST"
