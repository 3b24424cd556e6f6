"""What an attempt's end says, through a real server, real orbit-supervise processes and
real children: a handler that returns None succeeds, a declared exception is a plain
failure, an undeclared one is uncertain, and the task's failure (over HTTP and in the Python
client's exceptions) names the cause of its last attempt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from supervisor_support import SupEnv, attempts, submit, wait_task

from orbit_client import OrbitClient, TaskFailed, TaskNeedsReview
from orbit_host.credentials import Credentials

SECRET = "s3cr3t-in-the-payload"
NO_BACKOFF = {"initial_ms": 10, "max_ms": 10, "multiplier": 1.0, "jitter": 0}


def _runs(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _client(sup_env: SupEnv) -> OrbitClient:
    made = sup_env.orbit.credential("producer", [sup_env.queue_id])
    return OrbitClient(credentials=Credentials(sup_env.orbit.server.url, made["credential_id"],
                                               made["secret"], "producer",
                                               (sup_env.queue_id,)))


@pytest.mark.parametrize("idempotency", ["IDEMPOTENT", "NON_IDEMPOTENT"])
def test_a_handler_that_returns_none_succeeds_once_with_null(sup_env: SupEnv, tmp_path: Path,
                                                             idempotency: str) -> None:
    sup_env.start(workers=1)
    runs = tmp_path / "runs"
    task_id = submit(sup_env.producer, sup_env.queue_id, "returns_none", {"path": str(runs)},
                     idempotency=idempotency, max_attempts=3, backoff=NO_BACKOFF)
    task = wait_task(sup_env.producer, task_id)
    assert (task["state"], task["result"], task["failure"]) == ("SUCCEEDED", None, None)
    assert "result" in task  # present, and null: not a task without a result
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert (att["outcome"], att["code"], att["decision"]) == ("SUCCEEDED", None, "SUCCEEDED")
    assert len(_runs(runs)) == 1  # it ran once: the email is sent once
    with _client(sup_env) as client:
        assert client.result(task_id, timeout=10) is None
        assert client.task(task_id).result_json == "null"


def test_a_declared_exception_fails_the_task_after_one_attempt(sup_env: SupEnv,
                                                               tmp_path: Path) -> None:
    sup_env.start(workers=1)
    runs = tmp_path / "runs"
    task_id = submit(sup_env.producer, sup_env.queue_id, "declared",
                     {"path": str(runs), "kind": "boom", "secret": SECRET},
                     idempotency="IDEMPOTENT", max_attempts=3, backoff=NO_BACKOFF)
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "FAILED"
    assert task["failure"] == {"code": "HANDLER_ERROR",
                               "details": {"exception_type": "supervisor_handlers.Boom"}}
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert (att["outcome"], att["code"], att["retryable"], att["decision"]) == (
        "FAILED", "HANDLER_ERROR", False, "FAILED")
    assert len(_runs(runs)) == 1  # not retryable: never run again
    with _client(sup_env) as client, pytest.raises(TaskFailed) as failed:
        client.result(task_id, timeout=10)
    assert failed.value.code == "HANDLER_ERROR"
    assert "supervisor_handlers.Boom" in str(failed.value) and SECRET not in str(failed.value)


def test_a_retryable_declared_exception_is_retried_up_to_max_attempts(sup_env: SupEnv,
                                                                     tmp_path: Path) -> None:
    sup_env.start(workers=1)
    runs = tmp_path / "runs"
    # Not idempotent, yet retried: a declared failure is known, not uncertain.
    task_id = submit(sup_env.producer, sup_env.queue_id, "declared",
                     {"path": str(runs), "kind": "timeout", "secret": SECRET},
                     idempotency="NON_IDEMPOTENT", max_attempts=3, backoff=NO_BACKOFF)
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "FAILED"
    assert task["failure"] == {"code": "HANDLER_ERROR",
                               "details": {"exception_type": "builtins.TimeoutError"}}
    history = attempts(sup_env.producer, task_id)["attempts"]
    assert [(a["outcome"], a["retryable"], a["decision"]) for a in history] == [
        ("FAILED", True, "RETRY"), ("FAILED", True, "RETRY"), ("FAILED", True, "FAILED")]
    assert len(_runs(runs)) == 3
    assert SECRET not in str(history)


def test_an_undeclared_exception_of_a_non_idempotent_task_goes_to_review(
        sup_env: SupEnv, tmp_path: Path) -> None:
    sup = sup_env.start(workers=1)
    runs = tmp_path / "runs"
    task_id = submit(sup_env.producer, sup_env.queue_id, "declared",
                     {"path": str(runs), "kind": "value_error", "secret": SECRET},
                     max_attempts=3)
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "NEEDS_REVIEW"
    assert task["failure"] == {"code": "HANDLER_ERROR",
                               "details": {"exception_type": "builtins.ValueError"}}
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert (att["outcome"], att["code"]) == ("UNKNOWN", "HANDLER_ERROR")
    assert len(_runs(runs)) == 1
    with _client(sup_env) as client, pytest.raises(TaskNeedsReview) as review:
        client.result(task_id, timeout=10)
    assert review.value.failure_code == "HANDLER_ERROR"
    assert "builtins.ValueError" in str(review.value) and SECRET not in str(review.value)
    # The message and the traceback stay in the worker's log, with the task's ID.
    sup.wait_log(f"of task {task_id}: handler sup.declared@v1/v1 raised builtins.ValueError")
    assert SECRET in sup.log()


def test_attempt_timeouts_read_attempt_timeout_in_the_api_and_the_exception(
        sup_env: SupEnv) -> None:
    sup_env.start(workers=1)
    task_id = submit(sup_env.producer, sup_env.queue_id, "sleep", {"seconds": 60},
                     idempotency="IDEMPOTENT", max_attempts=2, attempt_timeout_ms=300,
                     lease_ttl_ms=5000, backoff=NO_BACKOFF)
    task = wait_task(sup_env.producer, task_id, timeout_s=30)
    assert task["state"] == "NEEDS_REVIEW"
    # The report came in time (the code), or after the reaper (LEASE_EXPIRED, with the
    # kill reason kept): the task's failure names the timeout either way.
    assert task["failure"]["code"] == "ATTEMPT_TIMEOUT", task
    # Both attempts ran (a grant the worker gave back unstarted, while the killed child's
    # slot was refilled, is RELEASED and spends none).
    history = [a for a in attempts(sup_env.producer, task_id)["attempts"]
               if a["state"] == "FINISHED"]
    assert len(history) == 2
    for att in history:
        assert att["kill_reason"] == "ATTEMPT_TIMEOUT", att
        assert att["code"] in ("ATTEMPT_TIMEOUT", "LEASE_EXPIRED"), att
    with _client(sup_env) as client, pytest.raises(TaskNeedsReview) as review:
        client.result(task_id, timeout=10)
    assert review.value.failure_code == "ATTEMPT_TIMEOUT"
    assert "ATTEMPT_TIMEOUT" in str(review.value)


def test_report_exception_messages_records_the_first_line_only(sup_env: SupEnv,
                                                               tmp_path: Path) -> None:
    sup_env.start(workers=1, extra=("--report-exception-messages",))
    runs = tmp_path / "runs"
    task_id = submit(sup_env.producer, sup_env.queue_id, "declared",
                     {"path": str(runs), "kind": "value_error", "secret": SECRET})
    task = wait_task(sup_env.producer, task_id)
    expected: dict[str, Any] = {"exception_type": "builtins.ValueError",
                                "exception_message": "bad value"}
    assert task["failure"] == {"code": "HANDLER_ERROR", "details": expected}
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert att["details"] == expected
    assert SECRET not in str(task["failure"]) + str(att)  # the second line stays on the host
    with _client(sup_env) as client, pytest.raises(TaskNeedsReview) as review:
        client.result(task_id, timeout=10)
    assert "builtins.ValueError: bad value" in str(review.value)
