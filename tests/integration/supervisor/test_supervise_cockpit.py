"""What an operator and a producer learn from a real orbit-supervise: its version and
running attempts in the live-workers list, and a handler exception's type name (never its
message) in the attempt and the task's failure."""

from __future__ import annotations

from importlib.metadata import version

from supervisor_support import SupEnv, attempts, submit, wait_task
from support.orbit_http import expect


def test_handler_exception_type_reaches_the_producer(sup_env: SupEnv) -> None:
    sup = sup_env.start(workers=1)
    secret = "hunter2-in-the-payload"
    task_id = submit(sup_env.producer, sup_env.queue_id, "key_error", {"secret": secret})
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "NEEDS_REVIEW", task  # NON_IDEMPOTENT: an unknown outcome
    assert task["failure"] == {"code": "HANDLER_ERROR",
                               "details": {"exception_type": "builtins.KeyError"}}
    (att,) = attempts(sup_env.producer, task_id)["attempts"]
    assert att["code"] == "HANDLER_ERROR"
    assert att["details"] == {"exception_type": "builtins.KeyError"}
    seen = str(task["failure"]) + str(att)  # the payload holds it, nothing else does
    assert secret not in seen and "Traceback" not in seen
    # The traceback (with the message) is in the worker's own log only.
    sup.wait_log("KeyError")

    workers = expect(sup_env.producer.get("/v1/workers"), 200)["workers"]
    (mine,) = [w for w in workers if w["queue_id"] == sup_env.queue_id]
    # The installed distribution's version (orbit-tasks), not the "dev" fallback.
    assert mine["version"] == f"orbit-supervise/{version('orbit-tasks')}", mine
    assert mine["slots"] == 1 and mine["running"] == []
