"""What crossed this server's sockets: WebSocket messages by channel and direction, counted
by the drivers (ws_endpoint, producer_ws) and shown by the metrics (orbit_frames_total), so
a benchmark can state the messages each task costs. Event-loop thread only."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Traffic"]


@dataclass(slots=True)
class Traffic:
    worker_in: int = 0
    worker_out: int = 0
    producer_in: int = 0
    producer_out: int = 0
