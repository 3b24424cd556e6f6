"""Run one of the runnable examples (``python -m examples.NAME``) against a real server:
``run_example`` to its end, or ``example_process`` to act on it while it runs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from .lanes import Lane
from .orbit_http import OrbitEnv
from .waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def example_process(name: str, orbit: OrbitEnv, tmp_path: Path
                    ) -> Iterator[tuple[subprocess.Popen[bytes], Lane]]:
    """The example started on a fresh queue with producer and worker credentials (its
    output goes to files in ``tmp_path``: nothing blocks on a full pipe while the test acts);
    killed by its PID if it still runs at the end."""
    lane = Lane.open(orbit, name)
    lane.credentials_file(tmp_path / "producer.json")
    lane.credentials_file(tmp_path / "worker.json", "worker")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
    env.update(
        ORBIT_QUEUE_ID=lane.queue,
        ORBIT_PRODUCER_CREDENTIALS_FILE=str(tmp_path / "producer.json"),
        ORBIT_CREDENTIALS_FILE=str(tmp_path / "worker.json"),
    )
    with (tmp_path / "stdout").open("wb") as out, (tmp_path / "stderr").open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", f"examples.{name}"], cwd=ROOT, env=env,
                                stdout=out, stderr=err)
    try:
        yield proc, lane
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10 * UNIT)


def example_lines(proc: subprocess.Popen[bytes], tmp_path: Path) -> list[str]:
    """The stdout lines of the example ``example_process`` started in ``tmp_path``, once it
    has ended (it must exit 0)."""
    proc.wait(120 * UNIT)
    out = (tmp_path / "stdout").read_text()
    assert proc.returncode == 0, out[-2000:] + (tmp_path / "stderr").read_text()[-3000:]
    return out.splitlines()


def run_example(name: str, orbit: OrbitEnv, tmp_path: Path) -> list[str]:
    """The example run to its end on a fresh queue; its stdout lines (it must exit 0)."""
    with example_process(name, orbit, tmp_path) as (proc, _):
        return example_lines(proc, tmp_path)
