"""What the server benchmarks share (bench_server.py, bench_calls.py, bench_client.py,
bench_kills.py, bench_supervisor.py, bench_peers.py, instr_flow.py): a real ``orbit-server``
on a temporary SQLite file (or a given database), stopped by its PID; a protocol worker that
starts and finishes what it gets in batched requests; a raw HTTP/1.1 client; the task specs
of ``--limits`` and ``--fair``; the host probes; and the docs section writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shlex
import signal
import socket
import subprocess
import sys
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

CAP = Capability("bench.noop", "v1", "v1")


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM,
                 timeout: float = 30.0) -> int | None:
    """Signal ``proc`` by its PID, wait for it, and SIGKILL it if it is still there."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


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
        if self.proc is not None:
            stop_process(self.proc, timeout=10)


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


