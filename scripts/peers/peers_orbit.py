"""Orbit handlers for scripts/bench_peers.py: ``orbit-supervise ... peers_orbit:handlers``."""

from __future__ import annotations

from typing import Any

import peers_work

from orbit_child import Execution, Handler


def noop(execution: Execution) -> Any:
    return peers_work.noop()


def burn(execution: Execution) -> Any:
    return peers_work.burn(float(execution.payload["ms"]))


def spin(execution: Execution) -> Any:
    return peers_work.spin(str(execution.payload["pidfile"]))


def join(execution: Execution) -> Any:
    """The chord's callback: it receives every member's result (``execution.parents``)."""
    return len(execution.parents)


handlers = [
    Handler("peers.noop", "1", "1", noop),
    Handler("peers.burn", "1", "1", burn),
    Handler("peers.spin", "1", "1", spin),
    Handler("peers.join", "1", "1", join),
]
