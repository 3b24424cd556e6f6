"""Cooperative cancel with a real orbit-server, a real orbit-supervise and real children:
a cancel of a running task tells the child first and SIGKILLs it only after the task's
cancel grace; the attempt records which one ended it (``ended_by``), in the HTTP attempt
view and in ``orbit tasks attempts``.

One supervisor runs them side by side: a sync handler that polls ``execution.cancelled()``
and returns early, an async handler whose task is cancelled, one that ignores the cancel and
is killed at the end of its grace, and the polling one again with a grace of 0 (submitted
with ``orbit tasks submit --cancel-grace 0s``), which is killed at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from supervisor_support import SupEnv, alive, attempts, submit, wait_pids, wait_task
from support.cli import Cli
from support.orbit_http import expect
from support.waiting import wait_until

from orbit_host.credentials import Credentials, write_credentials

GRACE_MS = 1500


def _producer_cli(sup_env: SupEnv, tmp_path: Path) -> Cli:
    made = sup_env.orbit.credential("producer", [sup_env.queue_id])
    creds = tmp_path / "producer.json"
    write_credentials(creds, Credentials(sup_env.orbit.server.url, made["credential_id"],
                                         made["secret"], "producer", (sup_env.queue_id,)))
    return Cli(creds)


def _cancel(sup_env: SupEnv, task_id: str) -> dict[str, Any]:
    task = expect(sup_env.producer.post(f"/v1/tasks/{task_id}/cancel", json={}), 200)
    assert task["state"] == "CANCELLED"
    return dict(task)


def _decided(sup_env: SupEnv, task_id: str) -> dict[str, Any]:
    """The task's one attempt once its outcome is recorded (the task reads CANCELLED with
    attempt_outcome_pending until then)."""
    def there() -> dict[str, Any] | None:
        task = wait_task(sup_env.producer, task_id)
        if task["attempt_outcome_pending"]:
            return None
        (att,) = attempts(sup_env.producer, task_id)["attempts"]
        return dict(att) if att["outcome"] is not None else None

    return wait_until(there, timeout=20.0, what=f"the attempt of {task_id} decided")


def test_cancel_ends_cooperative_handlers_and_kills_the_one_that_ignores_it(
        sup_env: SupEnv, tmp_path: Path) -> None:
    sup_env.start(workers=4)
    cli = _producer_cli(sup_env, tmp_path)
    pid_files = {name: tmp_path / f"{name}.pids"
                 for name in ("polls_cancelled", "awaits_cancel", "ignores_cancel", "zero")}
    marker = tmp_path / "async.marker"
    tasks = {
        name: submit(sup_env.producer, sup_env.queue_id, name,
                     {"pid_file": str(pid_files[name]), "marker": str(marker)},
                     max_attempts=1, lease_ttl_ms=30_000, cancel_grace_ms=GRACE_MS)
        for name in pid_files if name != "zero"
    }
    zero = cli.json(
        "tasks", "submit", "--handler", "sup.polls_cancelled", "--handler-version", "v1",
        "--payload-version", "v1", "--payload", json.dumps({"pid_file": str(pid_files["zero"])}),
        "--max-attempts", "1", "--lease-ttl-ms", "30000", "--cancel-grace", "0s", "--json")
    assert zero["policy"]["cancel_grace_ms"] == 0
    tasks["zero"] = zero["id"]
    pids = {name: wait_pids(path, f"{name} running", count=1)
            for name, path in pid_files.items()}
    task = wait_task(sup_env.producer, tasks["ignores_cancel"], until=lambda t: True)
    assert task["policy"]["cancel_grace_ms"] == GRACE_MS
    cancelled_at = {name: _cancel(sup_env, task_id)["finished_at_ms"]
                    for name, task_id in tasks.items()}

    # The sync handler saw cancelled() and returned: its result is the attempt's history.
    sync = _decided(sup_env, tasks["polls_cancelled"])
    assert (sync["outcome"], sync["ended_by"], sync["kill_reason"], sync["signal"]) == (
        "SUCCEEDED", "COOPERATIVE", None, None)
    assert sync["decision"] == "CANCELLED"

    # The async handler's task was cancelled: CancelledError ended it, no kill.
    coro = _decided(sup_env, tasks["awaits_cancel"])
    assert (coro["outcome"], coro["code"], coro["ended_by"], coro["kill_reason"]) == (
        "UNKNOWN", "HANDLER_ERROR", "COOPERATIVE", None)
    assert coro["details"] == {"exception_type": "asyncio.exceptions.CancelledError"}
    assert marker.read_text() == "cancelled"

    # The one that ignores it was SIGKILLed, and not before its grace ran out.
    spun = _decided(sup_env, tasks["ignores_cancel"])
    assert (spun["outcome"], spun["code"], spun["kill_reason"], spun["ended_by"]) == (
        "UNKNOWN", "TASK_CANCELLED", "TASK_CANCELLED", "KILLED")
    assert spun["signal"] == 9
    assert spun["killed_at_ms"] >= cancelled_at["ignores_cancel"] + GRACE_MS
    wait_until(lambda: not alive(pids["ignores_cancel"]), timeout=10,
               what="the killed child gone")

    # A grace of 0 is the hard cancel: even a handler that would have stopped is killed.
    hard = _decided(sup_env, tasks["zero"])
    assert (hard["kill_reason"], hard["ended_by"], hard["signal"]) == ("TASK_CANCELLED",
                                                                       "KILLED", 9)
    for name, task_id in tasks.items():
        task = wait_task(sup_env.producer, task_id)
        assert task["state"] == "CANCELLED" and task["result"] is None, name

    # `orbit tasks attempts` says which ended each one.
    for name, ended_by in (("polls_cancelled", "COOPERATIVE"), ("awaits_cancel", "COOPERATIVE"),
                           ("ignores_cancel", "KILLED"), ("zero", "KILLED")):
        (shown,) = cli.json("tasks", "attempts", tasks[name])["attempts"]
        assert shown["ended_by"] == ended_by, name
    table = cli.tty("tasks", "attempts", tasks["polls_cancelled"]).text
    assert "stopped by itself on cancel" in table, table
