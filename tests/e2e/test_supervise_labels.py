"""Workers chosen by labels end to end, with a real orbit-server (each store), two real
orbit-supervise processes (one started with ``--label gpu=a100 --label mem=64G``, one with
none), real children and the `orbit` CLI: tasks that require gpu=a100 (per submit, or
declared on their TaskType) run only on the labelled worker, tasks that require nothing on
either; a task that requires a label no worker has stays PENDING and says so, naming the
label; `orbit workers list` shows the labels; bad labels are refused by both commands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import Cli
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect
from support.supervisor_helpers import SupervisorProcess, attempts, wait_task
from support.waiting import wait_until

EXIT_USAGE = 2
GPU_LABELS = {"gpu": "a100", "mem": "64G"}


@pytest.fixture
def lane(orbit: OrbitEnv) -> Lane:
    return Lane.open(orbit)


@pytest.fixture
def supervisors(lane: Lane, tmp_path: Path) -> Iterator[list[SupervisorProcess]]:
    worker_file = lane.credentials_file(tmp_path / "worker.json", "worker")
    started = [
        SupervisorProcess(tmp_path, worker_file, lane.queue, workers=2,
                          handlers="label_handlers:HANDLERS",
                          extra=("--label", "gpu=a100", "--label", "mem=64G")),
        SupervisorProcess(tmp_path, worker_file, lane.queue, workers=2,
                          handlers="label_handlers:HANDLERS"),
    ]
    try:
        yield [sup.start() for sup in started]
    finally:
        for sup in started:
            sup.stop()


def _workers(lane: Lane) -> list[dict[str, Any]]:
    return list(expect(lane.producer.get("/v1/workers"), 200)["workers"])


def _submit(lane: Lane, handler: str, n: int, **policy: Any) -> str:
    spec = {"handler": handler, "handler_version": "v1", "payload_version": "v1",
            "payload": {"n": n}, **policy}
    return str(expect(lane.producer.post(f"/v1/queues/{lane.queue}/tasks", json=spec),
                      201)["id"])


def _ran_on(lane: Lane, task_id: str) -> set[str]:
    return {a["instance_id"] for a in attempts(lane.producer, task_id)["attempts"]}


@pytest.mark.timeout(180)
def test_tasks_land_only_where_their_labels_are(lane: Lane, tmp_path: Path,
                                                supervisors: list[SupervisorProcess]) -> None:
    live = wait_until(lambda: len(found := _workers(lane)) == 2 and found, timeout=30.0,
                      what="both supervisors connected")
    by_labels = {tuple(sorted(w["labels"].items())): w["instance_id"] for w in live}
    gpu = by_labels[tuple(sorted(GPU_LABELS.items()))]
    plain = by_labels[()]
    cli = Cli.producer_of(lane, tmp_path)
    listed = cli.json("workers", "list", "--json")
    assert {w["instance_id"]: w["labels"] for w in listed["workers"]} == {
        gpu: GPU_LABELS, plain: {}}
    shown = cli.tty("workers", "list")
    assert shown.returncode == 0 and "gpu=a100,mem=64G" in shown.text, shown.text

    # Per submit (the CLI's --requires and the API's requires), declared on the TaskType,
    # and nothing required.
    need = [str(cli.json("tasks", "submit", "--handler", "labels.echo", "--payload",
                         f'{{"n": {i}}}', "--requires", "gpu=a100", "--json")["id"])
            for i in range(2)]
    need += [_submit(lane, "labels.echo", 10 + i, requires={"gpu": "a100"}) for i in range(4)]
    declared = [_submit(lane, "labels.gpu", 20 + i) for i in range(6)]
    anyone = [_submit(lane, "labels.echo", 30 + i) for i in range(12)]
    assert expect(lane.producer.get(f"/v1/tasks/{declared[0]}"), 200)["policy"][
        "requires"] == {"gpu": "a100"}
    for task_id in [*need, *declared, *anyone]:
        assert wait_task(lane.producer, task_id, timeout_s=60.0)["state"] == "SUCCEEDED"
    for task_id in [*need, *declared]:
        assert _ran_on(lane, task_id) == {gpu}, task_id
    for task_id in anyone:
        assert _ran_on(lane, task_id) <= {gpu, plain}, task_id

    # A label no live worker has: the task waits, and says which labels.
    stuck = cli.json("tasks", "submit", "--handler", "labels.echo", "--payload", "{}",
                     "--requires", "gpu=h100", "--json")
    view = expect(lane.producer.get(f"/v1/tasks/{stuck['id']}"), 200)
    assert view["state"] == "PENDING"
    assert view["waiting"]["reason"] == "NO_MATCHING_WORKER", view
    assert view["waiting"]["requires"] == {"gpu": "h100"}
    shown = cli.tty("tasks", "get", stuck["id"])
    assert shown.returncode == 0, shown.text
    assert "no matching worker" in shown.text and "gpu=h100" in shown.text, shown.text


def test_bad_labels_are_refused_by_both_commands(lane: Lane, tmp_path: Path) -> None:
    cli = Cli.producer_of(lane, tmp_path)
    line = cli.fails("BAD_REQUEST", EXIT_USAGE, "tasks", "submit", "--handler", "labels.echo",
                     "--payload", "{}", "--requires", "gpu")
    assert "--requires: label 'gpu' must be NAME=VALUE" in line, line
    worker_file = lane.credentials_file(tmp_path / "worker.json", "worker")
    sup = SupervisorProcess(tmp_path, worker_file, lane.queue,
                            handlers="label_handlers:HANDLERS",
                            extra=("--label", "gpu=a 100")).start()
    try:
        assert sup.wait(timeout_s=30.0) == EXIT_USAGE
    finally:
        sup.stop()  # by PID, if it still runs
    assert "--label: label 'gpu=a 100': its value must be" in sup.log(), sup.log()
