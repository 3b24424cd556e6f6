"""The real-process helpers of the supervisor tests (tests/integration/supervisor/
supervisor_support.py: ``SupervisorProcess``, ``submit``, ``wait_task`` ...), importable
from tests/support modules that run real supervisors too."""

from __future__ import annotations

import sys
from pathlib import Path

_SUPERVISOR_TESTS = Path(__file__).resolve().parents[1] / "integration" / "supervisor"
if str(_SUPERVISOR_TESTS) not in sys.path:
    sys.path.append(str(_SUPERVISOR_TESTS))

from supervisor_support import (  # noqa: E402
    SupervisorProcess,
    alive,
    attempts,
    read_pids,
    spec,
    submit,
    wait_task,
    worker_credentials_file,
)

__all__ = ["SupervisorProcess", "alive", "attempts", "read_pids", "spec", "submit",
           "wait_task", "worker_credentials_file"]
