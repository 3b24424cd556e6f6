"""SIGKILL of the supervisor leaves no child and no grandchild alive (PDEATHSIG, subreaper)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import psutil
from pool_support import alive, snapshot, wait_all_gone
from support.waiting import UNIT

SCRIPT = Path(__file__).with_name("supervisor_like.py")


def test_sigkill_of_the_parent_leaves_nothing_alive(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)],
                            stdout=subprocess.PIPE, cwd=SCRIPT.parent)
    known: list[psutil.Process] = []
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30 * UNIT)
        assert ready, "the supervisor-like parent did not report its pids in 30 s"
        info = orjson.loads(proc.stdout.readline())
        tree_pids = [pid for pids in info["trees"].values() for pid in pids]
        known = snapshot([info["template"], *info["children"], *tree_pids])
        assert len(known) == 1 + 3 + 9, "every process must be running before the kill"
        assert set(info["children"]) <= set(tree_pids)

        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5 * UNIT)
        left = wait_all_gone(known, 5.0)
        assert left == [], f"still running 5 s after the parent died: {left}"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5 * UNIT)
        for p in known:
            if alive(p.pid, p):
                p.kill()
