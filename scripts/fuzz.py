#!/usr/bin/env python3
"""The long fuzz run of docs/security.md: schemathesis over the HTTP API and a
hypothesis-driven WebSocket fuzzer, against a real orbit-server on SQLite, next to a healthy
worker that must keep being served the whole time.

    .venv/bin/python scripts/fuzz.py --minutes 10          # the recorded run
    .venv/bin/python scripts/fuzz.py --quick               # a smoke run of about a minute

Half the time goes to schemathesis (every check, every phase; repeated with a new seed until
its share is spent, the last run never cut short), then half to the WebSocket fuzzer: each
example opens a connection and sends 1-4 frames drawn by hypothesis (raw text, JSON objects
of every frame and op type with arbitrary fields, hellos with a valid, wrong or another
queue's credential followed by arbitrary frames) and reads every answer: each must be a
well-formed server frame, and a close must carry a protocol close code. The fuzz
connections use a worker credential of another queue than the healthy worker's. Meanwhile
a producer submits tasks to the healthy worker's queue.

Passes (exit 0) when schemathesis found nothing, every fuzz answer was well-formed, the
server answered /healthz throughout and never logged a traceback (no 5xx, no crash), and
every task submitted to the healthy worker's queue SUCCEEDED (no lost task). Prints one
JSON summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from support.fuzzing import run_schemathesis  # noqa: E402  (the test tree's helpers)
from support.orbit_http import OrbitEnv, expect, http_client, task_spec  # noqa: E402
from support.protocol_client import ECHO, ProtocolClient  # noqa: E402
from support.server import ServerProcess  # noqa: E402

SERVER_FRAMES = {"welcome", "heartbeat_ack", "response", "reserve", "cancel", "error"}
CLIENT_TYPES = ["hello", "heartbeat", "credit", "request", "bogus"]
OP_TYPES = ["resume", "start", "renew", "finish", "drain", "claim", "bogus"]
_HEX = st.text("0123456789abcdef", min_size=32, max_size=32)
_SCALAR = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
           | st.text(max_size=40) | _HEX)
_VALUE = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
_FIELDS = ["protocol", "credential_id", "credential_secret", "instance_id", "instance_secret",
           "queue_id", "capabilities", "capacity", "credits", "id", "ops", "msg_id",
           "attempt_id", "epoch", "outcome", "code", "result_json", "details_json",
           "attempts", "count", "child_pid", "report", "agent"]


def _op() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda kind, extra: {"type": kind, **extra}, st.sampled_from(OP_TYPES),
                     st.dictionaries(st.sampled_from(_FIELDS), _VALUE, max_size=5))


def _frame(hello: dict[str, Any]) -> st.SearchStrategy[str]:
    """One text frame: arbitrary text, a JSON object of some type, or the valid hello with
    some fields changed."""
    typed = st.builds(lambda kind, extra, ops: {"type": kind, **extra, **ops},
                      st.sampled_from(CLIENT_TYPES),
                      st.dictionaries(st.sampled_from(_FIELDS), _VALUE, max_size=6),
                      st.fixed_dictionaries({}, optional={
                          "ops": st.lists(_op(), max_size=4),
                          "id": st.integers(-5, 2**64)}))
    changed_hello = st.builds(lambda extra: {**hello, **extra},
                              st.dictionaries(st.sampled_from(_FIELDS), _VALUE, max_size=2))
    objects = st.one_of(typed, changed_hello, st.just(hello))
    return st.one_of(st.text(max_size=200),
                     objects.map(lambda obj: orjson.dumps(
                         obj, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
                                 if _encodable(obj) else "{}"))


def _encodable(obj: Any) -> bool:
    try:
        orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return False  # integers beyond 64 bits: sent as text by the raw-text branch instead
    return True


class HealthyWorker(threading.Thread):
    """A worker on its own event loop that starts and finishes every reservation."""

    def __init__(self, ws_url: str, worker: Any) -> None:
        super().__init__(daemon=True)
        self.ws_url, self.worker = ws_url, worker
        self.stop = threading.Event()
        self.finished = 0
        self.failure: str | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._serve())
        except Exception as exc:  # reported in the summary
            self.failure = f"{type(exc).__name__}: {exc}"

    async def _serve(self) -> None:
        async with await ProtocolClient.connect(self.ws_url) as wc:
            await wc.hello_as(self.worker, capacity=8)
            await wc.credit(8)
            while not self.stop.is_set():
                try:
                    res = await asyncio.wait_for(wc.reserved.get(), 0.5)
                except TimeoutError:
                    await wc.heartbeat()
                    continue
                assert (await wc.start(res)).ok
                done = await wc.finish(res, "SUCCEEDED", result_json='{"ok": true}')
                assert done.ok, done
                self.finished += 1
                await wc.credit(1)


async def _one_connection(ws_url: str, frames: list[str]) -> list[str]:
    """Send the frames, read what comes back for a short while; problems found."""
    problems: list[str] = []
    async with websockets.connect(ws_url, max_size=None, open_timeout=10) as ws:
        for text in frames:
            with contextlib.suppress(websockets.ConnectionClosed):
                await ws.send(text)
        with contextlib.suppress(websockets.ConnectionClosed, TimeoutError):
            while True:
                message = await asyncio.wait_for(ws.recv(), 0.3)
                try:
                    frame = orjson.loads(message)
                except orjson.JSONDecodeError:
                    problems.append(f"not JSON: {message!r:.200}")
                    continue
                if not isinstance(frame, dict) or frame.get("type") not in SERVER_FRAMES:
                    problems.append(f"unknown server frame: {message!r:.200}")
        code = ws.close_code
        if code is not None and not (code in (1000, 1001, 1008, 1009, 1011)
                                     or 4000 <= code < 5000):
            problems.append(f"close code {code}")
        if code == 1011:
            problems.append("close 1011 (internal error)")
    return problems


def ws_fuzz(srv: ServerProcess, hello: dict[str, Any], seconds: float, seed: int,
            max_examples: int) -> dict[str, Any]:
    problems: list[str] = []
    examples = 0
    deadline = time.monotonic() + seconds

    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(_frame(hello), min_size=1, max_size=4))
    def check(frames: list[str]) -> None:
        nonlocal examples
        if time.monotonic() > deadline:
            return
        examples += 1
        problems.extend(asyncio.run(_one_connection(srv.ws_url, frames)))

    random.seed(seed)
    check()
    return {"examples": examples, "problems": problems[:20], "problem_count": len(problems)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="about a minute in all")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    total_s = 60.0 if args.quick else args.minutes * 60
    started = time.monotonic()
    summary: dict[str, Any] = {"minutes_planned": round(total_s / 60, 2)}
    with tempfile.TemporaryDirectory(prefix="orbit-fuzz-") as tmp:
        srv = ServerProcess(Path(tmp) / "server", extra_args=("--auth-failures-per-s", "0"))
        srv.start()
        worker_thread: HealthyWorker | None = None
        try:
            admin = srv.bootstrap_admin()
            with http_client(srv.url, admin.bearer) as admin_http:
                env = OrbitEnv(srv, admin, admin_http)
                queue, fuzz_queue = env.queue(), env.queue()
                producer = env.producer(queue)
                worker_thread = HealthyWorker(srv.ws_url, env.worker_credential(queue))
                worker_thread.start()
                fuzz_worker = env.worker_credential(fuzz_queue)
                env.producer(fuzz_queue).post(f"/v1/queues/{fuzz_queue}/tasks",
                                              json=task_spec())
                hello = {"type": "hello", "protocol": 1,
                         "credential_id": fuzz_worker.credential_id,
                         "credential_secret": fuzz_worker.secret,
                         "instance_id": "0" * 32, "instance_secret": "s" * 43,
                         "queue_id": fuzz_queue, "capabilities": [ECHO.to_dict()],
                         "capacity": 2}
                submitted: list[str] = []

                def submit(n: int) -> None:
                    for _ in range(n):
                        made = expect(producer.post(f"/v1/queues/{queue}/tasks",
                                                    json=task_spec()), 201)
                        submitted.append(made["id"])

                submit(5)
                http_s = total_s / 2
                runs, seed, st_failures = 0, args.seed, []
                while time.monotonic() - started < http_s and runs < 50:
                    left = http_s - (time.monotonic() - started)
                    code, out = run_schemathesis(
                        srv.url, admin.bearer, Path(tmp) / f"st{runs}",
                        max_examples=15 if args.quick else 50, seed=seed,
                        # A run is never cut short: the last one may end past the plan.
                        timeout_s=max(60.0, left) + 300)
                    runs, seed = runs + 1, seed + 1
                    if code != 0:
                        st_failures.append(out[-4000:])
                    submit(5)
                summary["schemathesis"] = {"runs": runs, "failed_runs": len(st_failures),
                                           "last_failure": st_failures[-1][-1500:]
                                           if st_failures else None}
                ws_results = []
                # The WebSocket half always gets its share, however long the HTTP half ran.
                ws_end = time.monotonic() + total_s / 2
                while time.monotonic() < ws_end:
                    left = ws_end - time.monotonic()
                    ws_results.append(ws_fuzz(srv, hello, min(left, 60.0), seed, 200))
                    seed += 1
                    submit(5)
                    assert expect(env.client().get("/healthz"), 200)
                summary["ws"] = {
                    "examples": sum(r["examples"] for r in ws_results),
                    "problem_count": sum(r["problem_count"] for r in ws_results),
                    "problems": [p for r in ws_results for p in r["problems"]][:10]}
                # No lost task: every task of the healthy worker's queue ends SUCCEEDED.
                deadline = time.monotonic() + 60
                states: dict[str, str] = {}
                while time.monotonic() < deadline:
                    states = {t: producer.get(f"/v1/tasks/{t}").json().get("state", "?")
                              for t in submitted}
                    if all(s == "SUCCEEDED" for s in states.values()):
                        break
                    time.sleep(0.5)
                summary["tasks"] = {"submitted": len(submitted),
                                    "succeeded": sum(s == "SUCCEEDED" for s in states.values()),
                                    "finished_by_worker": worker_thread.finished,
                                    "worker_failure": worker_thread.failure}
                env.close()
        finally:
            if worker_thread is not None:
                worker_thread.stop.set()
                worker_thread.join(timeout=10)
            alive = srv.proc is not None and srv.proc.poll() is None
            log = srv.log_tail(10_000_000)
            srv.stop()
        summary["server_alive_at_end"] = alive
        summary["tracebacks_in_log"] = log.count("Traceback")
        summary["minutes_run"] = round((time.monotonic() - started) / 60, 2)
    ok = (summary["schemathesis"]["failed_runs"] == 0 and summary["ws"]["examples"] > 0
          and summary["ws"]["problem_count"] == 0
          and summary["tasks"]["submitted"] == summary["tasks"]["succeeded"]
          and summary["tasks"]["worker_failure"] is None and summary["server_alive_at_end"]
          and summary["tracebacks_in_log"] == 0)
    summary["ok"] = ok
    print(json.dumps(summary))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
