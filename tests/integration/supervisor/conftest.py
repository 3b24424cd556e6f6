"""Fixtures for the supervisor's integration tests: a queue, a producer, worker credentials
and a factory of real ``orbit-supervise`` processes (all stopped by PID at teardown)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from supervisor_support import (
    SupEnv,
    SupervisorProcess,
    alive,
    worker_credentials_file,
)
from support.orbit_http import OrbitEnv
from support.waiting import wait_until


@pytest.fixture
def sup_env(orbit: OrbitEnv, tmp_path: Path) -> Iterator[SupEnv]:
    queue_id = orbit.queue()
    producer = orbit.producer(queue_id)
    creds = worker_credentials_file(orbit, queue_id, tmp_path / "worker.json")
    started: list[SupervisorProcess] = []

    def start(**kwargs: Any) -> SupervisorProcess:
        kwargs.setdefault("workers", 2)
        sup = SupervisorProcess(tmp_path, kwargs.pop("credentials_file", creds),
                                kwargs.pop("queue_id", queue_id), **kwargs)
        started.append(sup)
        return sup.start()

    try:
        yield SupEnv(orbit, queue_id, producer, creds, tmp_path, start)
    finally:
        for sup in started:
            sup.descendants()
            sup.stop()
        # Killed supervisors take their tree down through parent-death signals: bounded wait.
        seen = sorted(pid for sup in started for pid in sup.descendants_seen)
        wait_until(lambda: not alive(seen), timeout=5.0,
                   what=lambda: f"no process left behind: {alive(seen)}")
