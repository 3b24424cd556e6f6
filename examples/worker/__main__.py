"""Submit three texts, run a supervisor with two children in this process, print the results.

Run from the repository root (``scripts/demo`` does all of this for you):

    ORBIT_QUEUE_ID=<queue id> \
    ORBIT_PRODUCER_CREDENTIALS_FILE=producer.json \
    ORBIT_CREDENTIALS_FILE=worker.json \
        python -m examples.worker

- ORBIT_PRODUCER_CREDENTIALS_FILE: a producer credential of the queue (submits, reads).
- ORBIT_CREDENTIALS_FILE: a worker credential of the queue (the supervisor's).
  Two credentials because the roles are separate: a worker credential only speaks the worker
  protocol, a producer one only the HTTP task API.
- ORBIT_QUEUE_ID: the queue; default: the producer credential's only queue.
- ORBIT_URL: the server; default: the URL in each credentials file.

It uses a fresh handler name per run (see handlers.py), so only its own children serve its
tasks. Output, one line per task in submission order, then the supervisor's figures after
the drain:

    task=<task id> state=SUCCEEDED result={"text":"HELLO ORBIT"}
    ...
    worker_drained=true started=3 confirmed=3 running=0

Exit status 0 when all three succeeded and the supervisor drained; 1 otherwise (one line on
stderr says why).
"""

from __future__ import annotations

import os
import secrets
import sys
from typing import Any

from .._runner import ExampleError, drained_line, example_main, read_settings, run_tasks
from .handlers import HANDLER_ENV, normalize_type

TEXTS = ("hello orbit", "reusable worker", "durable result")
WORKERS = 2


def _task_spec(handler: str, text: str) -> dict[str, Any]:
    # The shared declaration builds the spec (idempotent by declaration); a batch submits
    # the three at once.
    return normalize_type(handler).spec({"text": text}, max_attempts=3)


async def run_example() -> list[str]:
    """Do the whole example and return the lines to print; raise ExampleError on failure."""
    settings = read_settings("examples.worker")
    handler = f"text.normalize.{secrets.token_hex(6)}"
    # The children inherit the environment: this is how they learn the fresh handler name.
    os.environ[HANDLER_ENV] = handler
    tasks, _, supervisor = await run_tasks(
        settings, "examples.worker.handlers:HANDLERS",
        [_task_spec(handler, t) for t in TEXTS], workers=WORKERS,
    )
    lines = [
        f"task={t['id']} state={t['state']} result={t.get('result_json')}" for t in tasks
    ]
    lines.append(drained_line(supervisor))
    failed = [t["id"] for t in tasks if t["state"] != "SUCCEEDED"]
    if failed:
        print("\n".join(lines))
        raise ExampleError(f"{len(failed)} task(s) did not succeed: {', '.join(failed)}")
    return lines


def main() -> int:
    return example_main("examples.worker", __doc__, run_example)


if __name__ == "__main__":
    sys.exit(main())
