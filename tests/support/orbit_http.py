"""HTTP helpers over a running test server (real requests with httpx; no mocks).

``OrbitEnv`` makes queues and credentials with the admin credential and hands out clients
authenticated as a producer or admin. Every client it makes is closed by ``close()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from orbit_host.credentials import Credentials

from .server import ServerProcess
from .waiting import UNIT

TIMEOUT_S = 30.0 * UNIT


def http_client(base_url: str, bearer: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=TIMEOUT_S)


def expect(response: httpx.Response, status: int) -> Any:
    """Assert the status (with the body in the message) and return the parsed JSON."""
    assert response.status_code == status, f"{response.status_code}: {response.text[:2000]}"
    return response.json()


def expect_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    body = expect(response, status)
    assert body["error"]["code"] == code, body
    assert "Traceback" not in response.text
    return dict(body["error"])


def new_queue(admin_http: httpx.Client, name: str | None = None) -> str:
    """A new queue's ID, made with an admin client."""
    body = {} if name is None else {"name": name}
    return str(expect(admin_http.post("/v1/queues", json=body), 201)["id"])


def new_credential(admin_http: httpx.Client, role: str, queues: list[str],
                   name: str | None = None) -> dict[str, Any]:
    """A new credential (``credential_id``, ``secret``, ...), made with an admin client."""
    body: dict[str, Any] = {"role": role, "queues": queues}
    if name is not None:
        body["name"] = name
    made = expect(admin_http.post("/v1/credentials", json=body), 201)
    assert made["secret"], made
    return dict(made)


def bearer_of(made: dict[str, Any]) -> str:
    """The bearer token of a credential as the API made it."""
    return f"{made['credential_id']}.{made['secret']}"


@dataclass
class WorkerCredential:
    credential_id: str
    secret: str
    queue_id: str

    @property
    def bearer(self) -> str:
        return f"{self.credential_id}.{self.secret}"

    @classmethod
    def of(cls, creds: Credentials) -> WorkerCredential:
        """The worker credential of a credentials file's contents (its first queue)."""
        return cls(creds.credential_id, creds.secret, creds.queues[0])


@dataclass
class OrbitEnv:
    """A running server plus an admin client, and helpers that build on them."""

    server: ServerProcess
    admin: Credentials
    admin_http: httpx.Client
    _clients: list[httpx.Client] = field(default_factory=list)

    def client(self, bearer: str | None = None) -> httpx.Client:
        c = http_client(self.server.url, bearer)
        self._clients.append(c)
        return c

    def queue(self, name: str | None = None) -> str:
        return new_queue(self.admin_http, name)

    def credential(self, role: str, queues: list[str], name: str | None = None) -> dict[str, Any]:
        return new_credential(self.admin_http, role, queues, name)

    def credential_with(self, **body: Any) -> dict[str, Any]:
        """A credential made with exactly this request body (e.g. with ``expires_at_ms``)."""
        return dict(expect(self.admin_http.post("/v1/credentials", json=body), 201))

    def producer(self, queue_id: str) -> httpx.Client:
        return self.client(bearer_of(self.credential("producer", [queue_id])))

    def worker_credential(self, queue_id: str) -> WorkerCredential:
        made = self.credential("worker", [queue_id])
        return WorkerCredential(made["credential_id"], made["secret"], queue_id)

    def close(self) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()


def task_spec(handler: str = "test.echo", payload: Any = None, **policy: Any) -> dict[str, Any]:
    """A TaskSpec for the capability (handler, v1, v1) with the given policy fields."""
    spec: dict[str, Any] = {"handler": handler, "handler_version": "v1", "payload_version": "v1",
                            "payload": {"n": 1} if payload is None else payload}
    spec.update(policy)
    return spec
