"""The Dramatiq broker and actors of scripts/bench_peers.py: ``dramatiq peers_dramatiq ...``.

Redis broker with the Results middleware on the same Redis (``PEERS_REDIS_URL``, set by the
benchmark); otherwise Dramatiq's default middleware (its TimeLimit checks once a second).
``max_retries=0`` so a task that hits its time limit is not run again.
"""

from __future__ import annotations

import os

import dramatiq
import peers_work
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import RedisBackend as RateLimiterBackend
from dramatiq.results import Results
from dramatiq.results.backends.redis import RedisBackend

# Set by the benchmark to its own redis-server; no default, so nothing reaches another Redis.
URL = os.environ["PEERS_REDIS_URL"]

broker = RedisBroker(url=URL)
backend = RedisBackend(url=URL)
broker.add_middleware(Results(backend=backend))
# A group's completion callback (the chord row) counts its members through a rate limiter.
broker.add_middleware(GroupCallbacks(RateLimiterBackend(url=URL)))
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="peers.noop", store_results=True, max_retries=0)
def noop() -> int:
    return peers_work.noop()


@dramatiq.actor(actor_name="peers.burn", store_results=True, max_retries=0)
def burn(ms: float) -> int:
    return peers_work.burn(ms)


@dramatiq.actor(actor_name="peers.spin", store_results=True, max_retries=0)
def spin(pidfile: str) -> int:
    return peers_work.spin(pidfile)


@dramatiq.actor(actor_name="peers.join", store_results=True, max_retries=0)
def join() -> int:
    """The group's completion callback: Dramatiq passes it no results."""
    return 1
