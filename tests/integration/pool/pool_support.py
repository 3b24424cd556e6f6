"""Helpers for the pool tests: requests, a pool that is always closed, process checks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
from support.waiting import UNIT, wait_until, wait_until_async

from orbit_supervisor.attempts import Attempt
from orbit_supervisor.lease import Lease
from orbit_supervisor.pool import ChildPool
from orbit_wire.frames import Reservation
from orbit_wire.model import Capability, Idempotency

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures_handlers"
SPEC = "pool_handlers:handlers"

_counter = iter(range(1, 1 << 30))


def new_attempt_id() -> str:
    return f"{os.getpid():08x}{next(_counter):024x}"


def request(handler: str, payload: Any = None, *, attempt_id: str | None = None,
            epoch: int = 3, attempt_number: int = 2) -> Attempt:
    """A new attempt of ``handler`` to execute (as the session would hand it over)."""
    res = Reservation(
        attempt_id=attempt_id or new_attempt_id(), task_id="c" * 32, epoch=epoch,
        attempt_number=attempt_number, capability=Capability(handler, "1", "1"),
        payload={} if payload is None else payload, idempotency=Idempotency.IDEMPOTENT,
        lease_ttl_ms=30_000, attempt_timeout_ms=60_000, deadline_at_ms=1_900_000_000_000,
    )
    return Attempt(res, Lease(res.lease_ttl_ms))


@asynccontextmanager
async def running_pool(size: int = 1, spec: str = SPEC, **kwargs: Any
                       ) -> AsyncIterator[ChildPool]:
    """A started pool; closed on exit, and its template checked gone (killed if not)."""
    pool = ChildPool(spec, size, **kwargs)
    await pool.start()
    template = pool.template_pid
    children = [p for p in pool.child_pids().values()]
    try:
        yield pool
    finally:
        await pool.close()
        for pid in [template, *children]:
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)


def run(coro: Any, timeout: float = 60.0) -> Any:
    """Run ``coro`` in a new event loop, bounded by ``timeout`` (units)."""
    async def bounded() -> Any:
        async with asyncio.timeout(timeout * UNIT):
            return await coro
    return asyncio.run(bounded())


def alive(pid: int, proc: psutil.Process | None = None) -> bool:
    """Running and not a zombie (a zombie holds no resources and runs no code)."""
    try:
        p = proc or psutil.Process(pid)
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def snapshot(pids: Iterable[int]) -> list[psutil.Process]:
    """psutil handles, so later checks are safe against pid reuse."""
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return out


def running(procs: list[psutil.Process]) -> list[int]:
    return [p.pid for p in procs if alive(p.pid, p)]


def wait_all_gone(procs: list[psutil.Process], timeout: float) -> list[int]:
    """Wait (``timeout`` in units) until none of ``procs`` runs; returns the pids still
    running (the caller asserts on them)."""
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not running(procs), timeout=timeout, what="the processes gone")
    return running(procs)


async def wait_for_pids(path: Path, count: int, timeout: float = 10.0) -> list[int]:
    """Wait (``timeout`` in units) until a handler wrote ``count`` pids to ``path``."""
    def written() -> list[int] | None:
        pids = [int(x) for x in path.read_text().split()] if path.exists() else []
        return pids if len(pids) >= count else None

    return await wait_until_async(written, timeout=timeout,
                                  what=f"the handler to report {count} pids in {path}")


async def wait_busy(pool: ChildPool, count: int = 1) -> None:
    """Wait until ``count`` children were handed an execution (its frame sent)."""
    await wait_until_async(lambda: pool.stats().busy >= count, timeout=10, interval=0.01,
                           what=f"{count} busy children")
