"""Run one of the runnable examples (``python -m examples.NAME``) against a real server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .lanes import Lane
from .orbit_http import OrbitEnv
from .waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, orbit: OrbitEnv, tmp_path: Path) -> list[str]:
    """A fresh queue with producer and worker credentials, then the example; its stdout
    lines (it must exit 0)."""
    lane = Lane.open(orbit, name)
    lane.credentials_file(tmp_path / "producer.json")
    lane.credentials_file(tmp_path / "worker.json", "worker")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
    env.update(
        ORBIT_QUEUE_ID=lane.queue,
        ORBIT_PRODUCER_CREDENTIALS_FILE=str(tmp_path / "producer.json"),
        ORBIT_CREDENTIALS_FILE=str(tmp_path / "worker.json"),
    )
    done = subprocess.run(
        [sys.executable, "-m", f"examples.{name}"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120 * UNIT, check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout.splitlines()
