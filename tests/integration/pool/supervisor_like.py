"""A small supervisor-like parent for the parent-death test: a ChildPool running tasks that
start grandchildren. Prints one JSON line with every pid it knows, then waits to be killed.

    python supervisor_like.py DIR
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pool_support imports support
from pool_support import FIXTURES, request, wait_for_pids

from orbit_supervisor.pool import ChildPool


async def main(folder: Path) -> None:
    sys.path.insert(0, str(FIXTURES))
    pool = ChildPool("pool_handlers:handlers", 3)
    await pool.start()
    handlers = ["blocked_read", "ignores_sigterm", "c_spin"]
    tasks = [asyncio.create_task(pool.execute(request(h, {"pid_file": str(folder / h)})))
             for h in handlers]
    pids = {h: await wait_for_pids(folder / h, 3) for h in handlers}
    line = {"template": pool.template_pid, "children": list(pool.child_pids().values()),
            "trees": pids}
    sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.flush()
    await asyncio.sleep(120)  # killed by the test long before
    for task in tasks:
        task.cancel()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
