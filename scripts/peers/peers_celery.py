"""The Celery app of scripts/bench_peers.py: ``celery -A peers_celery worker ...``.

Redis is both broker and result backend (``PEERS_REDIS_URL``, set by the benchmark).
``acks_late`` with a prefetch multiplier of 1: a task is acknowledged only after it ran and
each pool process holds at most one, the configuration Celery documents for long or
CPU-bound tasks and the nearest to Orbit's "no reservation a worker cannot start".
"""

from __future__ import annotations

import os

import peers_work
from celery import Celery

# Set by the benchmark to its own redis-server; no default, so nothing reaches another Redis.
URL = os.environ["PEERS_REDIS_URL"]

app = Celery("peers", broker=URL, backend=URL)
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
)


@app.task(name="peers.noop")
def noop() -> int:
    return peers_work.noop()


@app.task(name="peers.burn")
def burn(ms: float) -> int:
    return peers_work.burn(ms)


@app.task(name="peers.spin")
def spin(pidfile: str) -> int:
    return peers_work.spin(pidfile)


@app.task(name="peers.join")
def join(results: list[int]) -> int:
    """The chord's callback: it receives every member's result."""
    return len(results)
