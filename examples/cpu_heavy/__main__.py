"""Run CPU-bound tasks on two child processes and show both cores working.

    ORBIT_QUEUE_ID=<queue> ORBIT_PRODUCER_CREDENTIALS_FILE=producer.json \
    ORBIT_CREDENTIALS_FILE=worker.json python -m examples.cpu_heavy

Expected output (IDs and times vary; cpu_ms is the child's CPU time for the attempt):

    task=<id> state=SUCCEEDED result={"limit":300000,"primes":25997} cpu_ms=<n>
    ... (6 tasks)
    tasks=6 wall_ms=<n> cpu_ms=<n> parallelism=<about 2 on two idle cores>

wall_ms is the busy span, from the first attempt's start to the last one's end.
    worker_drained=true started=6 confirmed=6 running=0
"""

from __future__ import annotations

import os
import secrets
import sys

from .._runner import ExampleError, drained_line, example_main, read_settings, run_tasks
from .handlers import HANDLER_ENV, primes_type

TASKS = 6
LIMIT = 300_000
WORKERS = 2


async def run_example() -> list[str]:
    settings = read_settings("examples.cpu_heavy")
    handler = f"example.primes.{secrets.token_hex(6)}"
    os.environ[HANDLER_ENV] = handler
    spec = primes_type(handler).spec({"limit": LIMIT})
    tasks, histories, supervisor = await run_tasks(
        settings, "examples.cpu_heavy.handlers:HANDLERS", [spec] * TASKS, workers=WORKERS,
    )
    last = [history[-1] for history in histories]
    cpu = [attempt.get("cpu_ms") or 0 for attempt in last]
    # The busy span: from the first attempt's start to the last one's end (server times).
    wall_ms = max(a["finished_at_ms"] for a in last) - min(a["started_at_ms"] for a in last)
    lines = [
        f"task={t['id']} state={t['state']} result={t.get('result_json')} cpu_ms={c}"
        for t, c in zip(tasks, cpu, strict=True)
    ]
    lines.append(f"tasks={TASKS} wall_ms={wall_ms} cpu_ms={sum(cpu)} "
                 f"parallelism={sum(cpu) / max(wall_ms, 1):.2f}")
    lines.append(drained_line(supervisor))
    if any(t["state"] != "SUCCEEDED" for t in tasks):
        print("\n".join(lines))
        raise ExampleError("a task did not succeed")
    return lines


def main() -> int:
    return example_main("examples.cpu_heavy", __doc__, run_example)


if __name__ == "__main__":
    sys.exit(main())
