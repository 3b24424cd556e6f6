"""One ``orbit-supervise`` for several queues (``--queue A --queue B``), with a real server,
real supervisor processes and real children: the children are shared (never more running
than ``--workers``), each queue's tasks run, metrics and logs name the queue, and a queue
outside the credential's scope is refused before anything starts."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import httpx
from supervisor_support import (
    FIXTURES,
    HANDLERS,
    ORBIT_SUPERVISE,
    SupEnv,
    attempts,
    submit,
    wait_task,
)
from support.orbit_http import expect
from support.waiting import UNIT

from orbit_host.credentials import Credentials, write_credentials


def _credentials(sup_env: SupEnv, queues: list[str], path: Path) -> Path:
    made = sup_env.orbit.credential("worker", queues)
    write_credentials(path, Credentials(sup_env.orbit.server.url, made["credential_id"],
                                        made["secret"], "worker", tuple(queues)))
    return path


def _most_at_once(journal: Path) -> tuple[int, int]:
    """From the handlers' own start and end lines (wall ms): the most handlers running at
    one instant, and how many ran in all."""
    marks: list[tuple[int, int]] = []
    for line in journal.read_text().splitlines():
        parts = line.split()
        if parts[0] == "start":
            marks.append((int(parts[5]), 1))
        elif parts[0] == "end":
            marks.append((int(parts[3]), -1))
    # An end and a start at the same millisecond: the end first (the slot was free).
    marks.sort()
    running = most = 0
    for _, step in marks:
        running += step
        most = max(most, running)
    return most, sum(1 for _, step in marks if step == 1)


def test_one_supervisor_serves_two_queues_with_shared_children(sup_env: SupEnv,
                                                               tmp_path: Path) -> None:
    orbit = sup_env.orbit
    queue_a, queue_b = sup_env.queue_id, orbit.queue()
    creds = _credentials(sup_env, [queue_a, queue_b], tmp_path / "both.json")
    producer_b = orbit.producer(queue_b)
    sup = sup_env.start(workers=2, credentials_file=creds,
                        extra=("--queue", queue_b, "--metrics-port", "0"))
    # The fixture passes the first --queue (A); B is the second.
    assert sup.cmd.count("--queue") == 2
    sup.wait_log(f"orbit.supervisor.{queue_b}: connected to")
    sup.wait_log(f"orbit.supervisor.{queue_a}: connected to")
    journal, stamps = tmp_path / "journal", tmp_path / "stamps"
    stamps.mkdir()
    payload = {"journal": str(journal), "stamps": str(stamps), "seconds": 0.3}
    tasks = [(sup_env.producer, submit(sup_env.producer, queue_a, "journal", payload))
             for _ in range(4)]
    tasks += [(producer_b, submit(producer_b, queue_b, "journal", payload)) for _ in range(4)]
    for producer, task_id in tasks:
        assert wait_task(producer, task_id, timeout_s=60)["state"] == "SUCCEEDED"
    most, ran = _most_at_once(journal)
    print(f"handlers ran: {ran}; the most at once: {most} (--workers 2)")
    assert ran == 8
    assert most <= 2
    # Each queue has its own worker instance, offering the same two children.
    workers = expect(orbit.admin_http.get("/v1/workers"), 200)["workers"]
    mine = {w["queue_id"]: w for w in workers if w["queue_id"] in (queue_a, queue_b)}
    assert set(mine) == {queue_a, queue_b}
    assert mine[queue_a]["instance_id"] != mine[queue_b]["instance_id"]
    # The metrics count per queue.
    served = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", sup.log())
    assert served is not None
    port = int(served[1])
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10 * UNIT).text
    for queue_id in (queue_a, queue_b):
        assert f'orbit_supervisor_queue_attempts_started_total{{queue="{queue_id}"}} 4.0' in text
        instance = mine[queue_id]["instance_id"]
        assert any(line.startswith("orbit_supervisor_info{") and f'queue="{queue_id}"' in line
                   and f'instance_id="{instance}"' in line for line in text.splitlines()), text
    sup.send(signal.SIGTERM)
    assert sup.wait(30) == 0
    assert "drained started=8 confirmed=8 running=0" in sup.log()


def test_a_queue_outside_the_credentials_scope_is_refused_at_start(sup_env: SupEnv) -> None:
    other = sup_env.orbit.queue()
    done = subprocess.run(
        [str(ORBIT_SUPERVISE), "--credentials-file", str(sup_env.credentials_file),
         "--queue", sup_env.queue_id, "--queue", other, "--workers", "2", HANDLERS],
        capture_output=True, text=True, timeout=60 * UNIT, cwd=FIXTURES)
    assert done.returncode == 5, done.stderr
    assert f"queue {other} is not in the scope of credential" in done.stderr
    assert "Traceback" not in done.stderr


def test_fewer_workers_than_queues_is_a_usage_error(sup_env: SupEnv, tmp_path: Path) -> None:
    queue_b = sup_env.orbit.queue()
    creds = _credentials(sup_env, [sup_env.queue_id, queue_b], tmp_path / "both.json")
    done = subprocess.run(
        [str(ORBIT_SUPERVISE), "--credentials-file", str(creds), "--queue", sup_env.queue_id,
         "--queue", queue_b, "--workers", "1", HANDLERS],
        capture_output=True, text=True, timeout=60 * UNIT, cwd=FIXTURES)
    assert done.returncode == 2, done.stderr
    assert "at least the number of queues" in done.stderr


def test_a_queue_the_server_refuses_ends_the_whole_run(sup_env: SupEnv,
                                                      tmp_path: Path) -> None:
    # The file claims both queues, the credential holds only A: the server refuses B's hello
    # for good, and the run ends (exit 5) with A's session taken down too.
    queue_b = sup_env.orbit.queue()
    made = sup_env.orbit.credential("worker", [sup_env.queue_id])
    claims = tmp_path / "claims.json"
    write_credentials(claims, Credentials(sup_env.orbit.server.url, made["credential_id"],
                                          made["secret"], "worker", (sup_env.queue_id, queue_b)))
    sup = sup_env.start(workers=2, credentials_file=claims, extra=("--queue", queue_b))
    assert sup.wait(30) == 5
    log = sup.log()
    assert "fatal session error: PERMISSION_DENIED" in log
    assert "Traceback" not in log


def test_the_shutdown_timeout_kills_and_reports_on_every_queue(sup_env: SupEnv,
                                                              tmp_path: Path) -> None:
    orbit = sup_env.orbit
    queue_a, queue_b = sup_env.queue_id, orbit.queue()
    creds = _credentials(sup_env, [queue_a, queue_b], tmp_path / "both.json")
    producer_b = orbit.producer(queue_b)
    sup = sup_env.start(workers=2, credentials_file=creds,
                        extra=("--queue", queue_b, "--shutdown-timeout", "1"))
    hung = [(producer, submit(producer, queue, "blocked_read",
                              {"pid_file": str(tmp_path / f"pids-{queue}")},
                              lease_ttl_ms=30000, max_attempts=1))
            for producer, queue in ((sup_env.producer, queue_a), (producer_b, queue_b))]
    for producer, task_id in hung:
        wait_task(producer, task_id, timeout_s=30,
                  until=lambda view: view["state"] == "RUNNING")
    sup.send(signal.SIGTERM)
    assert sup.wait(30) == 6
    assert "(unconfirmed=2 running=2)" in sup.log()
    for producer, task_id in hung:
        (att,) = attempts(producer, task_id)["attempts"]
        assert (att["kill_reason"], att["signal"]) == ("SHUTDOWN", signal.SIGKILL), att
        assert att["child_pid"] is not None, att
