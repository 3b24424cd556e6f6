"""The two other runnable examples against a real orbit-server: the hard kill of an
uncooperative handler (and its grandchild), and CPU-bound tasks on two children."""

from __future__ import annotations

import re
from pathlib import Path

from support.examples import run_example
from support.orbit_http import OrbitEnv

ROOT = Path(__file__).resolve().parents[2]


def test_uncooperative_handler_is_killed_with_its_grandchild(
    orbit: OrbitEnv, tmp_path: Path
) -> None:
    lines = run_example("uncooperative", orbit, tmp_path)
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
    orbit: OrbitEnv, tmp_path: Path
) -> None:
    lines = run_example("cpu_heavy", orbit, tmp_path)
    assert len(lines) == 8, lines
    for line in lines[:6]:
        assert re.fullmatch(
            r'task=[0-9a-f]{32} state=SUCCEEDED result=\{"limit":300000,"primes":25997\} '
            r"cpu_ms=\d+", line
        ), line
    assert re.fullmatch(r"tasks=6 wall_ms=\d+ cpu_ms=\d+ parallelism=\d+\.\d\d", lines[6])
    assert lines[7] == "worker_drained=true started=6 confirmed=6 running=0"
