#!/usr/bin/env python3
"""Benchmark a real `orbit-server` on a temporary SQLite file; write docs/benchmarks.md.

    .venv/bin/python scripts/bench_server.py [--tasks 20000] [--latency-samples 300] [--no-write]
    .venv/bin/python scripts/bench_server.py --db mysql://root@127.0.0.1:3306/orbit_bench
    .venv/bin/python scripts/bench_server.py --metrics-compare [--rounds 3] [--quick]
    .venv/bin/python scripts/bench_server.py --src DIR --no-write   # another checkout's server
    .venv/bin/python scripts/bench_server.py --limits --quick        # flow-control limits on
    .venv/bin/python scripts/bench_server.py --limits --fair --quick # limits and fair dispatch
    .venv/bin/python scripts/bench_server.py --flow-pairs 30         # the flow-control row

With ``--db`` the server runs on that MySQL/MariaDB database (it must exist; the schema is
migrated) and the figures go to their own section of docs/benchmarks.md, beside SQLite's.

Measures
  (a) completions/s: batched HTTP submits (1000 per request) while one protocol worker grants
      credit and starts and finishes its reservations in batched requests;
  (b) submit → dispatch latency (p50/p99): one idle worker with credit, one task submitted at
      a time, time from the submit request to the `reserve` frame;
  (c) sequential submit-and-wait (p50/p99): submit one task, a worker starts and finishes it,
      the producer's `GET /v1/tasks/{id}?wait_ms=` returns.
The server section of docs/benchmarks.md (between the markers) is replaced; the rest of the
file is kept. The server process is stopped by PID at the end. BENCH_SERVER_ARGS (environment)
adds options to `orbit-server serve`, e.g. "--no-access-log" or "--log-format json", to
compare them side by side.

``--metrics-compare`` measures only (a), alternately with ``--no-metrics`` and with metrics on
and scraped every second (a fresh server each run, the order swapped every round), and
prints the medians and the difference; ``--no-metrics`` runs everything with metrics off.
``--quick`` is a smoke run: fewer tasks and samples, two rounds, nothing written.
``--limits`` gives every task a flow-control key (``tenant:0`` .. ``tenant:99``) under a
wildcard limit too large to bind (docs/flow-control.md): what enforcing limits costs; its
figures are printed, not written. ``--fair`` gives every task a ``customer:0`` ..
``customer:99`` key too and turns the queue's fair dispatch on by ``customer``
(docs/flow-control.md "Fair dispatch"); with ``--limits`` both are on. Printed, not written.
``--flow-pairs N`` measures only (a), N pairs of runs without flow control and with
``--limits --fair`` (a fresh server each run, the order swapped every pair), and prints each
pair, the server's CPU per task, and the median of the pairs' ratios (issue 31's row).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from server_harness import (  # noqa: E402
    LIMITS,
    BenchWorker,
    RawHttp,
    Scraper,
    Server,
    fsync_latency_us,
    pct,
    python_loop_ms,
    replace_section,
    setup,
    spec,
)

BEGIN = "<!-- server-bench:begin -->"
END = "<!-- server-bench:end -->"
async def bench(url: str, admin: str, tasks: int, samples: int) -> dict[str, Any]:
    out: dict[str, Any] = {"throughput": await throughput(url, admin, tasks)}
    await latencies(url, admin, samples, out)
    return out


async def throughput(url: str, admin: str, tasks: int) -> dict[str, Any]:
    """(a): batched submits while one worker starts and finishes everything."""
    queue, producer, work = await setup(url, admin)
    worker = await BenchWorker.connect(url, work, queue, capacity=256)
    t0 = time.perf_counter()
    consume = asyncio.create_task(worker.run_batches(tasks))
    for start in range(0, tasks, 1000):
        body = orjson.dumps({"tasks": [spec(i) for i in range(start, min(tasks, start + 1000))]})
        r = await producer.post(f"/v1/queues/{queue}/tasks/batch", content=body,
                                headers={"content-type": "application/json"})
        assert r.status_code == 201, r.text
    submitted = time.perf_counter()
    await asyncio.wait_for(consume, 600)
    elapsed = time.perf_counter() - t0
    await worker.close()
    await producer.aclose()
    return {"tasks": tasks, "seconds": elapsed, "per_s": tasks / elapsed,
            "submit_per_s": tasks / (submitted - t0)}


async def latencies(url: str, admin: str, samples: int, out: dict[str, Any]) -> None:
    """(b) submit -> dispatch latency and (c) submit-and-wait, on a fresh queue."""
    queue, producer, work = await setup(url, admin)
    bearer = producer.headers["Authorization"].removeprefix("Bearer ")
    await producer.aclose()
    raw = await RawHttp.open(url, bearer)
    worker = await BenchWorker.connect(url, work, queue, capacity=4)
    await worker.credit(1)
    dispatch: list[float] = []
    waits: list[float] = []
    body = orjson.dumps(spec(0))
    submit_path = f"/v1/queues/{queue}/tasks"
    for _ in range(samples):
        sent = time.perf_counter()
        status, _task = await raw.call("POST", submit_path, body)
        assert status == 201, _task
        arrived = await worker.complete_one()
        dispatch.append(arrived - sent)

    marks: list[tuple[float, float, float]] = []  # POST answered, reserve in, finish answered
    # The long poll may answer before the worker's loop resumes after its finish answer, so
    # the worker hands its instants over a queue instead of a list the producer reads.
    served: asyncio.Queue[tuple[float, float]] = asyncio.Queue()

    async def serve_forever() -> None:
        while True:
            reserved_at = await worker.complete_one()
            served.put_nowait((reserved_at, worker.last_answered))

    worker_task = asyncio.create_task(serve_forever())
    for _ in range(samples):
        sent = time.perf_counter()
        status, task = await raw.call("POST", submit_path, body)
        posted = time.perf_counter()
        assert status == 201, task
        status, done = await raw.call("GET", f"/v1/tasks/{task['id']}?wait_ms=10000")
        assert done["state"] == "SUCCEEDED", done
        waits.append(time.perf_counter() - sent)
        reserved_at, answered = await asyncio.wait_for(served.get(), 10)
        marks.append((posted - sent, reserved_at - sent, answered - sent))
    worker_task.cancel()
    await worker.close()
    raw.close()
    out["dispatch_ms"] = {"p50": pct(dispatch, 0.5) * 1000, "p99": pct(dispatch, 0.99) * 1000,
                          "mean": statistics.fmean(dispatch) * 1000, "n": len(dispatch)}
    out["wait_ms"] = {"p50": pct(waits, 0.5) * 1000, "p99": pct(waits, 0.99) * 1000,
                      "mean": statistics.fmean(waits) * 1000, "n": len(waits),
                      "posted": pct([m[0] for m in marks], 0.5) * 1000,
                      "reserved": pct([m[1] for m in marks], 0.5) * 1000,
                      "answered": pct([m[2] for m in marks], 0.5) * 1000}


def run_a(workdir: Path, db: str | None, tasks: int, extra: tuple[str, ...] = (),
          scraped: bool = False) -> tuple[dict[str, Any], float, int]:
    """(a) on a fresh server: its figures, the server's CPU per task (µs) and, when
    ``scraped``, the scrapes of its /metrics made meanwhile (every second)."""
    import uvloop

    server = Server(workdir, None, db, extra)
    server.start()
    assert server.proc is not None
    scraper = Scraper(f"{server.url}/metrics") if scraped else None
    scrapes = 0
    try:
        admin = server.admin_bearer()
        before = psutil.Process(server.proc.pid).cpu_times()
        result = uvloop.run(throughput(server.url, admin, tasks))
        after = psutil.Process(server.proc.pid).cpu_times()
    finally:
        if scraper is not None:
            scrapes = scraper.stop()
        server.stop()
    cpu = (after.user + after.system - before.user - before.system) / result["tasks"] * 1e6
    return result, cpu, scrapes


def compare_metrics(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """(a) with metrics off and on (scraped every second), side by side, ``args.rounds``
    times each, a fresh server per run and the order swapped every round."""
    runs: dict[str, list[float]] = {"off": [], "on": []}
    scrapes = 0
    for r in range(args.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            here = workdir / f"compare-{r}-{mode}"
            here.mkdir()
            result, _cpu, scraped = run_a(here, args.db, args.tasks, () if mode == "on" else (
                "--no-metrics",), scraped=mode == "on")
            scrapes += scraped
            runs[mode].append(result["per_s"])
            print(f"round {r + 1} metrics {mode}: {result['per_s']:.0f} completions/s",
                  flush=True)
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    return {"off": runs["off"], "on": runs["on"], "median_off": off, "median_on": on,
            "cost_pct": (off - on) / off * 100, "scrapes": scrapes, "tasks": args.tasks}


def compare_flow(args: argparse.Namespace, workdir: Path) -> list[tuple[float, float]]:
    """(a) plain and with ``--limits --fair``, ``args.flow_pairs`` pairs, a fresh server per
    run and the order swapped every pair; each pair's (plain, limits + fair) throughput."""
    pairs = []
    for r in range(args.flow_pairs):
        got: dict[bool, tuple[float, float]] = {}
        for flow in (False, True) if r % 2 == 0 else (True, False):
            LIMITS.update(on=flow, fair=flow)
            here = workdir / f"flow-{r}-{int(flow)}"
            here.mkdir()
            result, cpu, _ = run_a(here, args.db, args.tasks)
            got[flow] = (result["per_s"], cpu)
        pairs.append((got[False][0], got[True][0]))
        print(f"pair {r + 1}: plain {got[False][0]:.0f}/s ({got[False][1]:.0f} µs of server "
              f"CPU per task), limits + fair {got[True][0]:.0f}/s ({got[True][1]:.0f} µs): "
              f"{got[True][0] / got[False][0]:.3f}", flush=True)
    return pairs


def render_compare(c: dict[str, Any], what: str, unit: str) -> str:
    """One table row of a side-by-side metrics comparison (docs/benchmarks.md)."""
    def runs(xs: list[float]) -> str:
        return ", ".join(f"{x:.0f}" for x in xs)

    return (f"| {what} | {c['median_off']:.0f} {unit} ({runs(c['off'])}) | "
            f"{c['median_on']:.0f} {unit} ({runs(c['on'])}) | {c['cost_pct']:+.1f} % |")


def markers(store: str) -> tuple[str, str]:
    """The section markers of a store's figures (SQLite keeps the original ones)."""
    if store == "sqlite":
        return BEGIN, END
    return f"<!-- server-bench-{store}:begin -->", f"<!-- server-bench-{store}:end -->"


def render(result: dict[str, Any], store: str = "sqlite") -> str:
    if store != "sqlite":
        return render_shared_db(result, store)
    t, d, w = result["throughput"], result["dispatch_ms"], result["wait_ms"]
    machine = (f"{os.cpu_count()} CPUs (nproc), Python {platform.python_version()}, "
               f"{platform.system()} {platform.machine()}, "
               f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}, load average "
               f"{result['load_before']:.2f} before the run (other work shares the CPUs)")
    return "\n".join([
        BEGIN,
        "## Server (`scripts/bench_server.py`)",
        "",
        f"Machine: {machine}.",
        "",
        "One `orbit-server` process (uvicorn + uvloop + httptools) on a temporary SQLite file",
        "(WAL, synchronous=FULL); the benchmark client runs on the same machine and shares its",
        "CPUs. Figures move with the machine's load; rerun on a quiet machine to compare.",
        "",
        host_text(result),
        "",
        "| measure | result | target |",
        "| --- | --- | --- |",
        f"| (a) completions/s: {t['tasks']} tasks, batch submit (1000/request) + one worker "
        f"(capacity 256, batched start/finish) | **{t['per_s']:.0f}/s** "
        f"({t['seconds']:.2f} s; submits alone {t['submit_per_s']:.0f}/s) | >= 5000/s |",
        f"| (b) submit -> `reserve` frame at an idle worker (n={d['n']}) | "
        f"p50 {d['p50']:.2f} ms, p99 {d['p99']:.2f} ms | |",
        f"| (c) sequential submit, worker completes, `GET ?wait_ms` returns (n={w['n']}) | "
        f"p50 **{w['p50']:.2f} ms**, p99 {w['p99']:.2f} ms | p50 <= 3 ms |",
        "",
        f"Where (c) goes (p50, from the submit): the submit is answered at {w['posted']:.2f} ms,",
        f"the `reserve` frame reaches the worker at {w['reserved']:.2f} ms, the worker's",
        f"start+finish request is answered at {w['answered']:.2f} ms, the long poll returns at",
        f"{w['p50']:.2f} ms. The two writing steps hold one SQLite transaction each on the",
        "store thread: the submit (which also claims for the waiting worker and sends its",
        "`reserve` frame) and the worker's start+finish, which also reads the finished",
        "task's view that the woken long poll answers with (no second read).",
        "",
        "Rerun: `.venv/bin/python scripts/bench_server.py`.",
        END,
    ])


def host_text(result: dict[str, Any]) -> str:
    return (f"Just before the run a 4 KiB write + fsync took {result['fsync_us']:.0f} µs (p50) "
            f"and a plain Python loop of a million additions {result['loop_ms']:.0f} ms (best "
            "of 5): every worker request waits for one commit, and the server's CPU per "
            "request is Python; compare these before comparing runs.")


def render_shared_db(result: dict[str, Any], store: str) -> str:
    """The same three measures on MySQL/MariaDB, in their own section."""
    t, d, w = result["throughput"], result["dispatch_ms"], result["wait_ms"]
    begin, end = markers(store)
    machine = (f"{os.cpu_count()} CPUs (nproc), Python {platform.python_version()}, "
               f"{platform.system()} {platform.machine()}, "
               f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}, load average "
               f"{result['load_before']:.2f} before the run (other work shares the CPUs)")
    return "\n".join([
        begin,
        f"## Server on {result.get('db_version', store)} (`scripts/bench_server.py --db URL`)",
        "",
        f"Machine: {machine}.",
        "",
        "The same benchmark as the SQLite section, with one `orbit-server` process on a local",
        "MariaDB (InnoDB defaults: innodb_flush_log_at_trx_commit=1, so every commit is",
        "durable) through PyMySQL on the server's store thread, READ COMMITTED, claims with",
        "FOR UPDATE SKIP LOCKED. The database server, the Orbit server and the benchmark client",
        "share the machine's CPUs.",
        "",
        host_text(result),
        "",
        "| measure | result | target |",
        "| --- | --- | --- |",
        f"| (a) completions/s: {t['tasks']} tasks, batch submit (1000/request) + one worker "
        f"(capacity 256, batched start/finish) | **{t['per_s']:.0f}/s** "
        f"({t['seconds']:.2f} s; submits alone {t['submit_per_s']:.0f}/s) | >= 3000/s |",
        f"| (b) submit -> `reserve` frame at an idle worker (n={d['n']}) | "
        f"p50 **{d['p50']:.2f} ms**, p99 {d['p99']:.2f} ms | |",
        f"| (c) sequential submit, worker completes, `GET ?wait_ms` returns (n={w['n']}) | "
        f"p50 {w['p50']:.2f} ms, p99 {w['p99']:.2f} ms | |",
        "",
        f"Rerun: `.venv/bin/python scripts/bench_server.py --db {result.get('db_shown', 'URL')}`.",
        end,
    ])


def write_section(section: str, path: Path, store: str = "sqlite") -> None:
    replace_section(path, section, *markers(store))


def db_version(db_url: str) -> str:
    from orbit_server.store.db import create_engine_for

    engine = create_engine_for(db_url)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":  # a given SQLite file (index experiments)
                return f"SQLite {conn.exec_driver_sql('SELECT sqlite_version()').scalar()}"
            version = str(conn.exec_driver_sql("SELECT VERSION()").scalar())
    finally:
        engine.dispose()
    if "mariadb" in version.lower():
        return f"MariaDB {version.split('-')[0]}"
    return f"MySQL {version}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--db", help="run on this MySQL/MariaDB URL instead of a temporary "
                        "SQLite file (the database must exist)")
    parser.add_argument("--profile", type=Path, help="cProfile the server into this file "
                        "(figures are then not written to docs/benchmarks.md)")
    parser.add_argument("--no-metrics", action="store_true",
                        help="run the server with --no-metrics")
    parser.add_argument("--metrics-compare", action="store_true",
                        help="measure (a) with metrics off and on, side by side")
    parser.add_argument("--flow-pairs", type=int, default=0, metavar="N",
                        help="measure only (a): N alternating pairs, plain and with --limits "
                        "--fair (the flow-control row; printed, not written)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="--metrics-compare: runs of each (default 3)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 3000 tasks, 50 samples, 2 rounds, nothing written")
    parser.add_argument("--limits", action="store_true",
                        help="every task a key under a wildcard limit that never binds "
                        "(figures printed, not written)")
    parser.add_argument("--fair", action="store_true",
                        help="every task a customer key, the queue's fair dispatch on by it "
                        "(with --limits: both; figures printed, not written)")
    parser.add_argument("--src", type=Path, help="run the server from this checkout (A/B "
                        "comparisons; figures are then not written to docs/benchmarks.md)")
    args = parser.parse_args()
    LIMITS["on"] = args.limits
    LIMITS["fair"] = args.fair
    if args.limits or args.fair:
        args.no_write = True
    if args.quick:
        args.tasks, args.latency_samples, args.rounds = 3000, 50, 2
        args.no_write = True
    if args.flow_pairs:
        with tempfile.TemporaryDirectory(prefix="orbit-bench-") as tmp:
            pairs = compare_flow(args, Path(tmp))
        ratios = [flow / plain for plain, flow in pairs]
        print(f"{len(pairs)} pairs of {args.tasks} tasks: limits + fair over plain, median of "
              f"the pairs {statistics.median(ratios):.3f} (mean {statistics.fmean(ratios):.3f}, "
              f"from {min(ratios):.3f} to {max(ratios):.3f})")
        return
    if args.metrics_compare:
        with tempfile.TemporaryDirectory(prefix="orbit-bench-") as tmp:
            c = compare_metrics(args, Path(tmp))
        print(f"metrics off: median {c['median_off']:.0f}/s, on: median {c['median_on']:.0f}/s "
              f"({c['scrapes']} scrapes): cost {c['cost_pct']:+.1f} % of the throughput")
        print(render_compare(c, f"`bench_server.py` (a), {c['tasks']} tasks", "/s"))
        return
    with tempfile.TemporaryDirectory(prefix="orbit-bench-") as tmp:
        load_before = os.getloadavg()[0]
        host = {"fsync_us": fsync_latency_us(Path(tmp)), "loop_ms": python_loop_ms()}
        server = Server(Path(tmp), args.profile, args.db,
                        ("--no-metrics",) if args.no_metrics else (), args.src)
        server.start()
        try:
            admin = server.admin_bearer()
            import uvloop

            result = uvloop.run(bench(server.url, admin, args.tasks, args.latency_samples))
        finally:
            server.stop()
    result["load_before"] = load_before
    result.update(host)
    store = "sqlite"
    if args.db:
        from sqlalchemy.engine import make_url

        from orbit_server.store.db import normalize_url

        url = normalize_url(args.db)
        store = url.get_backend_name()
        result["db_shown"] = make_url(args.db).render_as_string()  # password hidden
        result["db_version"] = db_version(args.db)
    section = render(result, store)
    print(section)
    if not args.no_write and args.profile is None and args.src is None:
        write_section(section, ROOT / "docs" / "benchmarks.md", store)


if __name__ == "__main__":
    main()
