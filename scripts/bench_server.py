#!/usr/bin/env python3
"""Benchmark a real `orbit-server` on a temporary SQLite file; write docs/benchmarks.md.

    .venv/bin/python scripts/bench_server.py [--tasks 20000] [--latency-samples 300] [--no-write]
    .venv/bin/python scripts/bench_server.py --db mysql://root@127.0.0.1:3306/orbit_bench
    .venv/bin/python scripts/bench_server.py --metrics-compare [--rounds 3] [--quick]
    .venv/bin/python scripts/bench_server.py --src DIR --no-write   # another checkout's server
    .venv/bin/python scripts/bench_server.py --limits --quick        # flow-control limits on
    .venv/bin/python scripts/bench_server.py --limits --fair --quick # limits and fair dispatch

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
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orbit_host.credentials import load_credentials  # noqa: E402
from orbit_wire.frames import (  # noqa: E402
    Credit,
    FinishOp,
    Hello,
    Request,
    Reservation,
    Reserve,
    Response,
    StartOp,
    decode_server_frame,
    encode,
)
from orbit_wire.ids import new_id, new_secret  # noqa: E402
from orbit_wire.limits import MAX_BATCH_OPS  # noqa: E402
from orbit_wire.model import Capability, Outcome  # noqa: E402

BEGIN = "<!-- server-bench:begin -->"
END = "<!-- server-bench:end -->"
CAP = Capability("bench.noop", "v1", "v1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(self, workdir: Path, profile: Path | None = None,
                 db_url: str | None = None, extra: tuple[str, ...] = (),
                 src: Path | None = None, wrapper: tuple[str, ...] = (),
                 start_timeout_s: float = 30) -> None:
        self.profile = profile
        # A command the server runs under (valgrind: scripts/instr_flow.py --server), which
        # may start it slowly.
        self.wrapper = wrapper
        self.start_timeout_s = start_timeout_s
        self.extra = extra
        self.src = src  # run the server's code from this checkout (A/B comparisons)
        self.db_url = db_url or f"sqlite:///{workdir / 'orbit.db'}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def _cli(self) -> tuple[list[str], dict[str, str] | None]:
        """How to run ``orbit-server``, and its environment: this checkout's, or --src's
        (every command of a run from the same code: a newer CLI would migrate the older
        server's database to its own schema)."""
        if self.src is not None:
            # PYTHONPATH and cwd: `-m` puts the checkout first.
            return ([sys.executable, "-m", "orbit_server.cli"],
                    {**os.environ, "PYTHONPATH": str(self.src)})
        return [str(ROOT / ".venv" / "bin" / "orbit-server")], None

    def start(self) -> None:
        cmd, env = self._cli()
        if self.profile is not None:  # cProfile the server; stats are written at SIGTERM
            cmd = [sys.executable, "-m", "cProfile", "-o", str(self.profile),
                   "-m", "orbit_server.cli"]
        if self.wrapper:
            cmd = [*self.wrapper, sys.executable, "-m", "orbit_server.cli"]
        log = (self.workdir / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [*cmd, "serve", "--db", self.db_url, "--port", str(self.port),
             "--host", "127.0.0.1", *self.extra,
             *shlex.split(os.environ.get("BENCH_SERVER_ARGS", ""))],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.src)
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited: {(self.workdir / 'server.log').read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise SystemExit("server did not come up")

    def admin_bearer(self) -> str:
        out = self.workdir / "admin.json"
        cmd, env = self._cli()
        subprocess.run([*cmd, "bootstrap-admin", "--db", self.db_url, "-o", str(out),
                        "--url", self.url], check=True, capture_output=True, timeout=60,
                       env=env, cwd=self.src)
        return load_credentials(out).bearer

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


# --limits: each task a key under a wildcard limit that never binds; --fair: each task a
# customer key, the queue fair by it.
LIMITS = {"on": False, "fair": False}
LIMIT_KEYS = 100
# The wildcard limit (PUT /v1/queues/{id}/limits/tenant:*) and the fair setting of the queue.
LIMIT_PATTERN = "tenant:*"
LIMIT_BODY = {"max_running": 1_000_000, "rate": {"count": 100_000, "interval_ms": 1}}
FAIR_BODY = {"key": "customer"}


def spec(i: int) -> dict[str, Any]:
    out = {"handler": CAP.handler, "handler_version": CAP.handler_version,
           "payload_version": CAP.payload_version, "payload": {"i": i},
           "idempotency": "IDEMPOTENT"}
    keys = []
    if LIMITS["on"]:
        keys.append(f"tenant:{i % LIMIT_KEYS}")
    if LIMITS["fair"]:
        keys.append(f"customer:{i % LIMIT_KEYS}")
    if keys:
        out["limits"] = keys
    return out


class BenchWorker:
    """A protocol worker that starts and finishes everything it gets, in batched requests.
    With grants (the worker protocol's ``grant`` feature, unless BENCH_NO_GRANTS is set or
    the server does not serve it) reservations arrive started and are only finished."""

    def __init__(self, ws: Any, capacity: int, granting: bool) -> None:
        self.ws = ws
        self.capacity = capacity
        self.granting = granting
        self.ids = itertools.count(1)
        self.msgs = itertools.count(1)
        self.responses: asyncio.Queue[Response] = asyncio.Queue()
        self.reserved: asyncio.Queue[tuple[float, Reservation]] = asyncio.Queue()
        self.completed = 0
        self.last_answered = 0.0
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, url: str, cred: dict[str, Any], queue_id: str,
                      capacity: int) -> BenchWorker:
        ws = await websockets.connect(url.replace("http", "ws") + "/v1/worker",
                                      max_size=None, ping_interval=None)
        ask = () if os.environ.get("BENCH_NO_GRANTS") else ("grant",)
        hello = Hello(cred["credential_id"], cred["secret"], new_id(0), new_secret(),
                      queue_id, (CAP,), capacity, features=ask)
        await ws.send(encode(hello).decode())
        first = decode_server_frame(await ws.recv())
        assert first.type == "welcome", first
        return cls(ws, capacity, "grant" in getattr(first, "features", ()))

    async def _read(self) -> None:
        async for data in self.ws:
            frame = decode_server_frame(data)
            now = time.perf_counter()
            if isinstance(frame, Reserve):
                for r in frame.reservations:
                    self.reserved.put_nowait((now, r))
            elif isinstance(frame, Response):
                self.responses.put_nowait(frame)
            elif frame.type == "error":
                raise SystemExit(f"worker got an error frame: {frame}")

    async def request(self, ops: list[Any]) -> Response:
        await self.ws.send(encode(Request(next(self.ids), tuple(ops))).decode())
        response = await self.responses.get()
        bad = [r for r in response.results if not r.ok]
        if bad:
            raise SystemExit(f"op failed: {bad[0]}")
        return response

    async def credit(self, n: int) -> None:
        await self.ws.send(encode(Credit(n)).decode())

    async def run_batches(self, total: int) -> None:
        """Grant credit, then start and finish everything that arrives until ``total`` are
        done. Requests are pipelined the way a busy worker sends them: one request carries
        the finishes of the attempts started by the previous request plus the starts of the
        reservations that arrived meanwhile (at most MAX_BATCH_OPS operations)."""
        await self.credit(2 * self.capacity)
        if self.granting:
            await self._finish_batches(total)
            return
        started: list[Reservation] = []
        while self.completed < total:
            if not started and self.reserved.empty():
                fresh = [(await self.reserved.get())[1]]
            else:
                fresh = []
            room = MAX_BATCH_OPS - len(started) - len(fresh)
            while room > 0 and not self.reserved.empty():
                fresh.append(self.reserved.get_nowait()[1])
                room -= 1
            ops: list[Any] = [
                FinishOp(f"f{next(self.msgs)}", r.attempt_id, r.epoch, Outcome.SUCCEEDED,
                         result_json='{"ok":true}') for r in started]
            ops += [StartOp(f"s{next(self.msgs)}", r.attempt_id, r.epoch) for r in fresh]
            await self.request(ops)
            if started:
                self.completed += len(started)
                await self.credit(len(started))
            started = fresh

    async def _finish_batches(self, total: int) -> None:
        """With grants: every request finishes what arrived (already started) meanwhile."""
        while self.completed < total:
            got = [(await self.reserved.get())[1]]
            while len(got) < MAX_BATCH_OPS and not self.reserved.empty():
                got.append(self.reserved.get_nowait()[1])
            await self.request([self._finish(r) for r in got])
            self.completed += len(got)
            await self.credit(len(got))

    def _finish(self, r: Reservation) -> FinishOp:
        return FinishOp(f"f{next(self.msgs)}", r.attempt_id, r.epoch, Outcome.SUCCEEDED,
                        result_json='{"ok":true}')

    async def complete_one(self) -> float:
        """Wait for one reservation, start (unless granted) and finish it in ONE request;
        return its arrival time. ``last_answered`` is when the answer arrived."""
        arrived, r = await self.reserved.get()
        start = [] if self.granting else [StartOp(f"s{next(self.msgs)}", r.attempt_id,
                                                  r.epoch)]
        await self.request([*start, self._finish(r)])
        self.last_answered = time.perf_counter()
        await self.credit(1)
        return arrived

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()


class RawHttp:
    """A minimal keep-alive HTTP/1.1 client for the latency measures: httpx alone costs about
    half a millisecond per request, which would hide the server's own latency."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 bearer: str) -> None:
        self.reader = reader
        self.writer = writer
        self.auth = f"Authorization: Bearer {bearer}\r\n".encode()

    @classmethod
    async def open(cls, url: str, bearer: str) -> RawHttp:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, bearer)

    async def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
        head = (f"{method} {path} HTTP/1.1\r\nHost: bench\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n").encode()
        self.writer.write(head + self.auth + b"\r\n" + body)
        lines = (await self.reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        status = int(lines[0].split()[1])
        length = next(int(line.split(b":")[1]) for line in lines
                      if line.lower().startswith(b"content-length:"))
        return status, orjson.loads(await self.reader.readexactly(length))

    def close(self) -> None:
        self.writer.close()


async def setup(url: str, admin: str) -> tuple[str, httpx.AsyncClient, dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {admin}"},
                                 timeout=60) as a:
        queue = (await a.post("/v1/queues", json={"name": "bench"})).json()["id"]
        creds = "/v1/credentials"
        prod = (await a.post(creds, json={"role": "producer", "queues": [queue]})).json()
        work = (await a.post(creds, json={"role": "worker", "queues": [queue]})).json()
        if LIMITS["on"]:
            made = await a.put(f"/v1/queues/{queue}/limits/{LIMIT_PATTERN}", json=LIMIT_BODY)
            assert made.status_code == 201, made.text
        if LIMITS["fair"]:
            made = await a.put(f"/v1/queues/{queue}/fair", json=FAIR_BODY)
            assert made.status_code == 200, made.text
    producer = httpx.AsyncClient(
        base_url=url, timeout=60,
        headers={"Authorization": f"Bearer {prod['credential_id']}.{prod['secret']}"},
    )
    return queue, producer, work


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# Host probes (also used by bench_supervisor.py): how fast this machine is right now, in the
# two things Orbit's figures follow, so runs at different times can be compared.

def fsync_latency_us(workdir: Path, count: int = 200) -> float:
    """p50 of one 4 KiB overwrite + fsync in the work directory: every worker request waits
    for one such commit, and the host's disk moves it between rounds."""
    path = workdir / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"\0" * 4096 * 16)
        os.fsync(fd)
        times = []
        for i in range(count):
            t0 = time.perf_counter()
            os.pwrite(fd, b"x" * 4096, (i % 16) * 4096)
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return pct(times, 0.5) * 1e6


def python_loop_ms(count: int = 1_000_000, repeats: int = 5) -> float:
    """The fastest of ``repeats`` runs of a plain Python loop of ``count`` additions: how
    fast this host runs the interpreter right now. Server, parent and the children's framing
    are Python, so their CPU per task scales with it; the 10 ms ceiling cannot show it."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(count):
            total += i
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


class Scraper:
    """A process that GETs ``url`` every ``period`` seconds until ``stop()``: the load a
    Prometheus server puts on a metrics endpoint (at four times its usual rate). A process
    of its own, so the benchmark client's event loop shares no GIL with it."""

    _CODE = ("import sys, time, httpx\n"
             "n = 0\n"
             "with httpx.Client(timeout=10) as http:\n"
             "    while True:\n"
             "        time.sleep(float(sys.argv[2]))\n"
             "        n += http.get(sys.argv[1]).status_code == 200\n"
             "        print(n, flush=True)\n")

    def __init__(self, url: str, period: float = 1.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", self._CODE, url, str(period)],
                                     stdout=subprocess.PIPE, text=True)

    def stop(self) -> int:
        """Stop it (by PID); the number of successful scrapes."""
        os.kill(self.proc.pid, signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=15)
        lines = out.split()
        return int(lines[-1]) if lines else 0


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


def compare_metrics(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """(a) with metrics off and on (scraped every second), side by side, ``args.rounds``
    times each, a fresh server per run and the order swapped every round."""
    import uvloop

    runs: dict[str, list[float]] = {"off": [], "on": []}
    scrapes = 0
    for r in range(args.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            here = workdir / f"compare-{r}-{mode}"
            here.mkdir()
            server = Server(here, None, args.db, () if mode == "on" else ("--no-metrics",))
            server.start()
            scraper = Scraper(f"{server.url}/metrics") if mode == "on" else None
            try:
                admin = server.admin_bearer()
                result = uvloop.run(throughput(server.url, admin, args.tasks))
            finally:
                if scraper is not None:
                    scrapes += scraper.stop()
                server.stop()
            runs[mode].append(result["per_s"])
            print(f"round {r + 1} metrics {mode}: {result['per_s']:.0f} completions/s",
                  flush=True)
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    return {"off": runs["off"], "on": runs["on"], "median_off": off, "median_on": on,
            "cost_pct": (off - on) / off * 100, "scrapes": scrapes, "tasks": args.tasks}


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


def replace_section(path: Path, section: str, begin: str, end: str) -> None:
    """Put ``section`` (which starts with ``begin`` and ends with ``end``) in place of the
    one between those markers in ``path``, or append it; the rest of the file is kept."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


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
