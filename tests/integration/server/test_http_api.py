"""The HTTP API of a real server process: routes, roles, errors with stable codes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
from support.orbit_http import OrbitEnv, expect, expect_error, task_spec
from support.waiting import UNIT


def test_queue_credential_submit_get_roundtrip(orbit: OrbitEnv) -> None:
    queue = orbit.queue("orders")
    producer = orbit.producer(queue)
    task = expect(producer.post(f"/v1/queues/{queue}/tasks",
                                json=task_spec(payload={"text": "hi", "n": 12345678901234567})),
                  201)
    assert task["state"] == "PENDING"
    assert task["queue_id"] == queue
    assert task["capability"] == {"handler": "test.echo", "handler_version": "v1",
                                  "payload_version": "v1"}
    assert task["payload"] == {"text": "hi", "n": 12345678901234567}
    assert task["policy"]["idempotency"] == "NON_IDEMPOTENT"
    assert task["attempts"] == 0 and task["result"] is None and task["failure"] is None
    again = expect(producer.get(f"/v1/tasks/{task['id']}"), 200)
    assert again["id"] == task["id"] and again["state"] == "PENDING"
    stats = expect(producer.get(f"/v1/queues/{queue}/stats"), 200)
    assert stats["queue_id"] == queue and stats["counts"].get("PENDING") == 1


def test_operation_key_returns_the_same_task(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    producer = orbit.producer(queue)
    spec = task_spec(operation_key="order-42")
    first = expect(producer.post(f"/v1/queues/{queue}/tasks", json=spec), 201)
    second = expect(producer.post(f"/v1/queues/{queue}/tasks", json=spec), 200)
    assert first["id"] == second["id"]
    assert second["operation_key"] == "order-42"


def test_batch_submit_is_all_or_nothing(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    producer = orbit.producer(queue)
    made = expect(producer.post(f"/v1/queues/{queue}/tasks/batch",
                                json={"tasks": [task_spec(payload={"i": i}) for i in range(50)]}),
                  201)
    assert len(made["tasks"]) == 50
    assert [t["payload"]["i"] for t in made["tasks"]] == list(range(50))
    bad = [task_spec(), task_spec(max_attempts=0), task_spec()]
    err = expect_error(producer.post(f"/v1/queues/{queue}/tasks/batch", json={"tasks": bad}),
                       400, "BAD_REQUEST")
    assert "1" in err["message"]  # the index of the invalid spec
    stats = expect(producer.get(f"/v1/queues/{queue}/stats"), 200)
    assert stats["counts"].get("PENDING") == 50  # nothing of the bad batch was stored


def test_long_poll_returns_after_wait_when_task_stays_pending(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    producer = orbit.producer(queue)
    task = expect(producer.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 201)
    t0 = time.monotonic()
    got = expect(producer.get(f"/v1/tasks/{task['id']}", params={"wait_ms": 300}), 200)
    waited = time.monotonic() - t0
    assert got["state"] == "PENDING"
    assert 0.25 <= waited < 10 * UNIT
    expect_error(producer.get(f"/v1/tasks/{task['id']}", params={"wait_ms": 60001}),
                 400, "BAD_REQUEST")
    expect_error(producer.get(f"/v1/tasks/{task['id']}", params={"wait_ms": "soon"}),
                 400, "BAD_REQUEST")


def test_long_poll_wakes_on_cancel(orbit: OrbitEnv) -> None:
    import threading

    queue = orbit.queue()
    producer = orbit.producer(queue)
    task = expect(producer.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 201)
    timer = threading.Timer(0.3 * UNIT,  # the scenario: a cancel while the poll waits
                            lambda: orbit.admin_http.post(f"/v1/tasks/{task['id']}/cancel"))
    timer.start()
    try:
        t0 = time.monotonic()
        got = expect(producer.get(f"/v1/tasks/{task['id']}", params={"wait_ms": 20000}), 200)
        assert got["state"] == "CANCELLED"
        assert time.monotonic() - t0 < 10 * UNIT
    finally:
        timer.cancel()
        timer.join(10 * UNIT)  # its cancel request ends before the fixture closes the client


def test_cancel_pending_and_terminal_rules(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    producer = orbit.producer(queue)
    task = expect(producer.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 201)
    cancelled = expect(producer.post(f"/v1/tasks/{task['id']}/cancel", json={"reason": "x"}), 200)
    assert cancelled["state"] == "CANCELLED"
    again = expect(producer.post(f"/v1/tasks/{task['id']}/cancel"), 200)  # idempotent
    assert again["state"] == "CANCELLED"
    expect_error(producer.post(f"/v1/tasks/{task['id']}/review", json={"action": "retry"}),
                 409, "CONFLICT")
    audit = expect(producer.get(f"/v1/tasks/{task['id']}/audit"), 200)
    kinds = [e["kind"] for e in audit["events"]]
    assert len(kinds) >= 2, kinds
    assert audit["events"][-1]["to_state"] == "CANCELLED"
    history = expect(producer.get(f"/v1/tasks/{task['id']}/attempts"), 200)
    assert history == {"attempts": [], "evidence": []}


def test_authentication_and_roles(orbit: OrbitEnv) -> None:
    queue, other = orbit.queue(), orbit.queue()
    anon = orbit.client()
    expect_error(anon.post("/v1/queues", json={}), 401, "UNAUTHENTICATED")
    expect_error(orbit.client("nonsense").post("/v1/queues", json={}), 401, "UNAUTHENTICATED")
    expect_error(orbit.client(f"{'0' * 32}.{'1' * 64}").get(f"/v1/queues/{queue}/stats"),
                 401, "UNAUTHENTICATED")
    producer = orbit.producer(queue)
    expect_error(producer.post("/v1/queues", json={}), 403, "PERMISSION_DENIED")
    expect_error(producer.post("/v1/credentials", json={"role": "admin", "queues": []}),
                 403, "PERMISSION_DENIED")
    # Another queue answers as a queue that does not exist (nothing is revealed).
    expect_error(producer.post(f"/v1/queues/{other}/tasks", json=task_spec()),
                 404, "NOT_FOUND")
    worker = orbit.worker_credential(queue)
    expect_error(orbit.client(worker.bearer).post(f"/v1/queues/{queue}/tasks", json=task_spec()),
                 403, "PERMISSION_DENIED")
    # Revocation: the credential stops working.
    made = orbit.credential("producer", [queue])
    revoked_client = orbit.client(f"{made['credential_id']}.{made['secret']}")
    expect(revoked_client.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 201)
    gone = expect(orbit.admin_http.delete(f"/v1/credentials/{made['credential_id']}"), 200)
    assert gone == {"credential_id": made["credential_id"], "revoked": True}
    expect_error(revoked_client.post(f"/v1/queues/{queue}/tasks", json=task_spec()),
                 401, "UNAUTHENTICATED")
    expect_error(orbit.admin_http.post("/v1/credentials", json={"role": "root", "queues": []}),
                 400, "BAD_REQUEST")


def test_bad_bodies_get_typed_errors(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    producer = orbit.producer(queue)
    url = f"/v1/queues/{queue}/tasks"
    headers = {"content-type": "application/json"}
    expect_error(producer.post(url, content=b"{nope", headers=headers), 400, "INVALID_JSON")
    expect_error(producer.post(url, content=b"[1,2]", headers=headers), 400, "BAD_REQUEST")
    expect_error(producer.post(url, json={"handler": "x"}), 400, "BAD_REQUEST")
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    expect_error(producer.post(url, json=task_spec(payload=deep)), 400, "NESTING_TOO_DEEP")
    big_int = b'{"handler":"a","handler_version":"v1","payload_version":"v1","payload":' \
              b'{"n":123456789012345678901234567890}}'
    expect_error(producer.post(url, content=big_int, headers=headers), 400,
                 "NUMBER_OUT_OF_RANGE")
    expect_error(producer.post(url, content=big_int.replace(b"123456789012345678901234567890",
                                                            b"1e999"), headers=headers),
                 400, "NUMBER_OUT_OF_RANGE")
    expect_error(producer.post(url, json=task_spec() | {"payload": None}), 400, "BAD_REQUEST")
    huge = task_spec(payload={"s": "x" * (600 * 1024)})
    expect_error(producer.post(url, json=huge), 413, "PAYLOAD_TOO_LARGE")
    payload_too_big = task_spec(payload={"s": "x" * (300 * 1024)})
    expect_error(producer.post(url, json=payload_too_big), 413, "PAYLOAD_TOO_LARGE")
    # The server keeps serving.
    expect(producer.post(url, json=task_spec()), 201)


def test_unknown_and_malformed_ids(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    producer = orbit.producer(queue)
    expect_error(producer.get(f"/v1/tasks/{'a' * 32}"), 404, "NOT_FOUND")
    expect_error(producer.get("/v1/tasks/not-an-id"), 400, "BAD_REQUEST")
    expect_error(producer.post(f"/v1/tasks/{'a' * 32}/cancel"), 404, "NOT_FOUND")


def test_chunked_body_over_limit_is_refused(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    producer = orbit.producer(queue)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while streaming
        for _ in range(200):
            yield b" " * 4096

    response = producer.post(f"/v1/queues/{queue}/tasks", content=chunks(),
                             headers={"content-type": "application/json"})
    expect_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert isinstance(response, httpx.Response)


def test_unknown_routes_and_methods_answer_in_error_format(orbit: OrbitEnv) -> None:
    client = orbit.client()
    expect_error(client.get("/v2/nothing"), 404, "NOT_FOUND")
    wrong = client.delete("/healthz")
    assert wrong.status_code == 405
    assert wrong.json()["error"]["code"] == "BAD_REQUEST"


def test_query_parameters_are_refused_as_the_document_refuses_them(orbit: OrbitEnv) -> None:
    queue = orbit.queue()
    producer = orbit.producer(queue)
    url = f"/v1/queues/{queue}/throughput"
    assert len(expect(producer.get(url, params={"windows": "5"}), 200)["windows"]) == 5
    # An empty integer is no integer (not "absent"), nor is a superscript digit.
    for params in ({"windows": ""}, {"window_ms": ""}, {"windows": "\u00b2"},
                   {"windows": ["2", "3"]}, {"window": "2"}):
        expect_error(producer.get(url, params=params), 400, "BAD_REQUEST")
    expect_error(producer.get(f"/v1/queues/{queue}/tasks", params={"order": ""}), 400,
                 "BAD_REQUEST")
    expect_error(orbit.admin_http.get("/v1/workers", params={"queue_id": ""}), 400,
                 "BAD_REQUEST")


def test_the_hot_routes_answer_as_the_rest_of_the_app(orbit: OrbitEnv) -> None:
    """The submit and the task read are served ahead of the app's router (http_hot.py); at
    and around their paths every answer is the router's."""
    queue = orbit.queue()
    producer = orbit.producer(queue)
    task = expect(producer.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 201)
    assert expect(producer.get(f"/v1/tasks/{task['id']}"), 200)["id"] == task["id"]
    expect_error(producer.post("/v1/queues/not-an-id/tasks", json=task_spec()), 400,
                 "BAD_REQUEST")
    expect_error(producer.get(f"/v1/tasks/{task['id']}", params={"wait": "1"}), 400,
                 "BAD_REQUEST")
    expect_error(orbit.client().get(f"/v1/tasks/{task['id']}"), 401, "UNAUTHENTICATED")
    expect_error(producer.get("/v1/tasks/"), 404, "NOT_FOUND")
    # A trailing slash is the router's redirect, as on every other route.
    for slashed in (producer.get(f"/v1/tasks/{task['id']}/"),
                    producer.post(f"/v1/queues/{queue}/tasks/", json=task_spec())):
        assert slashed.status_code == 307, slashed
        assert not slashed.headers["location"].endswith("/")
    wrong = producer.put(f"/v1/tasks/{task['id']}", json={})
    assert wrong.status_code == 405 and "GET" in wrong.headers["allow"].split(", ")
    listed = expect(producer.get(f"/v1/queues/{queue}/tasks"), 200)
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert expect(producer.get(f"/v1/tasks/{task['id']}/attempts"), 200)["attempts"] == []
