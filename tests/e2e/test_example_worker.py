"""`python -m examples.worker` against a real orbit-server: its exact output."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.examples import run_example
from support.orbit_http import OrbitEnv
from support.waiting import UNIT

from orbit_wire.ids import is_id

ROOT = Path(__file__).resolve().parents[2]
TASK_LINE = re.compile(r"task=([0-9a-f]{32}) state=SUCCEEDED result=(.*)")


def test_normalisation_is_strip_collapse_uppercase() -> None:
    # examples/ is not an installed package: load the module from its file.
    spec = importlib.util.spec_from_file_location(
        "example_handlers", ROOT / "examples" / "worker" / "handlers.py"
    )
    assert spec is not None and spec.loader is not None
    handlers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(handlers)
    normalize_text = handlers.normalize_text
    assert [h.capability.handler for h in handlers.HANDLERS] == ["text.normalize"]
    assert normalize_text("  hello \t\n  orbit ") == "HELLO ORBIT"
    assert normalize_text("") == ""


def test_example_prints_the_expected_lines(
    orbit: OrbitEnv, tmp_path: Path
) -> None:
    lines = run_example("worker", orbit, tmp_path)
    assert len(lines) == 4, lines
    results = []
    ids = []
    for line in lines[:3]:
        match = TASK_LINE.fullmatch(line)
        assert match, line
        ids.append(match.group(1))
        results.append(match.group(2))
    assert results == [
        '{"text":"HELLO ORBIT"}',
        '{"text":"REUSABLE WORKER"}',
        '{"text":"DURABLE RESULT"}',
    ]
    assert all(is_id(i) for i in ids) and len(set(ids)) == 3
    assert lines[3] == "worker_drained=true started=3 confirmed=3 running=0"


def test_example_without_settings_says_what_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
    done = subprocess.run(
        [sys.executable, "-m", "examples.worker"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=60 * UNIT, check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "examples.worker: set ORBIT_CREDENTIALS_FILE " \
        "(see python -m examples.worker --help)"
    assert done.stdout == ""


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_example_help(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.worker", flag], cwd=ROOT,
        capture_output=True, text=True, timeout=60 * UNIT, check=False,
    )
    assert done.returncode == 0 and "ORBIT_PRODUCER_CREDENTIALS_FILE" in done.stdout
