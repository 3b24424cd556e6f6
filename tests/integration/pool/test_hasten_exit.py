"""procutil.hasten_exit with a real process group: a niced group gets this process's own
nice value back where the kernel allows it (CAP_SYS_NICE), and is left alone otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from support.waiting import UNIT

from orbit_host import procutil


def test_a_niced_group_gets_our_priority_back_when_permitted() -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    if ours > 9:
        pytest.skip("this process runs at nice > 9: no room below the child")
    child = subprocess.Popen(
        [sys.executable, "-c", "import os, time; os.nice(10); time.sleep(60)"],
        start_new_session=True)
    try:
        for _ in range(int(100 * UNIT)):  # bounded: until its os.nice(10) has run
            if os.getpriority(os.PRIO_PROCESS, child.pid) == ours + 10:
                break
            time.sleep(0.05)
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == ours + 10
        permitted = procutil._may_renice
        procutil.hasten_exit(child.pid)
        after = os.getpriority(os.PRIO_PROCESS, child.pid)
        if os.geteuid() == 0:
            assert permitted and procutil._may_renice and after == ours
        else:  # without CAP_SYS_NICE the first refusal stops the attempts
            assert after == ours + 10 and not procutil._may_renice
        procutil.hasten_exit(99_999_999)  # a group that does not exist: nothing raised
    finally:
        os.kill(child.pid, 9)
        child.wait(timeout=30 * UNIT)
