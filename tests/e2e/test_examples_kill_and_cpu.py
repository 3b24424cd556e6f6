"""The two other runnable examples against a real orbit-server: the hard kill of an
uncooperative handler (and its grandchild), and CPU-bound tasks on two children."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support.server import ServerProcess

from orbit_client import Credentials, OrbitClient

ROOT = Path(__file__).resolve().parents[2]


def _run_example(name: str, server: ServerProcess, admin: Credentials, tmp_path: Path) -> list[str]:
    with OrbitClient(credentials=admin) as client:
        queue = client.create_queue(name)["id"]
        client.create_credential("producer", [queue], path=tmp_path / "producer.json")
        client.create_credential("worker", [queue], path=tmp_path / "worker.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
    env.update(
        ORBIT_QUEUE_ID=queue,
        ORBIT_PRODUCER_CREDENTIALS_FILE=str(tmp_path / "producer.json"),
        ORBIT_CREDENTIALS_FILE=str(tmp_path / "worker.json"),
    )
    done = subprocess.run(
        [sys.executable, "-m", f"examples.{name}"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout.splitlines()


def test_uncooperative_handler_is_killed_with_its_grandchild(
    server: ServerProcess, admin_credentials: Credentials, tmp_path: Path
) -> None:
    lines = _run_example("uncooperative", server, admin_credentials, tmp_path)
    assert len(lines) == 3, lines
    assert re.fullmatch(
        r"task=[0-9a-f]{32} state=NEEDS_REVIEW outcome=UNKNOWN code=LEASE_(LOST|EXPIRED) .*",
        lines[0],
    ), lines[0]
    assert re.fullmatch(
        r"handler pid=\d+ alive=false; grandchild pid=\d+ alive=false", lines[1]
    ), lines[1]
    assert lines[2].startswith("worker_drained=true started=1 ")


def test_cpu_heavy_tasks_all_succeed_on_two_children(
    server: ServerProcess, admin_credentials: Credentials, tmp_path: Path
) -> None:
    lines = _run_example("cpu_heavy", server, admin_credentials, tmp_path)
    assert len(lines) == 8, lines
    for line in lines[:6]:
        assert re.fullmatch(
            r'task=[0-9a-f]{32} state=SUCCEEDED result=\{"limit":300000,"primes":25997\} '
            r"cpu_ms=\d+", line
        ), line
    assert re.fullmatch(r"tasks=6 wall_ms=\d+ cpu_ms=\d+ parallelism=\d+\.\d\d", lines[6])
    assert lines[7] == "worker_drained=true started=6 confirmed=6 running=0"
