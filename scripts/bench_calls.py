#!/usr/bin/env python3
"""Server CPU per request for one-per-call HTTP traffic, comparing server source trees
side by side (A/B, interleaved round by round).

    .venv/bin/python scripts/bench_calls.py [--src A --src B] [--rounds 3] [--n 1000]
        [--modes seq,par,get,poll,batch] [--db mysql://root@127.0.0.1:3306/orbit_calls]
        [--spy OUT_PREFIX]

Each ``--src`` is a checkout of this repository (default: this one); its server runs from
that tree (``PYTHONPATH``) on this checkout's virtualenv, on a fresh SQLite file (or a fresh
MySQL/MariaDB database named by ``--db``, dropped and created for every run). Per mode it
reports the server process's CPU time (user + system, from ``psutil``) divided by the
requests served, and the wall throughput; medians over the rounds. Wall figures move with
whatever else shares the host; CPU per request moves much less, so code changes are judged
by it, in the same run.

Modes
  seq    one producer, one task submitted per call (no worker connected)
  par    8 producers at once, one task per call each (no worker connected)
  get    ``GET /v1/tasks/{id}`` of a PENDING task, one producer
  poll   submit one task, a worker starts and finishes it, ``GET ?wait_ms`` returns
  batch  bench_server (a) at a small size: batch submits of 1000 + one batching worker
         (CPU per completion)

``--spy PREFIX`` records each run's server with py-spy (raw format, only samples holding the
GIL: where the Python CPU goes; ``PREFIX-<src>-<mode>.txt``).
Nothing is written to docs/; the figures are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import server_harness as bs  # noqa: E402

PRODUCERS = 8
MODES = ("seq", "par", "get", "poll", "batch")


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def measure(pid: int, count: int, body: Callable[[], Awaitable[None]]
                  ) -> dict[str, float]:
    c0, t0 = cpu_s(pid), time.perf_counter()
    await body()
    wall, cpu = time.perf_counter() - t0, cpu_s(pid) - c0
    return {"cpu_ms": cpu / count * 1e3, "per_s": count / wall}


async def run_mode(mode: str, url: str, admin: str, pid: int, n: int) -> dict[str, float]:
    queue, producer, work = await bs.setup(url, admin)
    bearer = producer.headers["Authorization"].removeprefix("Bearer ")
    await producer.aclose()
    path = f"/v1/queues/{queue}/tasks"
    body = orjson.dumps(bs.spec(0))
    if mode in ("seq", "par"):
        clients = [await bs.RawHttp.open(url, bearer)
                   for _ in range(PRODUCERS if mode == "par" else 1)]

        async def submits(client: bs.RawHttp, count: int) -> None:
            for _ in range(count):
                status, task = await client.call("POST", path, body)
                assert status == 201, task

        await submits(clients[0], 20)  # warm-up
        share = n // len(clients)
        result = await measure(pid, share * len(clients), lambda: _gather(
            submits(c, share) for c in clients))
        for c in clients:
            c.close()
        return result
    if mode == "get":
        client = await bs.RawHttp.open(url, bearer)
        status, task = await client.call("POST", path, body)
        assert status == 201, task
        get = f"/v1/tasks/{task['id']}"

        async def gets() -> None:
            for _ in range(n):
                status, view = await client.call("GET", get)
                assert status == 200, view

        result = await measure(pid, n, gets)
        client.close()
        return result
    if mode == "poll":
        client = await bs.RawHttp.open(url, bearer)
        worker = await bs.BenchWorker.connect(url, work, queue, capacity=4)
        await worker.credit(1)

        async def serve_forever() -> None:
            while True:
                await worker.complete_one()

        serving = asyncio.create_task(serve_forever())

        async def polls() -> None:
            for _ in range(n):
                status, task = await client.call("POST", path, body)
                assert status == 201, task
                status, done = await client.call("GET", f"/v1/tasks/{task['id']}?wait_ms=10000")
                assert done["state"] == "SUCCEEDED", done

        result = await measure(pid, n, polls)
        serving.cancel()
        await worker.close()
        client.close()
        return result
    # batch: bench_server (a), small
    tasks = max(1000, n // 1000 * 1000)
    worker = await bs.BenchWorker.connect(url, work, queue, capacity=256)
    batch = bs.httpx.AsyncClient(base_url=url, timeout=60,
                                 headers={"Authorization": f"Bearer {bearer}"})

    async def batches() -> None:
        consume = asyncio.create_task(worker.run_batches(tasks))
        for start in range(0, tasks, 1000):
            data = orjson.dumps({"tasks": [bs.spec(i) for i in range(start, start + 1000)]})
            r = await batch.post(f"{path}/batch", content=data,
                                 headers={"content-type": "application/json"})
            assert r.status_code == 201, r.text
        await asyncio.wait_for(consume, 600)

    result = await measure(pid, tasks, batches)
    await worker.close()
    await batch.aclose()
    return result


async def _gather(coros: Any) -> None:
    await asyncio.gather(*coros)


def fresh_mysql(url: str) -> None:
    import pymysql
    from sqlalchemy.engine import make_url

    u = make_url(url)
    conn = pymysql.connect(host=u.host or "127.0.0.1", port=u.port or 3306,
                           user=u.username or "root", password=u.password or "")
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{u.database}`")
            cur.execute(f"CREATE DATABASE `{u.database}`")
        conn.commit()
    finally:
        conn.close()


def one_run(src: Path, mode: str, n: int, db: str | None, spy: str | None,
            label: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="orbit-calls-") as tmp:
        if db:
            fresh_mysql(db)
        server = bs.Server(Path(tmp), None, db, src=src)
        server.start()
        recorder = None
        try:
            assert server.proc is not None
            admin = server.admin_bearer()
            if spy:
                recorder = subprocess.Popen(
                    [str(ROOT / ".venv" / "bin" / "py-spy"), "record", "-r", "2000", "-f", "raw",
                     "--gil", "-o", f"{spy}-{label}-{mode}.txt", "-p", str(server.proc.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            import uvloop

            return uvloop.run(run_mode(mode, server.url, admin, server.proc.pid, n))
        finally:
            if recorder is not None:
                recorder.send_signal(2)
                recorder.wait(30)
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", action="append", type=Path,
                        help="a checkout to run the server from (repeat for A/B)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=1000, help="requests per mode and run")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--db", help="a MySQL/MariaDB URL whose database is recreated per run")
    parser.add_argument("--spy", help="py-spy raw output prefix")
    args = parser.parse_args()
    srcs: list[Path] = args.src or [ROOT]
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes: {sorted(unknown)}")
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for rnd in range(args.rounds):
        for mode in modes:
            # Alternate the order each round so neither tree always runs first.
            order = srcs if rnd % 2 == 0 else list(reversed(srcs))
            for src in order:
                label = f"{srcs.index(src)}"
                r = one_run(src, mode, args.n, args.db, args.spy, label)
                results.setdefault((label, mode), []).append(r)
                print(f"round {rnd + 1} {mode:5} src{label} cpu {r['cpu_ms']:.3f} ms/req "
                      f"{r['per_s']:.0f}/s  (load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("| mode | " + " | ".join(f"src{i} CPU ms/req, req/s" for i in range(len(srcs))) + " |")
    for mode in modes:
        cells = []
        for i in range(len(srcs)):
            rs = results[(str(i), mode)]
            cells.append(f"{statistics.median(r['cpu_ms'] for r in rs):.3f}, "
                         f"{statistics.median(r['per_s'] for r in rs):.0f}")
        print(f"| {mode} | " + " | ".join(cells) + " |")
    for i, src in enumerate(srcs):
        print(f"src{i} = {src}")


if __name__ == "__main__":
    main()
