"""Run a long job that is killed mid-loop and resumes from its checkpoint.

    ORBIT_QUEUE_ID=<queue> ORBIT_PRODUCER_CREDENTIALS_FILE=producer.json \
    ORBIT_CREDENTIALS_FILE=worker.json python -m examples.long_job

The handler sums the squares of 1..30, reporting progress after each item; its first
attempt is SIGKILLed after item 12. Expected output (IDs vary):

    task=<id> state=SUCCEEDED result={"resumed_after":12,"sum":9455}
    attempt=1 outcome=UNKNOWN code=HANDLER_CRASHED
    attempt=2 outcome=SUCCEEDED code=None
    items=30 run_twice=0
    worker_drained=true started=2 confirmed=2 running=0

The second attempt received ``{"done": 12, "sum": 650}`` as ``execution.checkpoint`` and
did items 13 to 30 only.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
from collections import Counter
from pathlib import Path

from .._runner import ExampleError, drained_line, example_main, read_settings, run_tasks
from .handlers import HANDLER_ENV, long_job_type

ITEMS = 30
CRASH_AT = 12


async def run_example() -> list[str]:
    settings = read_settings("examples.long_job")
    handler = f"example.long_job.{secrets.token_hex(6)}"
    os.environ[HANDLER_ENV] = handler
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "journal"
        spec = long_job_type(handler).spec(
            {"items": ITEMS, "crash_at": CRASH_AT, "journal": str(journal)})
        tasks, histories, supervisor = await run_tasks(
            settings, "examples.long_job.handlers:HANDLERS", [spec], workers=1)
        done = [int(line.split()[1]) for line in journal.read_text().splitlines()]
    task, attempts = tasks[0], histories[0]
    twice = sum(1 for count in Counter(done).values() if count > 1)
    result = json.dumps(task.get("result"), separators=(",", ":"), sort_keys=True)
    lines = [f"task={task['id']} state={task['state']} result={result}"]
    lines += [f"attempt={a['attempt_number']} outcome={a['outcome']} code={a.get('code')}"
              for a in attempts]
    lines += [f"items={len(set(done))} run_twice={twice}", drained_line(supervisor)]
    if task["state"] != "SUCCEEDED" or twice or len(set(done)) != ITEMS:
        print("\n".join(lines))
        raise ExampleError("the job did not resume from its checkpoint")
    return lines


def main() -> int:
    return example_main("examples.long_job", __doc__, run_example)


if __name__ == "__main__":
    sys.exit(main())
