"""Count words in three texts side by side, then merge the counts: one workflow (a chord).

Run from the repository root, with the same settings as ``python -m examples.worker``:

    ORBIT_QUEUE_ID=<queue id> \
    ORBIT_PRODUCER_CREDENTIALS_FILE=producer.json \
    ORBIT_CREDENTIALS_FILE=worker.json \
        python -m examples.workflows

The producer submits ``chord(group(count.s(text) for text in TEXTS), merge.s({"top": 3}))``
in one call; the server holds the merge (WAITING) until every count SUCCEEDED, then hands it
their results in order. A supervisor with two children runs in this process. Output: the
workflow, each node with its state, the merged result, then the supervisor's figures:

    workflow=<workflow id> state=SUCCEEDED
    node=0.0 state=SUCCEEDED parents=-
    node=0.1 state=SUCCEEDED parents=-
    node=0.2 state=SUCCEEDED parents=-
    node=1 state=SUCCEEDED parents=0.0,0.1,0.2
    result={"texts":3,"top":[["orbit",3],["runs",2],["a",1]],"words":8}
    worker_drained=true started=4 confirmed=4 running=0

(the exact lines: see tests/e2e/test_example_workflows.py). Exit status 0 when the workflow
succeeded and the supervisor drained; 1 otherwise (one line on stderr says why).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys

import orjson

from orbit_client import AsyncOrbitClient, WorkflowError, chord, group

from .._runner import ExampleError, drained_line, example_main, read_settings
from .handlers import HANDLER_ENV, count_type, merge_type

TEXTS = ("orbit runs", "orbit runs work", "a durable orbit")
WORKERS = 2
RESULT_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 30.0


async def run_example() -> list[str]:
    from orbit_supervisor import Supervisor  # the parent never imports handler code

    settings = read_settings("examples.workflows")
    prefix = f"words.{secrets.token_hex(6)}"
    os.environ[HANDLER_ENV] = prefix  # the children learn the fresh names from it
    count, merge = count_type(prefix), merge_type(prefix)
    flow = chord(group(count.s({"text": text}) for text in TEXTS), merge.s({"top": 3}))
    async with AsyncOrbitClient(settings.url, settings.producer) as orbit:
        handle = await orbit.submit(flow, queue=settings.queue_id, name="word counts")
        supervisor = Supervisor(handlers="examples.workflows.handlers:HANDLERS",
                                queue_id=settings.queue_id, credentials=settings.worker_file,
                                url=settings.url, workers=WORKERS,
                                shutdown_timeout=DRAIN_TIMEOUT_S)
        running = asyncio.create_task(supervisor.run())
        waiting = asyncio.ensure_future(handle.result(RESULT_TIMEOUT_S))
        try:
            await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if running.done():
                running.result()
                raise ExampleError("the supervisor stopped before the workflow ended")
            result = waiting.result()
        except WorkflowError as exc:  # FAILED, CANCELLED, BLOCKED or not ended in time
            raise ExampleError(str(exc)) from None
        finally:
            waiting.cancel()
            supervisor.stop()
            await asyncio.wait_for(asyncio.shield(running), DRAIN_TIMEOUT_S + 10)
        running.result()
        await handle.refresh()
    lines = [f"workflow={handle.id} state={handle.state}"]
    lines += [f"node={n.key} state={n.state} parents={','.join(k for k, _ in n.parents) or '-'}"
              for n in handle.nodes()]
    lines.append(f"result={orjson.dumps(result, option=orjson.OPT_SORT_KEYS).decode()}")
    lines.append(drained_line(supervisor))
    return lines


def main() -> int:
    return example_main("examples.workflows", __doc__, run_example)


if __name__ == "__main__":
    sys.exit(main())
