"""Every handler body that more than one handler list registers (pool_handlers,
supervisor_handlers, pool_bench, supervisor_bench), in one place: plain ones (noop, sleep,
whoami, crash, memory_hog), grandchildren that a kill must reach, the three uncooperative
handlers (C spin, SIGTERM ignored, blocked in a system call) that start them, and one that
kills the template under them.

Handlers that start processes write the pids they started, one per line, to
``payload["pid_file"]`` so the test can check with psutil that they are gone.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

from orbit_child import Execution

IMPORTED_IN = os.getpid()  # proves the handler modules are imported once, in the template


def noop(execution: Execution) -> Any:
    return 1


def sleep(execution: Execution) -> Any:
    time.sleep(float(execution.payload.get("seconds", 0.1)))
    return {"slept": execution.payload.get("seconds", 0.1)}


def whoami(execution: Execution) -> Any:
    loaded = sorted({name.split(".")[0] for name in sys.modules})
    return {"pid": os.getpid(), "imported_in": IMPORTED_IN,
            "loaded": [m for m in loaded if m in ("orbit_supervisor", "websockets", "psutil")],
            "policy": os.sched_getscheduler(0), "nice": os.getpriority(os.PRIO_PROCESS, 0)}


def crash(execution: Execution) -> Any:
    kind = execution.payload.get("kind")
    if kind == "segfault":
        ctypes.string_at(0)
    if kind == "exit3":
        os._exit(3)
    if kind == "close_socket":
        # A handler that closes every descriptor breaks its own channel to the supervisor.
        os.closerange(3, 4096)
        time.sleep(30)
    if kind == "garbage":
        for fd in range(3, 64):
            try:
                os.write(fd, b"\x00\x00\x00\x05hello")
            except OSError:
                continue
        time.sleep(30)
    return {"crashed": False}


def memory_hog(execution: Execution) -> Any:
    size = int(execution.payload.get("mib", 300)) * 1024 * 1024
    blob = bytearray(size)
    for i in range(0, size, 4096):  # touch every page so it counts in RSS
        blob[i] = 1
    time.sleep(float(execution.payload.get("hold", 30)))
    return {"held": len(blob)}


def spin_in_c() -> None:
    """Holds the CPU and the GIL inside one C call (catastrophic regex backtracking, 2**40
    steps: it never returns in practice) that no Python-level signal or cancellation can
    interrupt, so only a SIGKILL ends it."""
    re.match(r"(a*)*b", "a" * 40)


def write_pids(execution: Execution, *pids: int) -> None:
    path = execution.payload.get("pid_file") if isinstance(execution.payload, dict) else None
    if path:
        with open(path, "a") as fh:
            fh.write("".join(f"{pid}\n" for pid in pids))
            fh.flush()
            os.fsync(fh.fileno())


def spawn_grandchildren(execution: Execution) -> None:
    """One grandchild in the child's process group, one double-forked into its own session."""
    same_group = subprocess.Popen(["sleep", "1000"])
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                os.execvp("sleep", ["sleep", "1001"])
            os.write(write_end, f"{grandchild}\n".encode())
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    os.close(write_end)
    detached = int(os.read(read_end, 64).split()[0])
    os.close(read_end)
    write_pids(execution, os.getpid(), same_group.pid, detached)


def c_spin(execution: Execution) -> Any:
    """Holds the GIL inside C code (catastrophic backtracking), after starting grandchildren."""
    spawn_grandchildren(execution)
    spin_in_c()
    return {"finished": True}


def ignores_sigterm(execution: Execution) -> Any:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    spawn_grandchildren(execution)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return {"finished": True}


def blocked_read(execution: Execution) -> Any:
    """Blocked in a syscall that never returns: a read on a pipe nobody writes."""
    spawn_grandchildren(execution)
    read_end, _write_end = os.pipe()
    os.read(read_end, 1)
    return {"finished": True}


def kills_its_template(execution: Execution) -> Any:
    """Starts grandchildren (one double-forked into its own session), then SIGKILLs the
    template: this child dies by its death signal, and the detached grandchild is orphaned."""
    spawn_grandchildren(execution)
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)
    return {"survived": True}
