"""Rows of finished tasks and attempts, written in bulk by the index-plan tests of both stores
(the dispatch, reaper and lookup plans must stay index searches with many finished tasks)."""

from __future__ import annotations

from typing import Any

Q = "a" * 32
NOW = 1_800_000_000_000


def task_row(i: int, state: str) -> dict[str, Any]:
    return {
        "id": f"{i:032x}", "queue_id": Q, "state": state, "handler": "h",
        "handler_version": "v1", "payload_version": "v1", "payload": "{}",
        "idempotency": "IDEMPOTENT", "max_attempts": 3, "backoff_initial_ms": 0,
        "backoff_max_ms": 0, "backoff_multiplier": 1.0, "backoff_jitter": 0.0,
        "attempt_timeout_ms": 1000, "lease_ttl_ms": 1000, "deadline_at_ms": NOW + i,
        "operation_key": f"k{i}", "created_at_ms": NOW - i, "updated_at_ms": NOW,
        "available_at_ms": NOW - i, "epoch": 1, "attempts_started": 1, "uncertain": False,
        "result": "1", "failure_code": None, "failure_details": None,
        "cancel_requested": False, "current_attempt_id": None, "dispatch_rank": 4,
        "finished_at_ms": NOW if state in ("SUCCEEDED", "FAILED", "CANCELLED") else None,
        "schedule_to_start_ms": None, "start_by_at_ms": None, "spec_digest": None,
        "cancel_grace_ms": 2000, "policy_source": None, "limit_keys": None,
    }


def attempt_row(i: int, state: str) -> dict[str, Any]:
    return {
        "id": f"{i:032x}", "task_id": f"{i:032x}", "queue_id": Q, "epoch": 1,
        "attempt_number": 1, "instance_id": "b" * 32, "reserved_at_ms": NOW - i,
        "state": state, "child_pid": None, "started_at_ms": NOW - i, "finished_at_ms": NOW,
        "lease_expires_at_ms": NOW + i, "attempt_deadline_at_ms": NOW + i, "renewals": 0,
        "outcome": "SUCCEEDED", "code": None, "retryable": False, "details": None,
        "exit_code": 0, "signal": None, "cpu_ms": 1, "peak_rss_bytes": 1, "kill_reason": None,
        "killed_at_ms": None, "reap_ms": None, "ended_by": None, "grant_connection": None,
        "decision": "SUCCEEDED", "decision_rule": "handler_succeeded",
    }
