"""The schemathesis run against a real orbit-server, shared by the short CI run
(tests/integration/server/test_schemathesis.py) and the long one (scripts/fuzz.py).

Every check schemathesis has, over every phase (examples, coverage, fuzzing, stateful),
with the hooks of support/schemathesis_hooks.py. ``/v1/worker`` and ``/v1/producer`` are
left out: a WebSocket is beyond OpenAPI (the WebSocket fuzzer of scripts/fuzz.py covers the
worker's; tests/integration/server/test_producer_ws.py the producer's). One worker thread:
CPython 3.11's ``ast.parse`` (which Hypothesis calls to describe a filter) is not safe
across threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def schemathesis_command(url: str, bearer: str, *, max_examples: int, seed: int,
                         request_timeout_s: float = 10.0) -> list[str]:
    exe = Path(sys.executable).with_name("schemathesis")
    return [str(exe), "run", f"{url}/openapi.json", "--checks", "all",
            "--max-examples", str(max_examples), "--seed", str(seed), "--workers", "1",
            "--exclude-path", "/v1/worker", "--exclude-path", "/v1/producer",
            "--request-timeout", str(request_timeout_s),
            "--header", f"Authorization: Bearer {bearer}", "--no-color"]


def run_schemathesis(url: str, bearer: str, workdir: Path, *, max_examples: int, seed: int,
                     timeout_s: float) -> tuple[int, str]:
    """Run it to the end (or ``timeout_s``); returns its exit code (0: no failure, no
    error) and its output. The bearer travels in the environment-free argument list of a
    child on 127.0.0.1 only and is filtered from schemathesis' own report."""
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "support.schemathesis_hooks",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(schemathesis_command(url, bearer, max_examples=max_examples,
                                                   seed=seed),
                              cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return -1, out + f"\n(schemathesis did not finish within {timeout_s:g} s)"
    return done.returncode, done.stdout + done.stderr
