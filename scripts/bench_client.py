#!/usr/bin/env python3
"""The producer's own CPU per request: ``OrbitClient`` beside a bare ``httpx.Client`` (what
OrbitClient used before transport.py), against one real ``orbit-server`` on a temporary
SQLite file, interleaved round by round.

    .venv/bin/python scripts/bench_client.py [--rounds 3] [--n 2000]

Per client and call, it reports this process's CPU time (``time.process_time``: user +
system) divided by the requests, and the wall time per request; medians over the rounds.
Calls: ``health`` (``GET /healthz``), ``submit`` (one task per call, no worker, so the task
stays PENDING) and ``get`` (``GET /v1/tasks/{id}`` of that task). The server's own CPU is
not counted (bench_calls.py measures it). Nothing is written to docs/; figures are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import server_harness as bs  # noqa: E402

from orbit_client import OrbitClient  # noqa: E402
from orbit_host.credentials import Credentials  # noqa: E402

SPEC = {"handler": "noop", "handler_version": "1", "payload_version": "1", "payload": {}}


def per_request(call: Callable[[], object], n: int) -> tuple[float, float]:
    """(client CPU µs, wall µs) per call of ``call``, after one warm-up call."""
    call()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        call()
    return ((time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orbit-client-bench-") as tmp:
        server = bs.Server(Path(tmp))
        server.start()
        try:
            admin = server.admin_bearer()
            with httpx.Client(base_url=server.url,
                              headers={"Authorization": f"Bearer {admin}"}) as setup:
                queue = setup.post("/v1/queues", json={"name": "client-bench"}).json()["id"]
                made = setup.post("/v1/credentials",
                                  json={"role": "producer", "queues": [queue]}).json()
            creds = Credentials(server.url, made["credential_id"], made["secret"], "producer",
                                (queue,))
            headers = {"Authorization": f"Bearer {creds.bearer}", "Accept": "application/json",
                       "Content-Type": "application/json"}
            body = orjson.dumps(SPEC)
            with OrbitClient(credentials=creds) as orbit, \
                    httpx.Client(base_url=server.url, headers=headers) as bare:
                task_id = orbit.submit(queue, SPEC)["id"]
                calls: dict[str, dict[str, Callable[[], object]]] = {
                    "OrbitClient": {
                        "health": orbit.health,
                        "submit": lambda: orbit.submit(queue, SPEC),
                        "get": lambda: orbit.get_task(task_id)},
                    "httpx.Client": {
                        "health": lambda: bare.get("/healthz").content,
                        "submit": lambda: bare.post(f"/v1/queues/{queue}/tasks",
                                                    content=body).content,
                        "get": lambda: bare.get(f"/v1/tasks/{task_id}").content},
                }
                figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
                for _ in range(args.rounds):
                    for client, by_call in calls.items():
                        for name, call in by_call.items():
                            figures.setdefault((client, name), []).append(
                                per_request(call, args.n))
        finally:
            server.stop()
    print(f"{args.rounds} rounds of {args.n} requests per client and call; medians")
    print("| client | call | client CPU per request (µs) | wall per request (µs) |")
    print("| --- | --- | --- | --- |")
    for (client, name), runs in figures.items():
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        print(f"| {client} | {name} | {cpu:.0f} | {wall:.0f} |")


if __name__ == "__main__":
    main()
