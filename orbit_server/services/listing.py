"""The operator's views: a queue's tasks (filtered, keyset pages), the queues with their
counts, the live workers of every replica, a queue's registered capabilities with their
declared policies, and the capabilities nobody serves. Every public
method is one read transaction.

Workers come from the ``instances`` rows each replica keeps current for the connections it
serves (hello, a presence write every heartbeat interval, the close), so every replica sees
the instances connected to all of them. An instance is live while its row says connected and
it was seen within the session TTL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from sqlalchemy import Connection

from orbit_wire.model import Capability, Role, TaskState

from ..auth import Principal, queue_not_found, require_role, require_visible_queue
from ..domain.listing import TaskFilter, cut_page, encode_cursor, waiting_fact
from ..domain.pauses import PauseSet, paused_fact
from ..store import listing as q
from ..store.fairness import fair_keys_of_queues
from ..store.policies import policies_of_queue
from ..store.queues import queue_exists, queue_rows
from ..store.retry import transactional
from ..store.views import queue_list_view, task_view
from .context import TxContext
from .pauses import paused_views
from .policies import policy_view

_READERS = (Role.ADMIN, Role.PRODUCER)
# The end states the throughput counts (finished_at_ms is set when a task reaches one).
FINISHED_STATES = tuple(s.value for s in (TaskState.SUCCEEDED, TaskState.FAILED,
                                          TaskState.CANCELLED))


class Offers(dict[Capability, int | None]):
    """Capability -> None while a live worker offers it, else when one last offered it;
    ``labels``: the labels of each live worker offering a capability (the waiting fact of a
    task that requires labels)."""

    def __init__(self) -> None:
        super().__init__()
        self.labels: dict[Capability, list[dict[str, str]]] = {}


@transactional  # deadlocks and lost races run again (bounded); DB faults -> UNAVAILABLE
class ListingService:
    """Lists for operators and producers (admin: every queue; others: their queues)."""

    def __init__(self, tx: TxContext) -> None:
        self._tx = tx

    def list_tasks(self, principal: Principal, queue_id: str,
                   filt: TaskFilter) -> dict[str, Any]:
        """One page of the queue's tasks: ``{"tasks": [...], "next_cursor"}``; task views
        without payload and result, PENDING ones with their ``waiting`` fact."""
        require_role(principal, _READERS)
        require_visible_queue(principal, queue_id)
        with self._tx.read() as conn:
            _queue_exists(conn, queue_id)
            page, nxt = cut_page(filt, [q.state_range_rows(conn, filt, queue_id)])
            ids = [str(row["id"]) for row in page]
            by_id = q.list_rows_by_id(conn, ids)
            offers = self._offers(conn, queue_id) if any(
                r["state"] == "PENDING" for r in by_id.values()) else Offers()
        seen: dict[tuple[Any, ...], Any] = {}
        pauses = self._tx.pauses.current
        views = [with_waiting(task_view(by_id[i], full=False), offers, seen, pauses)
                 for i in ids if i in by_id]
        return {"tasks": views, "next_cursor": None if nxt is None else encode_cursor(filt, nxt)}

    def list_queues(self, principal: Principal) -> dict[str, Any]:
        """Every queue (admin) or the principal's queues, with task counts by state."""
        require_role(principal, _READERS)
        with self._tx.read() as conn:
            rows = queue_rows(conn, None if principal.role is Role.ADMIN else principal.queues)
            counts = q.task_counts_of_queues(conn, [r["id"] for r in rows])
            paused = paused_views(conn, [r["id"] for r in rows])
            fair = fair_keys_of_queues(conn, [r["id"] for r in rows])
        return {"queues": [{**queue_list_view(r, counts.get(r["id"], {})),
                            "paused": paused.get(r["id"], []), "fair": fair.get(r["id"])}
                           for r in rows]}

    def list_workers(self, principal: Principal, queue_id: str | None) -> dict[str, Any]:
        """The live worker instances of one queue, or of every queue the principal may see,
        with their running attempts."""
        require_role(principal, _READERS)
        if queue_id is not None:
            require_visible_queue(principal, queue_id)
        now = self._tx.clock()
        with self._tx.read() as conn:
            if queue_id is not None:
                _queue_exists(conn, queue_id)
            rows = [r for r in live_instances(conn, now, self._tx.config.session_ttl_ms)
                    if (queue_id is None or r["queue_id"] == queue_id)
                    and principal.may_use_queue(r["queue_id"])]
            running: dict[str, list[dict[str, Any]]] = {}
            for a in q.running_of_instances(conn, [r["id"] for r in rows]):
                running.setdefault(a["instance_id"], []).append({
                    "task_id": a["task_id"], "attempt_id": a["id"],
                    "child_pid": a["child_pid"],
                    "running_ms": max(0, now - (a["started_at_ms"] or now)),
                })
        return {"workers": [worker_view(r, running.get(r["id"], [])) for r in rows]}

    def throughput(self, principal: Principal, queue_id: str, window_ms: int,
                   windows: int) -> dict[str, Any]:
        """The queue's tasks finished in each of the last ``windows`` windows of
        ``window_ms`` (oldest first), by end state: what the dashboard's chart draws."""
        require_role(principal, _READERS)
        require_visible_queue(principal, queue_id)
        until = self._tx.clock()
        since = until - window_ms * windows
        slots: list[dict[str, int]] = [{s: 0 for s in FINISHED_STATES} for _ in range(windows)]
        with self._tx.read() as conn:
            _queue_exists(conn, queue_id)
            for state, slot, n in q.finished_by_window(conn, queue_id, since, until, window_ms):
                if state in FINISHED_STATES and 0 <= int(slot) < windows:
                    slots[int(slot)][state] += n
        return {"queue_id": queue_id, "window_ms": window_ms, "until_at_ms": until,
                "windows": [{"from_at_ms": since + i * window_ms, "counts": counts}
                            for i, counts in enumerate(slots)]}

    def capabilities(self, principal: Principal, queue_id: str) -> dict[str, Any]:
        """The capabilities registered in the queue (every worker hello registers its own)
        with the policy declared for each (docs/handlers.md, "Declared policies")."""
        require_role(principal, _READERS)
        require_visible_queue(principal, queue_id)
        with self._tx.read() as conn:
            _queue_exists(conn, queue_id)
            rows = policies_of_queue(conn, queue_id)
        return {"queue_id": queue_id, "capabilities": [policy_view(r) for r in rows]}

    def unserved(self) -> list[dict[str, Any]]:
        """Every (queue, capability) with PENDING tasks and no live worker offering it:
        ``{"queue_id", "capability", "pending", "since"}`` (the server's warning log)."""
        now = self._tx.clock()
        with self._tx.read() as conn:
            live: set[tuple[str, Capability]] = set()
            for row in live_instances(conn, now, self._tx.config.session_ttl_ms):
                live.update((row["queue_id"], cap) for cap in _capabilities(row["capabilities"]))
            out = []
            offers_by_queue: dict[str, Offers] = {}
            for queue_id, handler, version, payload_version, n, oldest in (
                    q.pending_by_queue_capability(conn)):
                cap = Capability(handler, version, payload_version)
                if (queue_id, cap) in live:
                    continue
                if queue_id not in offers_by_queue:
                    offers_by_queue[queue_id] = self._offers(conn, queue_id)
                fact = waiting_fact("PENDING", cap, oldest, offers_by_queue[queue_id])
                if fact is not None:
                    out.append({"queue_id": queue_id, "capability": cap.to_dict(),
                                "pending": n, "since": fact["since"]})
        return out

    def _offers(self, conn: Connection, queue_id: str) -> Offers:
        return queue_offers(conn, queue_id, self._tx.clock(), self._tx.config.session_ttl_ms)


def queue_offers(conn: Connection, queue_id: str, now: int, ttl_ms: int) -> Offers:
    """Each capability the queue's instances offered: None while a live one offers it,
    else when the last one offering it was seen."""
    return queue_offers_until(conn, queue_id, now, ttl_ms)[0]


def queue_offers_until(conn: Connection, queue_id: str, now: int,
                       ttl_ms: int) -> tuple[Offers, int | None]:
    """``queue_offers`` and the first instant it stops holding without a row changing (the
    earliest a live instance it counted stops being live; None: none was live)."""
    live_after = now - ttl_ms
    offers = Offers()
    until: int | None = None
    for caps, seen, gone, labels in q.instance_offers_of_queue(conn, queue_id):
        live = gone is None and seen >= live_after
        if live:
            until = seen + ttl_ms + 1 if until is None else min(until, seen + ttl_ms + 1)
        for cap in _capabilities(caps):
            if live:
                offers[cap] = None
                offers.labels.setdefault(cap, []).append(_labels(labels))
            elif cap not in offers or (offers[cap] is not None and offers[cap] < seen):
                offers[cap] = seen
    return offers, until


def capability_stats(conn: Connection, queue_id: str, now: int, ttl_ms: int,
                     pauses: PauseSet | None = None) -> list[dict[str, Any]]:
    """Pending tasks per capability beside the live workers offering it (the queue's
    capabilities either way), read in the caller's transaction."""
    live: dict[Capability, int] = {}
    for row in live_instances(conn, now, ttl_ms):
        if row["queue_id"] == queue_id:
            for cap in _capabilities(row["capabilities"]):
                live[cap] = live.get(cap, 0) + 1
    pending: dict[Capability, tuple[int, int]] = {}
    for handler, version, payload_version, n, oldest in q.pending_by_capability(conn, queue_id):
        pending[Capability(handler, version, payload_version)] = (n, oldest)
    offers = queue_offers(conn, queue_id, now, ttl_ms) if pending else Offers()
    out = []
    for cap in sorted(set(live) | set(pending), key=str):
        n, oldest = pending.get(cap, (0, None))
        pause = pauses.pause_of(queue_id, cap) if pauses else None
        out.append({"capability": cap.to_dict(), "pending": n, "live_workers": live.get(cap, 0),
                    "paused": pause.view() if pause else None,
                    "waiting": None if oldest is None
                    else paused_fact(pause, cap, oldest) if pause
                    else waiting_fact("PENDING", cap, oldest, offers)})
    return out


def with_waiting(view: dict[str, Any], offers: Offers,
                 seen: dict[tuple[Any, ...], Any] | None = None,
                 pauses: PauseSet | None = None) -> dict[str, Any]:
    """Fill ``view["waiting"]``: the pause that holds a PENDING task (``pauses``: those in
    force), else whether a live worker offers its capability. ``seen`` (one per answer, of
    one queue) shares the fact among views of one capability and submit instant: a batch
    of a thousand is mostly one of each."""
    cap = view["capability"]
    requires = view["policy"]["requires"]
    key = (cap["handler"], cap["handler_version"], cap["payload_version"], view["state"],
           view["created_at_ms"], None if requires is None else tuple(sorted(requires.items())))
    if seen is not None and key in seen:
        view["waiting"] = seen[key]
        return view
    capability = Capability(*key[:3])
    pause = (pauses.pause_of(view["queue_id"], capability)
             if pauses and view["state"] == TaskState.PENDING.value else None)
    view["waiting"] = (paused_fact(pause, capability, view["created_at_ms"]) if pause
                       else waiting_fact(view["state"], capability, view["created_at_ms"],
                                         offers, requires, offers.labels.get(capability, ())))
    if seen is not None:
        seen[key] = view["waiting"]
    return view


def live_instances(conn: Connection, now: int, ttl_ms: int) -> list[Mapping[Any, Any]]:
    """Instance rows connected (per the replica serving them) and seen within ``ttl_ms``."""
    return [r for r in q.instances_seen_since(conn, now - ttl_ms)
            if r["disconnected_at_ms"] is None and r["connected_at_ms"] is not None]


def worker_view(row: Mapping[Any, Any], running: list[dict[str, Any]]) -> dict[str, Any]:
    caps = _capabilities(row["capabilities"])
    return {
        "instance_id": row["id"], "queue_id": row["queue_id"], "replica": row["replica"],
        "version": row["agent"], "capabilities": [c.to_dict() for c in caps],
        "slots": row["slots"], "credit": row["credit"], "labels": _labels(row["labels"]),
        "connected_at": row["connected_at_ms"], "connected_at_ms": row["connected_at_ms"],
        "last_heartbeat_at": row["last_heartbeat_at_ms"],
        "last_heartbeat_at_ms": row["last_heartbeat_at_ms"],
        "last_seen_at_ms": row["last_seen_at_ms"], "running": running,
    }


def capabilities_json(caps: Iterable[Capability]) -> str:
    return orjson.dumps([c.to_dict() for c in caps]).decode()


def labels_json(labels: Mapping[str, str] | None) -> str | None:
    """An instance row's labels column (null: none)."""
    return orjson.dumps(dict(labels)).decode() if labels else None


def _labels(text: str | None) -> dict[str, str]:
    return orjson.loads(text) if text else {}


def _capabilities(text: str | None) -> list[Capability]:
    if not text:
        return []
    return [Capability(c["handler"], c["handler_version"], c["payload_version"])
            for c in orjson.loads(text)]


def _queue_exists(conn: Connection, queue_id: str) -> None:
    if not queue_exists(conn, queue_id):
        raise queue_not_found(queue_id)
