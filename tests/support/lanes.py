"""A ``Lane``: one queue with a producer and a worker credential, the setup most tests
start from (``Lane.open(orbit)``), and helpers of the protocol tests around it.

    lane = Lane.open(orbit)                        # queue, producer client, worker credential
    lane.credentials_file(tmp_path / "p.json")     # the producer's file, for the client or CLI
    lane.credentials_file(tmp_path / "w.json", "worker")
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from orbit_host.credentials import Credentials, write_credentials
from orbit_wire.model import Capability

from .orbit_http import OrbitEnv, WorkerCredential, expect, task_spec
from .protocol_client import ECHO, ProtocolClient
from .waiting import wait_until_async

# Fast retries for tests: no backoff.
NO_BACKOFF = {"initial_ms": 0, "max_ms": 0, "multiplier": 1.0, "jitter": 0.0}


@dataclass
class Lane:
    """One queue with a producer client and a worker credential, on a running server."""

    env: OrbitEnv
    queue: str
    producer: httpx.Client
    worker: WorkerCredential
    producer_credentials: Credentials

    @classmethod
    def open(cls, env: OrbitEnv, name: str | None = None) -> Lane:
        """A new queue on ``env``'s server (named ``name``), with a producer and a worker
        credential made by its admin."""
        queue = env.queue(name)
        made = env.credential("producer", [queue])
        producer = Credentials(env.server.url, made["credential_id"], made["secret"],
                               "producer", (queue,))
        return cls(env, queue, env.client(producer.bearer), env.worker_credential(queue),
                   producer)

    @property
    def worker_credentials(self) -> Credentials:
        w = self.worker
        return Credentials(self.env.server.url, w.credential_id, w.secret, "worker",
                           (self.queue,))

    def credentials_file(self, path: Path,
                         role: Literal["producer", "worker"] = "producer") -> Path:
        """Write the producer's (or the worker's) credentials file at ``path`` (mode 0600)."""
        write_credentials(path, self.worker_credentials if role == "worker"
                          else self.producer_credentials)
        return path

    @property
    def ws_url(self) -> str:
        return self.env.server.ws_url

    def submit(self, **policy: Any) -> dict[str, Any]:
        policy.setdefault("backoff", NO_BACKOFF)
        return dict(expect(self.producer.post(f"/v1/queues/{self.queue}/tasks",
                                              json=task_spec(**policy)), 201))

    def task(self, task_id: str, wait_ms: int = 0) -> dict[str, Any]:
        params = {"wait_ms": wait_ms} if wait_ms else {}
        return dict(expect(self.producer.get(f"/v1/tasks/{task_id}", params=params), 200))

    async def task_async(self, task_id: str, wait_ms: int = 0) -> dict[str, Any]:
        return await asyncio.to_thread(self.task, task_id, wait_ms)

    def task_raw(self, task_id: str) -> str:
        return self.producer.get(f"/v1/tasks/{task_id}").text

    def attempts(self, task_id: str) -> dict[str, Any]:
        return dict(expect(self.producer.get(f"/v1/tasks/{task_id}/attempts"), 200))

    def audit(self, task_id: str) -> list[dict[str, Any]]:
        return list(expect(self.producer.get(f"/v1/tasks/{task_id}/audit"), 200)["events"])

    def cancel(self, task_id: str) -> dict[str, Any]:
        return dict(expect(self.producer.post(f"/v1/tasks/{task_id}/cancel"), 200))

    def review(self, task_id: str, action: str, **body: Any) -> httpx.Response:
        return self.producer.post(f"/v1/tasks/{task_id}/review", json={"action": action, **body})

    async def connect(self, *, capacity: int = 4, credit: int = 0,
                      capabilities: tuple[Capability, ...] = (ECHO,),
                      instance: tuple[str, str] | None = None,
                      features: tuple[str, ...] = ()) -> ProtocolClient:
        """A connected worker that said hello (asking for ``features``) and granted
        ``credit``."""
        iid, isecret = instance or (None, None)
        wc = await ProtocolClient.connect(self.ws_url, instance_id=iid, instance_secret=isecret)
        await wc.hello_as(self.worker, capacity=capacity, capabilities=capabilities,
                          features=features)
        if credit:
            await wc.credit(credit)
        return wc


ECHO_RESULT = '{"echo": 1.10}'  # the exact text a SUCCEEDED task of ``finish_each`` ends with


async def finish_each(ws_url: str, worker: WorkerCredential,
                      outcomes: Mapping[str, tuple[str, str | None]]) -> None:
    """A protocol worker takes one task per entry of ``outcomes`` ({task_id: (outcome,
    code)}), starts it and finishes it so (a SUCCEEDED one with ``ECHO_RESULT``)."""
    async with await ProtocolClient.connect(ws_url) as wc:
        await wc.hello_as(worker, capacity=len(outcomes), capabilities=(ECHO,))
        await wc.credit(len(outcomes))
        for res in await wc.reservations(len(outcomes)):
            outcome, code = outcomes[res.task_id]
            assert (await wc.start(res)).ok
            result = ECHO_RESULT if outcome == "SUCCEEDED" else None
            assert (await wc.finish(res, outcome, code=code, result_json=result)).ok


async def wait_for_state(lane: Lane, task_id: str, states: set[str],
                         timeout_s: float = 10.0) -> dict[str, Any]:
    """Poll (bounded, ``timeout_s`` in units) until the task is in one of ``states``."""
    last: dict[str, Any] = {}

    async def there() -> dict[str, Any] | None:
        nonlocal last
        last = await lane.task_async(task_id)
        return last if last["state"] in states else None

    return await wait_until_async(there, timeout=timeout_s, interval=0.05,
                                  what=lambda: f"task in {states} (it stayed {last.get('state')})")
