"""Rows → the JSON views of docs/http-api.md (Task, Attempt, Evidence, AuditEvent, Queue).

JSON text columns (payload, result, details) are returned as ``orjson.Fragment`` so the HTTP
layer serialises them without re-parsing and the exact number text survives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from orbit_wire.labels import requires_from_text
from orbit_wire.model import TaskState

from .tables import priority_of


def fragment(text: str | None) -> orjson.Fragment | None:
    return None if text is None else orjson.Fragment(text)


def task_view(row: Mapping[Any, Any], *, full: bool = True) -> dict[str, Any]:
    """The Task view; ``full=False`` (task lists) leaves out ``payload`` and ``result``,
    which a list row does not read (each may be 256 KiB)."""
    state = row["state"]
    failure = None
    if row["failure_code"] is not None:
        failure = {"code": row["failure_code"],
                   "details": fragment(row["failure_details"] or "{}")}
    view: dict[str, Any] = {
        "id": row["id"],
        "queue_id": row["queue_id"],
        "state": str(state),
        "capability": {
            "handler": row["handler"],
            "handler_version": row["handler_version"],
            "payload_version": row["payload_version"],
        },
        "policy": {
            "idempotency": str(row["idempotency"]),
            # One run's attempts as submitted (``attempt_limit`` counts every run's); a new
            # task's row has no run_* key yet.
            "max_attempts": row.get("run_max_attempts") or row["max_attempts"],
            "backoff": {
                "initial_ms": row["backoff_initial_ms"],
                "max_ms": row["backoff_max_ms"],
                "multiplier": row["backoff_multiplier"],
                "jitter": row["backoff_jitter"],
            },
            "attempt_timeout_ms": row["attempt_timeout_ms"],
            "lease_ttl_ms": row["lease_ttl_ms"],
            "schedule_to_start_ms": row["schedule_to_start_ms"],
            "cancel_grace_ms": row["cancel_grace_ms"],
            # Null: no bound (and for tasks made before the server knew the field).
            "progress_timeout_ms": row.get("progress_timeout_ms"),
            # The labels a worker must have (null: any worker of the queue).
            "requires": requires_from_text(row.get("requires")) or None,
        },
        # Where the policy came from: submit, registered, default (null: made before the
        # server recorded it).
        "policy_source": row.get("policy_source"),
        # Flow-control keys (docs/flow-control.md); a list row may not read them.
        "limits": fragment(row.get("limit_keys") or "[]"),
        "operation_key": row["operation_key"],
        "priority": priority_of(row["dispatch_rank"]),
        "created_at_ms": row["created_at_ms"],
        "updated_at_ms": row["updated_at_ms"],
        "finished_at_ms": row["finished_at_ms"],
        "deadline_at_ms": row["deadline_at_ms"],
        "next_attempt_at_ms": row["available_at_ms"] if state == TaskState.PENDING else None,
        "attempts": row["attempts_started"],
        "attempt_limit": row["max_attempts"],
        "epoch": row["epoch"],
        "failure": failure,
        "cancel_requested": bool(row["cancel_requested"]),
        # Filled by the reads that know the live workers (services.listing.with_waiting).
        "waiting": None,
        # A cancelled task whose running attempt has no outcome yet (docs/http-api.md).
        "attempt_outcome_pending": (state == TaskState.CANCELLED
                                    and row.get("current_attempt_id") is not None),
    }
    if row.get("workflow_id") is not None:  # a workflow's node (docs/http-api.md)
        view["workflow_id"] = row["workflow_id"]
        view["node_key"] = row["node_key"]
    if full:
        view["payload"] = fragment(row["payload"])
        view["result"] = fragment(row["result"])
        # What the next attempt's handler gets as ``execution.checkpoint``: the last
        # progress details of an attempt that did not succeed (null: none yet).
        view["checkpoint"] = fragment(row.get("checkpoint"))
    return view


def attempt_view(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "task_id": row["task_id"],
        "attempt_number": row["attempt_number"],
        "epoch": row["epoch"],
        "state": row["state"],
        "instance_id": row["instance_id"],
        "child_pid": row["child_pid"],
        "reserved_at_ms": row["reserved_at_ms"],
        "started_at_ms": row["started_at_ms"],
        "finished_at_ms": row["finished_at_ms"],
        "lease_expires_at_ms": row["lease_expires_at_ms"],
        "renewals": row["renewals"],
        "outcome": row["outcome"],
        "code": row["code"],
        "retryable": None if row["retryable"] is None else bool(row["retryable"]),
        "details": fragment(row["details"]),
        "exit_code": row["exit_code"],
        "signal": row["signal"],
        "cpu_ms": row["cpu_ms"],
        "peak_rss_bytes": row["peak_rss_bytes"],
        "kill_reason": row["kill_reason"],
        "killed_at_ms": row["killed_at_ms"],
        # Negative: the SIGKILL went out before the server's lease end (docs/http-api.md).
        "kill_after_lease_end_ms": _difference(row["killed_at_ms"], row["lease_expires_at_ms"]),
        "reap_ms": row["reap_ms"],
        # After a cancel: COOPERATIVE (the handler stopped by itself) or KILLED.
        "ended_by": row["ended_by"],
        "decision": row["decision"],
        "decision_rule": row["decision_rule"],
        "progress": progress_view(row),
    }


def progress_view(row: Mapping[Any, Any]) -> dict[str, Any] | None:
    """The handler's latest progress on an attempt (null until it reported one)."""
    at_ms = row.get("progress_at_ms")
    if at_ms is None:
        return None
    return {"fraction": row["progress_fraction"], "details": fragment(row["progress_json"]),
            "at_ms": at_ms}


def _difference(at_ms: int | None, since_ms: int | None) -> int | None:
    return None if at_ms is None or since_ms is None else at_ms - since_ms


def evidence_view(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "task_id": row["task_id"],
        "attempt_id": row["attempt_id"],
        "epoch": row["epoch"],
        "instance_id": row["instance_id"],
        "received_at_ms": row["received_at_ms"],
        "outcome": row["outcome"],
        "code": row["code"],
        "reason": row["reason"],
        "result": fragment(row["result"]),
        "details": fragment(row["details"]),
    }


def audit_view(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "task_id": row["task_id"],
        "attempt_id": row["attempt_id"],
        "at_ms": row["at_ms"],
        "actor": row["actor"],
        "kind": row["kind"],
        "from_state": row["from_state"],
        "to_state": row["to_state"],
        "detail": fragment(row["detail"]),
    }


def queue_view(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "created_at_ms": row["created_at_ms"]}


def queue_list_view(row: Mapping[Any, Any], counts: Mapping[str, int]) -> dict[str, Any]:
    """A queue in ``GET /v1/queues``: its view (``queue_id`` beside ``id``, ``created_at``
    beside ``created_at_ms``, the same values) with its task counts by state."""
    return {"queue_id": row["id"], "id": row["id"], "name": row["name"],
            "created_at": row["created_at_ms"], "created_at_ms": row["created_at_ms"],
            "counts": {s.value: counts.get(s.value, 0) for s in TaskState}}
