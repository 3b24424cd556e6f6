"""Show the hard kill: a handler that ignores SIGTERM, spins in C code and started a
grandchild is killed, with its grandchild, when its attempt's lease runs out.

    ORBIT_QUEUE_ID=<queue> ORBIT_PRODUCER_CREDENTIALS_FILE=producer.json \
    ORBIT_CREDENTIALS_FILE=worker.json python -m examples.uncooperative

The task allows one attempt of 1.5 s. Expected output (IDs, PIDs and times vary):

    task=<id> state=NEEDS_REVIEW outcome=UNKNOWN code=ATTEMPT_TIMEOUT kill_reason=ATTEMPT_TIMEOUT
    handler pid=<pid> alive=false; grandchild pid=<pid> alive=false
    worker_drained=true started=1 confirmed=1 running=0

The task ends NEEDS_REVIEW because it is NON_IDEMPOTENT and its outcome is uncertain.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import tempfile
from pathlib import Path

import psutil

from .._runner import ExampleError, drained_line, example_main, read_settings, run_tasks
from .handlers import HANDLER_ENV, stubborn_type

ATTEMPT_TIMEOUT_MS = 1500
GONE_WITHIN_S = 2.0


async def _gone(pid: int) -> bool:
    """Whether ``pid`` is gone (or a zombie), waiting at most GONE_WITHIN_S."""
    for _ in range(int(GONE_WITHIN_S / 0.05)):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        await asyncio.sleep(0.05)
    return False


async def run_example() -> list[str]:
    settings = read_settings("examples.uncooperative")
    handler = f"example.uncooperative.{secrets.token_hex(6)}"
    os.environ[HANDLER_ENV] = handler
    with tempfile.TemporaryDirectory() as tmp:
        pid_file = Path(tmp) / "pids"
        spec = stubborn_type(handler).spec({"pid_file": str(pid_file)}, max_attempts=1,
                                           attempt_timeout_ms=ATTEMPT_TIMEOUT_MS)
        tasks, histories, supervisor = await run_tasks(
            settings, "examples.uncooperative.handlers:HANDLERS", [spec], workers=1,
        )
        handler_pid, grandchild_pid = (int(p) for p in pid_file.read_text().split())
        gone = [await _gone(handler_pid), await _gone(grandchild_pid)]
    task, attempt = tasks[0], histories[0][-1]
    lines = [
        f"task={task['id']} state={task['state']} outcome={attempt['outcome']} "
        f"code={attempt['code']} kill_reason={attempt.get('kill_reason')}",
        f"handler pid={handler_pid} alive={str(not gone[0]).lower()}; "
        f"grandchild pid={grandchild_pid} alive={str(not gone[1]).lower()}",
        drained_line(supervisor),
    ]
    if not all(gone):
        print("\n".join(lines))
        raise ExampleError("a process of the killed attempt is still alive")
    return lines


def main() -> int:
    return example_main("examples.uncooperative", __doc__, run_example)


if __name__ == "__main__":
    sys.exit(main())
