"""`python -m examples.workflows` against a real orbit-server: a chord of word counts and
their merge, run by a supervisor inside the example; its exact output."""

from __future__ import annotations

import re
from pathlib import Path

from support.examples import run_example
from support.orbit_http import OrbitEnv

from orbit_wire.ids import is_id

WORKFLOW_LINE = re.compile(r"workflow=([0-9a-f]{32}) state=SUCCEEDED")


def test_example_prints_the_graph_and_the_merged_counts(orbit: OrbitEnv,
                                                        tmp_path: Path) -> None:
    lines = run_example("workflows", orbit, tmp_path)
    match = WORKFLOW_LINE.fullmatch(lines[0])
    assert match and is_id(match.group(1)), lines
    assert lines[1:] == [
        "node=0.0 state=SUCCEEDED parents=-",
        "node=0.1 state=SUCCEEDED parents=-",
        "node=0.2 state=SUCCEEDED parents=-",
        "node=1 state=SUCCEEDED parents=0.0,0.1,0.2",
        'result={"texts":3,"top":[["orbit",3],["runs",2],["a",1]],"words":8}',
        "worker_drained=true started=4 confirmed=4 running=0",
    ]
