"""``orbit-supervise --prefetch`` against a real server: with one child and a prefetch of 1,
a second task is started (its lease granted, RUNNING on the server) while the first still
runs, waits for the child without running, then runs once; without it the second stays
PENDING. A prefetch above --workers is refused before anything starts (exit 2)."""

from __future__ import annotations

from pathlib import Path

from supervisor_support import SupEnv, attempts, submit, wait_task
from support.waiting import UNIT, wait_until


def runs(path: Path) -> list[str]:
    """The task IDs the append handler ran, one line per execution."""
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def test_a_prefetched_task_starts_while_the_child_is_busy_and_runs_once(
        sup_env: SupEnv) -> None:
    journal = sup_env.workdir / "runs.txt"
    sup_env.start(workers=1, extra=("--prefetch", "1"))
    first = submit(sup_env.producer, sup_env.queue_id, "append",
                   {"path": str(journal), "seconds": 3 * UNIT})
    wait_until(lambda: runs(journal) == [first], timeout=20, what="the first task to run")
    second = submit(sup_env.producer, sup_env.queue_id, "append", {"path": str(journal)})
    view = wait_task(sup_env.producer, second, until=lambda t: t["state"] != "PENDING")
    # Started on the server while the first still holds the only child (it runs for 3 units
    # more), yet not run.
    assert view["state"] == "RUNNING"
    assert wait_task(sup_env.producer, first, until=lambda t: True)["state"] == "RUNNING"
    assert runs(journal) == [first]
    for task_id in (first, second):
        assert wait_task(sup_env.producer, task_id, timeout_s=30)["state"] == "SUCCEEDED"
        assert len(attempts(sup_env.producer, task_id)["attempts"]) == 1
    assert runs(journal) == [first, second]  # each ran once, the second after the first


def test_without_prefetch_a_second_task_waits_for_the_child(sup_env: SupEnv) -> None:
    journal = sup_env.workdir / "runs.txt"
    sup_env.start(workers=1)
    first = submit(sup_env.producer, sup_env.queue_id, "append",
                   {"path": str(journal), "seconds": 2 * UNIT})
    wait_until(lambda: runs(journal) == [first], timeout=20, what="the first task to run")
    second = submit(sup_env.producer, sup_env.queue_id, "append", {"path": str(journal)})
    assert wait_task(sup_env.producer, second, timeout_s=30)["state"] == "SUCCEEDED"
    # While the first ran, the second was neither reserved nor started for this worker: the
    # server started its attempt only once the first's had ended (both on its clock).
    (before,) = attempts(sup_env.producer, first)["attempts"]
    (after,) = attempts(sup_env.producer, second)["attempts"]
    assert after["reserved_at_ms"] >= before["finished_at_ms"]
    assert runs(journal) == [first, second]


def test_a_prefetch_above_the_workers_is_refused(sup_env: SupEnv) -> None:
    sup = sup_env.start(workers=2, extra=("--prefetch", "3"))
    assert sup.wait() == 2
    assert "prefetch must be an integer in [0, 2]" in sup.log()


def test_a_cancel_ends_a_waiting_prefetched_task_without_running_it(sup_env: SupEnv) -> None:
    journal = sup_env.workdir / "runs.txt"
    sup_env.start(workers=1, extra=("--prefetch", "1"))
    first = submit(sup_env.producer, sup_env.queue_id, "append",
                   {"path": str(journal), "seconds": 4 * UNIT})
    wait_until(lambda: runs(journal) == [first], timeout=20, what="the first task to run")
    # A grace far longer than the first task: told to stop only once it got the child, the
    # second's handler would run.
    second = submit(sup_env.producer, sup_env.queue_id, "append", {"path": str(journal)},
                    cancel_grace_ms=60_000)
    wait_task(sup_env.producer, second, until=lambda t: t["state"] == "RUNNING")
    cancelled = sup_env.producer.post(f"/v1/tasks/{second}/cancel", json={})
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"

    def decided() -> dict[str, object] | None:
        (att,) = attempts(sup_env.producer, second)["attempts"]
        return att if att["outcome"] is not None else None

    att = wait_until(decided, timeout=20, what="the cancelled attempt's outcome")
    assert runs(journal) == [first]  # decided while the first still held the child
    assert att["kill_reason"] == "TASK_CANCELLED"
    assert wait_task(sup_env.producer, first, timeout_s=30)["state"] == "SUCCEEDED"
    # The freed child runs what comes next: had the cancelled one been handed to it, it
    # would have run before this one.
    third = submit(sup_env.producer, sup_env.queue_id, "append", {"path": str(journal)})
    assert wait_task(sup_env.producer, third, timeout_s=30)["state"] == "SUCCEEDED"
    assert runs(journal) == [first, third]
    assert wait_task(sup_env.producer, second, until=lambda t: True)["state"] == "CANCELLED"
