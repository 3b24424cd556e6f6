"""A FAILED task run again by an operator, served by a real orbit-supervise: the retry's new
attempt runs on the worker and succeeds, the first attempt stays in the history, and the
retry is audited; a task still running or already succeeded is refused with CONFLICT."""

from __future__ import annotations

from supervisor_support import SupEnv, attempts, submit, wait_task
from support.orbit_http import expect, expect_error


def test_a_failed_task_retried_runs_again_and_succeeds(sup_env: SupEnv) -> None:
    marker = sup_env.workdir / "ready"
    sup_env.start(workers=1)
    producer = sup_env.producer
    task_id = submit(producer, sup_env.queue_id, "needs_file", {"path": str(marker)})
    failed = wait_task(producer, task_id)
    assert failed["state"] == "FAILED" and failed["failure"]["code"] == "NOT_READY"

    marker.write_text("mended")
    retried = expect(producer.post(f"/v1/tasks/{task_id}/retry",
                                   json={"reason": "the file is there now"}), 200)
    assert retried["state"] == "PENDING" and retried["failure"] is None
    done = wait_task(producer, task_id)
    assert done["state"] == "SUCCEEDED" and done["result"] == {"ok": True}

    history = attempts(producer, task_id)["attempts"]
    assert [(a["attempt_number"], a["outcome"]) for a in history] == [
        (1, "FAILED"), (2, "SUCCEEDED")]
    assert all(a["child_pid"] for a in history)
    events = expect(producer.get(f"/v1/tasks/{task_id}/audit"), 200)["events"]
    [event] = [e for e in events if e["kind"] == "task_retried"]
    assert event["detail"]["reason"] == "the file is there now"
    assert (event["from_state"], event["to_state"]) == ("FAILED", "PENDING")
    # Succeeded now: a retry is refused, with the code and the state named.
    error = expect_error(producer.post(f"/v1/tasks/{task_id}/retry", json={}), 409, "CONFLICT")
    assert "SUCCEEDED" in error["message"]


def test_a_running_task_cannot_be_retried(sup_env: SupEnv) -> None:
    sup_env.start(workers=1)
    producer = sup_env.producer
    task_id = submit(producer, sup_env.queue_id, "sleep", {"seconds": 30})
    wait_task(producer, task_id, until=lambda t: t["state"] == "RUNNING")
    error = expect_error(producer.post(f"/v1/tasks/{task_id}/retry", json={}), 409, "CONFLICT")
    assert "RUNNING" in error["message"]
    expect(producer.post(f"/v1/tasks/{task_id}/cancel", json={}), 200)
