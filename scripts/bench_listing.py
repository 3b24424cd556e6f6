#!/usr/bin/env python3
"""Benchmark the operator's lists of a real `orbit-server` with many finished tasks.

    .venv/bin/python scripts/bench_listing.py                       # 1,000,000 rows, SQLite
    .venv/bin/python scripts/bench_listing.py --db mysql://root@127.0.0.1:3306/orbit_bench
    .venv/bin/python scripts/bench_listing.py --quick               # 20,000 rows, a smoke run

Seeds ``--rows`` finished tasks (SUCCEEDED and FAILED, 1 % NEEDS_REVIEW, each with its
attempt) straight into a fresh database (a temporary SQLite file, or the MySQL/MariaDB
database of ``--db``, which must exist and is emptied first), starts the server on it,
connects ``--workers`` protocol workers (each starts one task and keeps it running), and
times sequential requests over one keep-alive connection (p50/p99/max, ms):

  (a) GET /v1/queues/{id}/tasks?limit=50                       the newest page
  (b) the same list 20 pages deep (each page through the previous page's cursor)
  (c) GET /v1/queues/{id}/tasks?state=NEEDS_REVIEW&limit=50    the review queue
  (d) GET /v1/queues/{id}/tasks?state=FAILED&order=oldest      oldest failures
  (e) GET /v1/queues/{id}/tasks?handler=rare.handler           a filter outside the index
  (f) GET /v1/workers                                          every live worker, running
The goal (issue 15): (a)-(d) and (f) at p99 <= 20 ms with a million finished tasks. Submit and
worker-request throughput are measured by scripts/bench_server.py, run at this commit and
the one before. Without --no-write (and not with --quick) the figures replace the listing
section of docs/benchmarks.md. The server is stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import websockets
from sqlalchemy import delete

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server_harness import Server  # noqa: E402

from orbit_server.store import create_engine_for, migrate  # noqa: E402
from orbit_server.store.rows import INSERT_ATTEMPT, INSERT_TASK  # noqa: E402
from orbit_server.store.tables import metadata, queues  # noqa: E402
from orbit_wire.frames import (  # noqa: E402
    Credit,
    Heartbeat,
    Hello,
    Request,
    Reserve,
    StartOp,
    decode_server_frame,
    encode,
)
from orbit_wire.ids import new_id, new_secret  # noqa: E402
from orbit_wire.model import Capability  # noqa: E402

# One section per store: "<!-- listing-bench-sqlite:begin -->" ... ":end -->".
MARKER = "<!-- listing-bench-{store}:{edge} -->"
CAP = Capability("bench.noop", "v1", "v1")
RARE = "rare.handler"
SEED_CHUNK = 5_000


def seed(db_url: str, rows: int, queue_id: str) -> float:
    """Empty the database's tables and insert ``rows`` finished tasks with their attempts;
    returns the seconds it took."""
    migrate(db_url)
    engine = create_engine_for(db_url)
    began = time.perf_counter()
    rnd = random.Random(15)
    now = time.time_ns() // 1_000_000
    start = now - rows * 5  # a task every 5 ms, ending before now
    try:
        with engine.begin() as conn:
            for table in reversed(metadata.sorted_tables):
                if table.name != "alembic_version":
                    conn.execute(delete(table))
            conn.execute(queues.insert(), {"id": queue_id, "name": "bench",
                                           "created_at_ms": start - 1})
        for first in range(0, rows, SEED_CHUNK):
            tasks, attempts = [], []
            for i in range(first, min(rows, first + SEED_CHUNK)):
                created = start + i * 5
                roll = rnd.random()
                state = "NEEDS_REVIEW" if roll < 0.01 else "FAILED" if roll < 0.1 else "SUCCEEDED"
                task_id, attempt_id = new_id(created), new_id(created)
                tasks.append(_task(task_id, queue_id, state, created,
                                   RARE if i % 10_000 == 0 else CAP.handler))
                attempts.append(_attempt(attempt_id, task_id, queue_id, created, state))
            with engine.begin() as conn:
                INSERT_TASK.run(conn, tasks)
                INSERT_ATTEMPT.run(conn, attempts)
        if db_url.startswith("mysql"):
            with engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE TABLE tasks, attempts")
    finally:
        engine.dispose()
    return time.perf_counter() - began


def _task(task_id: str, queue_id: str, state: str, created: int,
          handler: str) -> dict[str, Any]:
    finished = None if state == "NEEDS_REVIEW" else created + 3
    return {
        "id": task_id, "queue_id": queue_id, "state": state, "handler": handler,
        "handler_version": "v1", "payload_version": "v1", "payload": '{"i":1}',
        "idempotency": "IDEMPOTENT", "max_attempts": 1, "backoff_initial_ms": 0,
        "backoff_max_ms": 0, "backoff_multiplier": 1.0, "backoff_jitter": 0.0,
        "attempt_timeout_ms": 1000, "lease_ttl_ms": 1000, "deadline_at_ms": created + 86_400_000,
        "operation_key": None, "created_at_ms": created, "updated_at_ms": created + 3,
        "available_at_ms": created, "epoch": 1, "attempts_started": 1, "uncertain": False,
        "result": "1" if state == "SUCCEEDED" else None,
        "failure_code": "E" if state == "FAILED" else None,
        "failure_details": "{}" if state == "FAILED" else None, "cancel_requested": False,
        "current_attempt_id": None, "finished_at_ms": finished, "schedule_to_start_ms": None,
        "start_by_at_ms": None, "spec_digest": None, "dispatch_rank": 4,
        "cancel_grace_ms": 2000, "policy_source": None, "limit_keys": None,
    }


def _attempt(attempt_id: str, task_id: str, queue_id: str, created: int,
             state: str) -> dict[str, Any]:
    ok = state == "SUCCEEDED"
    return {
        "id": attempt_id, "task_id": task_id, "queue_id": queue_id, "epoch": 1,
        "attempt_number": 1, "instance_id": "b" * 32, "reserved_at_ms": created,
        "state": "FINISHED", "child_pid": 4242, "started_at_ms": created + 1,
        "finished_at_ms": created + 3, "lease_expires_at_ms": created + 1001,
        "attempt_deadline_at_ms": created + 1001, "renewals": 0,
        "outcome": "SUCCEEDED" if ok else "UNKNOWN" if state == "NEEDS_REVIEW" else "FAILED",
        "code": None if ok else "E", "retryable": False, "details": None, "exit_code": 0,
        "signal": None, "cpu_ms": 1, "peak_rss_bytes": 1, "kill_reason": None,
        "killed_at_ms": None, "reap_ms": None, "ended_by": None,
        "decision": "SUCCEEDED" if ok else state,
        "decision_rule": "bench",
    }


async def connect_workers(url: str, cred: dict[str, Any], queue_id: str, n: int,
                          hold: asyncio.Event) -> None:
    """``n`` protocol workers; each starts one task and holds it until ``hold`` is set."""
    async def one() -> None:
        async with websockets.connect(url.replace("http", "ws") + "/v1/worker",
                                      max_size=None, ping_interval=None) as ws:
            await ws.send(encode(Hello(cred["credential_id"], cred["secret"], new_id(0),
                                       new_secret(), queue_id, (CAP,), 4,
                                       agent="bench/1")).decode())
            assert decode_server_frame(await ws.recv()).type == "welcome"
            await ws.send(encode(Credit(1)).decode())
            while True:
                frame = decode_server_frame(await ws.recv())
                if isinstance(frame, Reserve):
                    r = frame.reservations[0]
                    await ws.send(encode(Request(1, (StartOp("s1", r.attempt_id, r.epoch,
                                                             os.getpid()),))).decode())
                    break
            reader = asyncio.create_task(_drain(ws))
            while not hold.is_set():  # heartbeats keep the session open for the whole run
                await ws.send(encode(Heartbeat()).decode())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(hold.wait(), 3.0)
            reader.cancel()

    await asyncio.gather(*(one() for _ in range(n)))


async def _drain(ws: Any) -> None:
    async for _frame in ws:
        pass  # the start's answer and heartbeat acks


def timed(samples: int, call: Callable[[], httpx.Response]) -> list[float]:
    out = []
    for _ in range(samples):
        began = time.perf_counter()
        response = call()
        out.append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"{response.request.url}: {response.status_code} {response.text}")
    return out


def summary(times: list[float]) -> tuple[float, float, float]:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99, ordered[-1]


def run(args: argparse.Namespace) -> list[tuple[str, tuple[float, float, float], str]]:
    rows = 20_000 if args.quick else args.rows
    samples = 50 if args.quick else args.samples
    workdir = Path(tempfile.mkdtemp(prefix="orbit-bench-listing-"))
    db_url = args.db or f"sqlite:///{workdir / 'orbit.db'}"
    queue_id = new_id(time.time_ns() // 1_000_000)
    print(f"seeding {rows:,} finished tasks into {db_url.split('@')[-1]} ...", flush=True)
    seconds = seed(db_url, rows, queue_id)
    print(f"seeded in {seconds:.0f} s", flush=True)
    server = Server(workdir, db_url=db_url, extra=("--log-level", "warning"),
                    start_timeout_s=120)
    server.start()
    results = []
    try:
        bearer = server.admin_bearer()
        headers = {"Authorization": f"Bearer {bearer}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
            cred = http.post("/v1/credentials", json={"role": "worker",
                                                      "queues": [queue_id]}).json()
            http.post(f"/v1/queues/{queue_id}/tasks/batch", json={"tasks": [
                {"handler": CAP.handler, "handler_version": "v1", "payload_version": "v1",
                 "payload": i} for i in range(args.workers)]}).raise_for_status()
            results = asyncio.run(_measure(server, http, cred, queue_id, samples, args.workers))
    finally:
        server.stop()
    return [(label, stats, f"{rows:,} rows") for label, stats in results]


async def _measure(server: Server, http: httpx.Client, cred: dict[str, Any], queue_id: str,
                   samples: int, workers: int) -> list[tuple[str, tuple[float, float, float]]]:
    hold = asyncio.Event()
    connected = asyncio.create_task(connect_workers(server.url, cred, queue_id, workers, hold))
    loop = asyncio.get_running_loop()

    def live() -> int:
        answer = http.get("/v1/workers").json()["workers"]
        return sum(1 for w in answer if w["running"])

    for _ in range(600):  # the workers connect and start their task (bounded wait)
        if await loop.run_in_executor(None, live) >= workers:
            break
        await asyncio.sleep(0.1)
    else:
        raise SystemExit("the workers did not all start a task")
    path = f"/v1/queues/{queue_id}/tasks"

    def deep() -> httpx.Response:
        cursor = None
        response = None
        for _ in range(20):
            params = {"limit": "50", **({"cursor": cursor} if cursor else {})}
            response = http.get(path, params=params)
            cursor = response.json()["next_cursor"]
        assert response is not None
        return response

    cases: list[tuple[str, Callable[[], httpx.Response], int]] = [
        ("(a) newest page, limit 50", lambda: http.get(path, params={"limit": "50"}), 1),
        ("(b) one page 20 pages deep", deep, 20),
        ("(c) NEEDS_REVIEW page", lambda: http.get(path, params={"state": "NEEDS_REVIEW"}), 1),
        ("(d) oldest FAILED page", lambda: http.get(
            path, params={"state": "FAILED", "order": "oldest"}), 1),
        ("(e) handler filter (scan budget)", lambda: http.get(path, params={"handler": RARE}), 1),
        ("(f) GET /v1/workers", lambda: http.get("/v1/workers"), 1),
    ]
    out = []
    for label, call, pages in cases:
        times = await loop.run_in_executor(None, timed, max(5, samples // pages), call)
        per_page = [t / pages for t in times]
        out.append((label, summary(per_page)))
        print(f"{label:36s} p50 {out[-1][1][0]:7.2f}  p99 {out[-1][1][1]:7.2f}  "
              f"max {out[-1][1][2]:7.2f} ms", flush=True)
    hold.set()
    await connected
    return out


def write_docs(results: list[tuple[str, tuple[float, float, float], str]], store: str) -> None:
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else ""
    key = "mysql" if store == "MariaDB" else "sqlite"
    begin, end = (MARKER.format(store=key, edge=e) for e in ("begin", "end"))
    lines = [begin, "",
             f"## Operator lists ({store}, {results[0][2]}, "
             f"{dt.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} CPUs)", "",
             "| request | p50 ms | p99 ms | max ms |", "| --- | --- | --- | --- |"]
    lines += [f"| {label} | {p50:.2f} | {p99:.2f} | {mx:.2f} |"
              for label, (p50, p99, mx), _rows in results]
    lines += ["", "Rerun: `.venv/bin/python scripts/bench_listing.py` (add `--db mysql://...` "
              "for MariaDB).", "", end]
    block = "\n".join(lines)
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--db", help="a MySQL/MariaDB URL (the database is emptied first)")
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 50 samples")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results = run(args)
    if not (args.no_write or args.quick):
        write_docs(results, "MariaDB" if args.db else "SQLite")


if __name__ == "__main__":
    main()
