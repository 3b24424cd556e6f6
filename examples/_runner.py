"""What every example does: read its settings, submit tasks, run a supervisor in this
process until the tasks settle, then drain it. Each example only says what to submit and
what to print."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orbit_client import AsyncOrbitClient, load_credentials
from orbit_host.credentials import Credentials
from orbit_wire.errors import OrbitError


class ExampleError(Exception):
    """Why an example could not finish; printed as one line."""


@dataclass(frozen=True)
class Settings:
    url: str | None
    worker_file: str
    producer: Credentials
    queue_id: str


def read_settings(module: str) -> Settings:
    """ORBIT_URL (optional), ORBIT_CREDENTIALS_FILE (worker), ORBIT_PRODUCER_CREDENTIALS_FILE,
    ORBIT_QUEUE_ID (default: the producer credential's only queue). ``module`` is the
    example's ``python -m`` name, for the message that says what is missing."""

    def setting(name: str, default: str | None = None) -> str:
        value = os.environ.get(name) or default
        if not value:
            raise ExampleError(f"set {name} (see python -m {module} --help)")
        return value

    worker_file = setting("ORBIT_CREDENTIALS_FILE")
    producer = load_credentials(setting("ORBIT_PRODUCER_CREDENTIALS_FILE"))
    default_queue = producer.queues[0] if len(producer.queues) == 1 else None
    return Settings(
        url=os.environ.get("ORBIT_URL") or None,
        worker_file=worker_file,
        producer=producer,
        queue_id=setting("ORBIT_QUEUE_ID", default_queue),
    )


async def run_tasks(
    settings: Settings,
    handlers: str,
    specs: Sequence[Mapping[str, Any]],
    *,
    workers: int,
    result_timeout: float = 60.0,
    drain_timeout: float = 30.0,
    **supervisor_options: Any,
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]], Any]:
    """Submit ``specs``, run a Supervisor on ``handlers`` until every task settles, drain it.

    Returns (settled tasks, their attempt histories, the drained supervisor)."""
    from orbit_supervisor import Supervisor  # the parent never imports handler code

    async with AsyncOrbitClient(settings.url, settings.producer) as orbit:
        submitted = await orbit.submit_batch(settings.queue_id, list(specs))
        supervisor = Supervisor(
            handlers=handlers,
            queue_id=settings.queue_id,
            credentials=settings.worker_file,
            url=settings.url,
            workers=workers,
            shutdown_timeout=drain_timeout,
            **supervisor_options,
        )
        running = asyncio.create_task(supervisor.run())
        waiting = asyncio.ensure_future(
            asyncio.gather(*(orbit.wait(t["id"], result_timeout) for t in submitted))
        )
        try:
            await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if running.done():
                running.result()  # run() only returns early on an error
                raise ExampleError("the supervisor stopped before the tasks finished")
            tasks = waiting.result()
        finally:
            waiting.cancel()
            supervisor.stop()
            # The shutdown timeout bounds the drain; the extra seconds cover its wind-down.
            await asyncio.wait_for(asyncio.shield(running), drain_timeout + 10)
        running.result()  # raises if the drain did not end cleanly
        histories = [await orbit.attempts(t["id"]) for t in tasks]
    return tasks, [h["attempts"] for h in histories], supervisor


def drained_line(supervisor: Any) -> str:
    stats = supervisor.stats()
    return (
        f"worker_drained=true started={stats.started} "
        f"confirmed={stats.reports_confirmed} running={stats.running}"
    )


def example_main(
    name: str, doc: str | None, run: Callable[[], Coroutine[Any, Any, list[str]]]
) -> int:
    """Run an example: print its lines and return 0, or one line on stderr and return 1."""
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(doc)
        return 0
    try:
        lines = asyncio.run(run())
    except OrbitError as exc:  # client and supervisor errors carry a stable code
        print(f"{name}: {exc.code.value}: {exc.message}", file=sys.stderr)
        return 1
    except (ExampleError, TimeoutError) as exc:
        print(f"{name}: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
