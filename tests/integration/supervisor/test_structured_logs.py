"""``--log-format json`` on a real orbit-server and a real orbit-supervise: every line either
writes is one JSON record with ``ts``, ``level``, ``logger``, ``event`` and ``message``, and
the IDs an operator joins on are fields: ``task_id`` on attempt start, end and kill records,
``attempt_id`` on a child's output and traceback, ``instance_id``/``queue_id`` on worker
connects and lease expiries. The access log names routes, never query strings; no record
holds a secret."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
from collections.abc import Callable
from typing import Any

import pytest
from supervisor_support import SupEnv, attempts, submit, wait_task
from support.orbit_http import expect, task_spec
from support.protocol_client import ProtocolClient
from support.server import ServerProcess

REQUIRED = {"ts", "level", "logger", "event", "message"}
EVENT = re.compile(r"[a-z][a-z0-9_]*")


@pytest.fixture
def server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    return server_factory(extra_args=("--log-format", "json"))


def records(text: str) -> list[dict[str, Any]]:
    """Every line of a log as a record; fails on the first line that is not one."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"line {number} is not JSON: {line!r}")
        assert isinstance(record, dict) and set(record) >= REQUIRED, (number, line)
        assert EVENT.fullmatch(record["event"]), (number, line)
        assert isinstance(record["ts"], float | int), (number, line)
        out.append(record)
    return out


def one(found: list[dict[str, Any]], **want: Any) -> dict[str, Any]:
    hits = [r for r in found if all(r.get(k) == v for k, v in want.items())]
    assert len(hits) == 1, (want, hits)
    return hits[0]


def test_both_processes_write_one_json_record_per_line(sup_env: SupEnv) -> None:
    orbit, producer, queue_id = sup_env.orbit, sup_env.producer, sup_env.queue_id
    server = orbit.server
    sup = sup_env.start(workers=1, extra=("--log-format", "json"))
    ok = submit(producer, queue_id, "upper", {"text": "fine"})
    raised = submit(producer, queue_id, "key_error", {"secret": "payload-key"}, max_attempts=1)
    chatty = submit(producer, queue_id, "chatter", {"n": 7})
    killed = submit(producer, queue_id, "sleep", {"seconds": 30}, attempt_timeout_ms=500,
                    lease_ttl_ms=2000, max_attempts=1)
    for task_id in (ok, raised, chatty, killed):
        wait_task(producer, task_id, timeout_s=30)
    # A query string that must stay out of the access log.
    expect(producer.get(f"/v1/tasks/{ok}", params={"wait_ms": 1}), 200)
    ids = {t: attempts(producer, t)["attempts"][0]["id"] for t in (ok, raised, chatty, killed)}
    lapsed = asyncio.run(_lapsed_lease(sup_env))
    _bad_http_request(server.port)
    sup.send(signal.SIGTERM)
    assert sup.wait(30) == 0, sup.log()[-3000:]
    server.stop()

    bearer = producer.headers["authorization"].split()[1]  # credential_id.secret
    secrets = [orbit.admin.secret, bearer, bearer.split(".")[1],
               _secret(sup_env.credentials_file.read_text())]
    sup_log, server_log = sup.log(), server.log_path.read_text()
    for secret in secrets:
        assert secret not in sup_log and secret not in server_log

    # --- the supervisor
    found = records(sup_log)
    assert found[-1]["event"] == "exit" and found[-1]["exit_code"] == 0, found[-1]
    assert found[-1]["message"].startswith("drained started=4 ")
    for task_id, attempt_id in ids.items():
        for event in ("attempt_started", "attempt_ended"):
            one(found, event=event, task_id=task_id, attempt_id=attempt_id)
    assert one(found, event="attempt_ended", task_id=ok)["outcome"] == "SUCCEEDED"
    kill = one(found, event="child_killed", task_id=killed)
    assert kill["attempt_id"] == ids[killed] and kill["reason"] == "ATTEMPT_TIMEOUT", kill
    trace = one(found, event="handler_raised", attempt_id=ids[raised])
    assert trace["task_id"] == raised and trace["level"] == "ERROR", trace
    assert trace["logger"] == "orbit.child" and "KeyError" in trace["exc"], trace
    printed = [r for r in found if r["event"] == "child_output"]
    for text in ("CHATTER-OUT 7", "CHATTER-ERR 7"):
        (line,) = [r for r in printed if r["message"].endswith(text)]
        assert (line["attempt_id"], line["task_id"]) == (ids[chatty], chatty), line
    assert one(found, event="drained")["started"] == 4

    # --- the server
    found = records(server_log)
    assert one(found, event="server_started")["url"] == server.url
    connected = [r for r in found if r["event"] == "worker_connected"]
    assert {r["queue_id"] for r in connected} == {queue_id}
    assert all(r["instance_id"] for r in connected), connected
    expiry = one(found, event="lease_expired", attempt_id=lapsed["attempt_id"])
    assert (expiry["task_id"], expiry["instance_id"], expiry["queue_id"]) == (
        lapsed["task_id"], lapsed["instance_id"], queue_id), expiry
    access = [r for r in found if r["event"] == "http_request"]
    submits = [r for r in access if r["path"] == "/v1/queues/{queue_id}/tasks"]
    assert len(submits) >= 5 and {r["status"] for r in submits} == {201}, submits
    assert all(r["method"] and r["duration_ms"] >= 0 and r["logger"] == "orbit.access"
               for r in access)
    assert any(r["path"] == "/v1/tasks/{task_id}" for r in access)
    assert "wait_ms" not in server_log and "?" not in "".join(r["path"] for r in access)
    assert any(r["logger"].startswith("uvicorn") for r in found), "uvicorn's warning"
    assert found[-1]["event"] == "server_stopped"


async def _lapsed_lease(sup_env: SupEnv) -> dict[str, str]:
    """A worker that starts an attempt and never renews it: the server's reaper expires it."""
    orbit, queue_id = sup_env.orbit, sup_env.queue_id
    cred = orbit.worker_credential(queue_id)
    task = expect(sup_env.producer.post(f"/v1/queues/{queue_id}/tasks", json=task_spec(
        lease_ttl_ms=200, max_attempts=1)), 201)
    async with await ProtocolClient.connect(orbit.server.ws_url) as wc:
        await wc.hello_as(cred, agent="test/lapse")
        await wc.credit(1)
        [res] = await wc.reservations(1)
        assert (await wc.start(res)).ok
        wait_task(sup_env.producer, task["id"], timeout_s=20)  # settled by the expiry
        return {"attempt_id": res.attempt_id, "task_id": task["id"],
                "instance_id": wc.instance_id}


def _bad_http_request(port: int) -> None:
    """Not HTTP at all: uvicorn logs a warning of its own (through the same formatter)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        sock.settimeout(10)
        with contextlib.suppress(OSError):
            sock.recv(4096)


def _secret(credentials_json: str) -> str:
    return str(json.loads(credentials_json)["secret"])
