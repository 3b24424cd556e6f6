#!/usr/bin/env python3
"""CPU per call of the server's hot path, in one process, for side-by-side source trees.

    .venv/bin/python scripts/bench_hot_path.py [--src A --src B ...] [--rounds 5] [--n 400]

Each ``--src`` is a checkout of this repository (default: this one); every measurement runs
in a fresh process importing the server from that tree (``PYTHONPATH``), on a fresh SQLite
file, with no sockets: what is left is the server's own Python and SQLite work, which the
host's other load moves much less than wall-clock or a whole server's CPU.

Parts (the process's CPU time per call: ``time.process_time``, so the store thread's work
counts too; each run's figure is its least disturbed batch of 25 calls, and the table shows
the best and the median of the rounds):
  store  the services alone: a submit, a reserve, the worker's start and finish requests
         (``WorkerService.apply_ops``) per task, and an HTTP authentication; also the
         statements SQLite runs for one such task (BEGIN and COMMIT included)
  get    ``GET /v1/tasks/{id}`` of a PENDING task through the ASGI app the server serves
         (access log on, written to a file), its store thread running
  post   ``POST /v1/queues/{id}/tasks`` through the same app

Nothing is written to docs/; the figures are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import event

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("store", "get", "post")
# Calls timed together; the figure is the least disturbed batch's mean.
BATCH = 25
SPEC = {"handler": "bench.noop", "handler_version": "v1", "payload_version": "v1",
        "payload": {"n": 1}}


def _store_part(db: str, n: int) -> tuple[float, int]:
    from orbit_server.config import ServerConfig
    from orbit_server.services import Services
    from orbit_server.store import create_engine_for, migrate
    from orbit_wire.frames import FinishOp, Hello, Report, StartOp
    from orbit_wire.ids import new_id
    from orbit_wire.model import Capability, Outcome

    migrate(db)
    engine = create_engine_for(db)
    statements: list[str] = []
    tracing = False

    def trace(sql: str) -> None:
        if tracing:
            statements.append(sql)

    event.listen(engine, "connect", lambda dbapi_conn, _record: dbapi_conn.set_trace_callback(
        trace))
    services = Services(engine, ServerConfig(db_url=db), lambda: time.time_ns() // 1_000_000,
                        random.Random(1))
    admin_made = services.admin.bootstrap_admin(None)
    admin = services.admin.authenticate(f"{admin_made['credential_id']}.{admin_made['secret']}")
    queue = services.admin.create_queue(admin, "bench")["id"]
    made = services.admin.create_credential(admin, "producer", [queue], None)
    token = f"{made['credential_id']}.{made['secret']}"
    worker = services.admin.create_credential(admin, "worker", [queue], None)
    binding = services.workers.worker_hello(Hello(
        worker["credential_id"], worker["secret"], new_id(1), "s", queue,
        (Capability("bench.noop", "v1", "v1"),), 4))
    msg = 0

    def one() -> None:
        nonlocal msg
        producer = services.admin.authenticate(token)
        services.tasks.submit(producer, queue, [dict(SPEC)])
        (res,) = services.workers.reserve(binding, 1)
        msg += 2
        services.workers.apply_ops(binding, [StartOp(f"m{msg}", res.attempt_id, res.epoch)])
        services.workers.apply_ops(binding, [FinishOp(
            f"m{msg + 1}", res.attempt_id, res.epoch, Outcome.SUCCEEDED, None, False, "{}",
            None, Report(exit_code=0, cpu_ms=1))])

    for _ in range(20):
        one()
    tracing = True  # the statements SQLite runs for one task
    one()
    tracing = False
    return best_batch(one, n), len(statements)


async def _asgi_part(db: str, n: int, part: str, logfile: str) -> float:
    from orbit_host.logs import configure_logging
    from orbit_server.app import OrbitServer
    from orbit_server.config import ServerConfig
    from orbit_server.store import migrate

    with open(logfile, "w") as log_stream:  # the access log on, as by default, to a file
        configure_logging("info", "text", log_stream)
        migrate(db)
        server = OrbitServer(ServerConfig(db_url=db))
        services = server.services
        admin_made = services.admin.bootstrap_admin(None)
        admin = services.admin.authenticate(
            f"{admin_made['credential_id']}.{admin_made['secret']}")
        queue = services.admin.create_queue(admin, "bench")["id"]
        made = services.admin.create_credential(admin, "producer", [queue], None)
        bearer = f"Bearer {made['credential_id']}.{made['secret']}".encode()
        producer = services.admin.authenticate(bearer.decode().split()[1])
        task_id = services.tasks.submit(producer, queue, [dict(SPEC)])[0][0][0]["id"]
        app = getattr(server, "asgi", server.app)
        body = json.dumps(SPEC).encode()
        if part == "get":
            method, path, content = "GET", f"/v1/tasks/{task_id}", b""
        else:
            method, path, content = "POST", f"/v1/queues/{queue}/tasks", body
        headers = [(b"host", b"127.0.0.1"), (b"authorization", bearer),
                   (b"content-type", b"application/json"),
                   (b"content-length", str(len(content)).encode())]
        async with server.app.router.lifespan_context(server.app):
            async def call() -> None:
                scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                         "method": method, "scheme": "http", "path": path, "raw_path":
                         path.encode(), "root_path": "", "query_string": b"",
                         "headers": headers, "client": ("127.0.0.1", 50000),
                         "server": ("127.0.0.1", 8080)}
                sent = False
                status = 0

                async def receive() -> dict[str, Any]:
                    nonlocal sent
                    if sent:
                        await asyncio.sleep(3600)
                    sent = True
                    return {"type": "http.request", "body": content, "more_body": False}

                async def send(message: dict[str, Any]) -> None:
                    nonlocal status
                    if message["type"] == "http.response.start":
                        status = message["status"]

                await app(scope, receive, send)
                assert status in (200, 201), status

            for _ in range(50):
                await call()
            best = float("inf")
            for _ in range(max(1, n // BATCH)):
                started = time.process_time()
                for _ in range(BATCH):
                    await call()
                best = min(best, (time.process_time() - started) / BATCH)
            return best


def best_batch(call: Callable[[], None], n: int) -> float:
    """The CPU time per call of the least disturbed batch of BATCH calls, over ``n`` calls."""
    best = float("inf")
    for _ in range(max(1, n // BATCH)):
        started = time.process_time()
        for _ in range(BATCH):
            call()
        best = min(best, (time.process_time() - started) / BATCH)
    return best


def measure(part: str, n: int) -> tuple[float, int]:
    """CPU seconds per call, and (store) the statements of one task."""
    with tempfile.TemporaryDirectory(prefix="orbit-hot-") as tmp:
        db = f"sqlite:///{tmp}/orbit.db"
        if part == "store":
            return _store_part(db, n)
        import uvloop

        return uvloop.run(_asgi_part(db, n, part, f"{tmp}/server.log")), 0


def run_in(src: Path, part: str, n: int) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, __file__, "--one", part, "--n", str(n)], env=env,
                          cwd=src, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{src} {part} failed:\n{done.stderr[-3000:]}")
    seconds, statements = done.stdout.strip().splitlines()[-1].split()
    return float(seconds), int(statements)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", action="append", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(*measure(args.one, args.n))
        return
    srcs: list[Path] = args.src or [ROOT]
    parts = [p for p in args.parts.split(",") if p]
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs", flush=True)
    results: dict[tuple[int, str], list[float]] = {}
    counts: dict[int, int] = {}
    # Rounds alternate the trees' order, so that none always runs first.
    schedule = [(rnd, part, i) for rnd in range(args.rounds) for part in parts
                for i in (range(len(srcs)) if rnd % 2 == 0 else reversed(range(len(srcs))))]
    for rnd, part, i in schedule:
        seconds, statements = run_in(srcs[i], part, args.n)
        results.setdefault((i, part), []).append(seconds * 1000)
        if part == "store":
            counts[i] = statements
        print(f"round {rnd + 1} {part:5} src{i} {seconds * 1000:.3f} ms "
              f"(load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("| part | " + " | ".join(f"src{i} best / median ms" for i in range(len(srcs))) + " |")
    for part in parts:
        cells = [f"{min(results[(i, part)]):.3f} / {statistics.median(results[(i, part)]):.3f}"
                 for i in range(len(srcs))]
        print(f"| {part} | " + " | ".join(cells) + " |")
    if counts:
        print("| statements per task (store) | "
              + " | ".join(str(counts[i]) for i in range(len(srcs))) + " |")
    for i, src in enumerate(srcs):
        print(f"src{i} = {src}")


if __name__ == "__main__":
    main()
