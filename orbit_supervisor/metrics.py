"""``orbit-supervise --metrics-port``: the supervisor's Prometheus metrics over HTTP.

Nothing here runs on the hot path. The session, the pool and the driver already count what
they do (``Supervisor.stats()`` and ``timings()``, plain integers and orbit_host/tally.py
buckets); ``SupervisorCollector`` reads them when Prometheus scrapes. The HTTP server is
``prometheus_client``'s own, on a thread of its own: a scrape asks the event loop for one
snapshot (``call_soon_threadsafe``, so nothing is read while the loop changes it) and reads
the children's RSS from /proc on the scrape thread, never on the loop.

This module (and with it ``prometheus_client``) is imported only when metrics are on.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from orbit_host.exposition import counter, histogram
from orbit_host.tally import Counts

from .app import Supervisor, SupervisorStats

__all__ = ["MetricsServer", "SupervisorCollector"]

# A scrape waits this long for the loop's snapshot (a loop this late has bigger problems).
_SNAPSHOT_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class _Snapshot:
    stats: SupervisorStats
    kill: tuple[list[tuple[float, int]], float]
    replacement: tuple[list[tuple[float, int]], float]
    loop_lag: tuple[list[tuple[float, int]], float]
    pids: list[int]
    connected: bool


def _take(sup: Supervisor) -> _Snapshot:
    """On the loop's thread: everything a scrape shows, copied."""
    t = sup.timings()
    return _Snapshot(sup.stats(), t.kill.snapshot(), t.replacement.snapshot(),
                     t.loop_lag.snapshot(), sup.child_pids(), sup.connected)


def _counts(by: dict[str, int]) -> Counts:
    counts = Counts()
    for key, n in by.items():
        counts.add((key,), n)
    return counts


def _rss(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            out.append(psutil.Process(pid).memory_info().rss)
    return out


class SupervisorCollector(Collector):
    """The supervisor's series (docs/observability.md), read at scrape time."""

    def __init__(self, sup: Supervisor, capacity: int, version: str) -> None:
        self._sup = sup
        self._capacity = capacity
        self._version = version

    def snapshot(self) -> _Snapshot | None:
        loop = self._sup.loop
        if loop is None or loop.is_closed():
            return None
        done: concurrent.futures.Future[_Snapshot] = concurrent.futures.Future()

        def take() -> None:
            try:
                done.set_result(_take(self._sup))
            except BaseException as exc:  # handed to the scrape thread
                done.set_exception(exc)

        try:
            loop.call_soon_threadsafe(take)
            return done.result(_SNAPSHOT_TIMEOUT_S)
        except (RuntimeError, concurrent.futures.TimeoutError):  # the loop is gone or stuck
            return None

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("orbit_supervisor_info",
                                 "This supervisor (value 1): one series per queue it serves, "
                                 "with that queue's instance.",
                                 labels=("version", "queue", "instance_id"))
        for queue_id, instance_id in self._sup.instance_ids.items():
            info.add_metric((self._version, queue_id, instance_id), 1)
        yield info
        snap = self.snapshot()
        if snap is None:
            return
        s = snap.stats
        children = s.children
        yield GaugeMetricFamily("orbit_supervisor_connected",
                                "1 while a connection to the server is open.",
                                value=int(snap.connected))
        slots = GaugeMetricFamily("orbit_supervisor_slots",
                                  "Child slots by state: busy (running a handler), free (an "
                                  "idle child), replacing (a new child is starting).",
                                  labels=("state",))
        if children is not None:
            slots.add_metric(("busy",), children.busy)
            slots.add_metric(("free",), children.idle)
            slots.add_metric(("replacing",), children.replacing)
        yield slots
        yield GaugeMetricFamily("orbit_supervisor_slots_capacity", "Child slots (--workers).",
                                value=self._capacity)
        yield GaugeMetricFamily("orbit_supervisor_running",
                                "Attempts whose handler runs or is being killed.",
                                value=s.running)
        by_queue = GaugeMetricFamily("orbit_supervisor_queue_running",
                                     "Attempts whose handler runs or is being killed, by "
                                     "queue.", labels=("queue",))
        for queue_id, q in s.queues.items():
            by_queue.add_metric((queue_id,), q.running)
        yield by_queue
        yield counter("orbit_supervisor_queue_attempts_started_total",
                      "Handlers started, by queue.", ("queue",),
                      _counts({queue_id: q.started for queue_id, q in s.queues.items()}))
        yield from self._counters(s)
        yield histogram("orbit_supervisor_kill_latency_seconds",
                        "Local lease expiry (or the kill decision) to the killed child's "
                        "reaped outcome in this process.", (), {(): snap.kill})
        yield histogram("orbit_supervisor_replacement_latency_seconds",
                        "A child's kill to its slot's fresh child being ready.", (),
                        {(): snap.replacement})
        yield histogram("orbit_supervisor_event_loop_lag_seconds",
                        "How late the event loop ran its lag probe (every 100 ms).", (),
                        {(): snap.loop_lag})
        yield GaugeMetricFamily("orbit_supervisor_event_loop_lag_recent_seconds",
                                "The largest recent lateness of the event loop.",
                                value=s.loop_lag_ms / 1000)
        yield GaugeMetricFamily("orbit_supervisor_expiry_margin_seconds",
                                "The margin local lease expiries keep before the server's.",
                                value=s.margin_ms / 1000)
        rss = _rss(snap.pids)
        yield GaugeMetricFamily("orbit_supervisor_children_rss_bytes",
                                "Resident memory of all children together.", value=sum(rss))
        yield GaugeMetricFamily("orbit_supervisor_child_rss_max_bytes",
                                "Resident memory of the largest child.",
                                value=max(rss, default=0))

    def _counters(self, s: SupervisorStats) -> Iterator[Metric]:
        children = s.children
        for name, doc, value in (
            ("orbit_supervisor_attempts_started_total", "Handlers started.", s.started),
            ("orbit_supervisor_renewals_total", "Lease renewals the server confirmed.",
             s.renewals_confirmed),
            ("orbit_supervisor_reports_confirmed_total",
             "Final reports the server accepted.", s.reports_confirmed),
            ("orbit_supervisor_reports_evidence_total",
             "Final reports the server kept as evidence only.", s.evidence_confirmed),
            ("orbit_supervisor_reconnects_total", "Connections made again after a loss.",
             s.reconnects),
            ("orbit_supervisor_events_dropped_total",
             "Local events dropped because nobody read them.", s.dropped_events),
            ("orbit_supervisor_late_kills_total",
             "Lease timers that ran more than 20 ms past the local expiry.", s.late_kills),
            ("orbit_supervisor_children_spawned_total", "Children forked.",
             children.spawned if children else 0),
            ("orbit_supervisor_children_recycled_total",
             "Children retired after --max-tasks-per-child or the memory limit.",
             children.recycled if children else 0),
            ("orbit_supervisor_children_crashed_total", "Children that died on their own.",
             children.crashed if children else 0),
            ("orbit_supervisor_grants_declined_total",
             "Granted reservations given back unstarted (docs/protocol.md, Grants).",
             s.grants_declined),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        yield counter("orbit_supervisor_frames_total",
                      "Protocol frames to and from the server (every connection).",
                      ("direction",), _counts({"out": s.frames_sent, "in": s.frames_received}))
        yield counter("orbit_supervisor_child_messages_total",
                      "Messages over the children's sockets.", ("direction",),
                      _counts({"out": children.messages_sent if children else 0,
                               "in": children.messages_received if children else 0}))
        yield counter("orbit_supervisor_attempts_ended_total",
                      "Executions ended, by outcome (UNKNOWN for a kill).", ("outcome",),
                      _counts(dict(s.ended)))
        yield counter("orbit_supervisor_kills_total", "Children killed, by reason.",
                      ("reason",), _counts(children.killed if children else {}))


class MetricsServer:
    """``prometheus_client``'s HTTP server for one supervisor; ``close()`` stops it."""

    def __init__(self, sup: Supervisor, host: str, port: int, version: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SupervisorCollector(sup, sup.options.workers, version))
        self.registry.register(ProcessCollector(registry=None))
        self._server: Any
        self._thread: threading.Thread
        # Raises OSError when the address is taken or not ours to bind.
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

