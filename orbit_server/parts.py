"""``ServerParts``: what the HTTP and WebSocket adapters use of a running server, and nothing
more. ``OrbitServer`` builds it; the adapters never see the server itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .config import ServerConfig
from .dispatcher import Dispatcher
from .ratelimit import FailedLogins, TokenBuckets
from .services import Effects, Services
from .store_thread import StoreThread
from .traffic import Traffic
from .waiters import TaskWaiters


@dataclass(frozen=True, slots=True)
class ServerParts:
    """The parts an adapter works with. Run every ``services`` call on ``store`` (one hop per
    transaction), then hand the ``Effects`` it returned to ``act_on`` on the event loop."""

    config: ServerConfig
    clock: Callable[[], int]  # wall-clock milliseconds
    store: StoreThread
    services: Services
    dispatcher: Dispatcher
    waiters: TaskWaiters
    logins: FailedLogins  # the one failed-login budget of every route and the worker hello
    # The one submit budget per credential, over HTTP and the producer channel alike.
    submits: TokenBuckets
    # Acts on what a transaction changed: wakes long polls, hints the dispatcher, pushes
    # cancels and closes, counts it, re-arms the reaper (OrbitServer.act_on).
    act_on: Callable[[Effects], None]
    traffic: Traffic  # messages over the WebSocket channels (metrics)
