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

import asyncio
import os
import secrets
import sys
from typing import Any

from orbit_client import AsyncOrbitClient, load_credentials
from orbit_wire.errors import OrbitError

from .handlers import HANDLER_ENV, VERSION

TEXTS = ("hello orbit", "reusable worker", "durable result")
WORKERS = 2
RESULT_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 30.0


class ExampleError(Exception):
    """Why the example could not finish; printed as one line."""


def _setting(name: str, default: str | None = None) -> str:
    value = os.environ.get(name) or default
    if not value:
        raise ExampleError(f"set {name} (see python -m examples.worker --help)")
    return value


def _task_spec(handler: str, text: str) -> dict[str, Any]:
    return {
        "handler": handler,
        "handler_version": VERSION,
        "payload_version": VERSION,
        "payload": {"text": text},
        # Normalising text has no side effect, so an uncertain attempt may simply run again.
        "idempotency": "IDEMPOTENT",
        "max_attempts": 3,
    }


async def run_example() -> list[str]:
    """Do the whole example and return the lines to print; raise ExampleError on failure."""
    from orbit_supervisor import Supervisor  # the parent never imports handler code

    url = os.environ.get("ORBIT_URL") or None
    worker_file = _setting("ORBIT_CREDENTIALS_FILE")
    producer = load_credentials(_setting("ORBIT_PRODUCER_CREDENTIALS_FILE"))
    default_queue = producer.queues[0] if len(producer.queues) == 1 else None
    queue_id = _setting("ORBIT_QUEUE_ID", default_queue)

    handler = f"text.normalize.{secrets.token_hex(6)}"
    # The children inherit the environment: this is how they learn the fresh handler name.
    os.environ[HANDLER_ENV] = handler

    async with AsyncOrbitClient(url, producer) as orbit:
        submitted = await orbit.submit_batch(queue_id, [_task_spec(handler, t) for t in TEXTS])
        supervisor = Supervisor(
            handlers="examples.worker.handlers:HANDLERS",
            queue_id=queue_id,
            credentials=worker_file,
            url=url,
            workers=WORKERS,
            shutdown_timeout=DRAIN_TIMEOUT_S,
        )
        running = asyncio.create_task(supervisor.run())
        waiting = asyncio.ensure_future(
            asyncio.gather(*(orbit.wait(t["id"], RESULT_TIMEOUT_S) for t in submitted))
        )
        try:
            await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if running.done():
                # run() only returns early on an error (or a stop nobody asked for).
                running.result()
                raise ExampleError("the supervisor stopped before the tasks finished")
            tasks = waiting.result()
        finally:
            waiting.cancel()
            supervisor.stop()
            # The shutdown timeout bounds the drain; the extra seconds only cover its wind-down.
            await asyncio.wait_for(asyncio.shield(running), DRAIN_TIMEOUT_S + 10)
        running.result()  # raises if the drain did not end cleanly

    lines = [
        f"task={t['id']} state={t['state']} result={t.get('result_json')}" for t in tasks
    ]
    stats = supervisor.stats()
    lines.append(
        f"worker_drained=true started={stats.started} "
        f"confirmed={stats.reports_confirmed} running={stats.running}"
    )
    failed = [t["id"] for t in tasks if t["state"] != "SUCCEEDED"]
    if failed:
        print("\n".join(lines))
        raise ExampleError(f"{len(failed)} task(s) did not succeed: {', '.join(failed)}")
    return lines


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        lines = asyncio.run(run_example())
    except OrbitError as exc:  # client and supervisor errors carry a stable code
        print(f"examples.worker: {exc.code.value}: {exc.message}", file=sys.stderr)
        return 1
    except (ExampleError, TimeoutError) as exc:
        print(f"examples.worker: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
