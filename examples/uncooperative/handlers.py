"""A handler that ignores every request to stop: the case an in-process runtime cannot end.

It ignores SIGTERM, starts a grandchild (``sleep 300``), writes both PIDs where the payload
says, then spins inside C code (a catastrophic regular expression holds the interpreter for
hours and never checks for signals). Only a SIGKILL of its process group ends it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from typing import Any

from orbit_child import Execution, Handlers, TaskType

HANDLER_ENV = "ORBIT_EXAMPLE_HANDLER"
HANDLER_NAME = os.environ.get(HANDLER_ENV) or "example.uncooperative"


def stubborn_type(name: str) -> TaskType[dict[str, str], dict[str, bool]]:
    """The declaration shared with the producer (__main__)."""
    return TaskType(name, "v1", "v1")


HANDLERS = Handlers()


@HANDLERS.task(stubborn_type(HANDLER_NAME))
def stubborn(execution: Execution) -> Any:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen(["sleep", "300"])
    with open(execution.payload["pid_file"], "w") as fh:
        fh.write(f"{os.getpid()} {grandchild.pid}\n")
    # Exponential backtracking: runs in C far longer than any lease.
    re.match(r"(a*)*b", "a" * 64)
    return {"finished": True}  # never reached

