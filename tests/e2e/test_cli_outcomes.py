"""The `orbit` command as people and scripts meet it, against a real orbit-server: --wait
exit codes per outcome, human output on a terminal (a pseudo-terminal), errors that say what
to do next, the default queue, and reviewing several tasks at once."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import orjson
import pytest
from support.cli import (
    Cli,
    closed_port_url,
    one_error_line,
    read_to_exit,
    read_until,
    run_orbit,
    run_orbit_tty,
    spawn_tty,
)
from support.orbit_http import WorkerCredential
from support.protocol_client import ECHO, ProtocolClient
from support.server import ServerProcess, https_server

from orbit_client import Credentials, load_credentials, write_credentials
from orbit_wire.ids import is_id

NOBODY = "nobody.serves.this"


@pytest.fixture
def admin_cli(server: ServerProcess, admin_credentials: Credentials, tmp_path: Path) -> Cli:
    path = tmp_path / "admin.json"
    write_credentials(path, admin_credentials)
    return Cli(path)


def lane(admin_cli: Cli, tmp_path: Path) -> tuple[str, Cli, Path]:
    queue = admin_cli.ok("queues", "create").strip()
    producer, worker = tmp_path / "producer.json", tmp_path / "worker.json"
    admin_cli.ok("credentials", "create", "--role", "producer", "--queue", queue, "-o",
                 str(producer))
    admin_cli.ok("credentials", "create", "--role", "worker", "--queue", queue, "-o",
                 str(worker))
    return queue, Cli(producer), worker


def submit(cli: Cli, handler: str, payload: str = "{}", *extra: str) -> str:
    """Submit without --queue: a single-queue credential's queue is the default."""
    task_id = cli.ok("tasks", "submit", "--handler", handler, "--handler-version", "v1",
                     "--payload-version", "v1", "--payload", payload, *extra).strip()
    assert is_id(task_id)
    return task_id


async def finish_each(server: ServerProcess, worker_file: Path,
                      outcomes: dict[str, tuple[str, str | None]]) -> None:
    """A protocol worker takes one task per entry and finishes it as told:
    {task_id: (outcome, code)}."""
    creds = load_credentials(worker_file)
    worker = WorkerCredential(creds.credential_id, creds.secret, creds.queues[0])
    async with await ProtocolClient.connect(server.ws_url) as wc:
        await wc.hello_as(worker, capacity=len(outcomes), capabilities=(ECHO,))
        await wc.credit(len(outcomes))
        for res in await wc.reservations(len(outcomes)):
            outcome, code = outcomes[res.task_id]
            assert (await wc.start(res)).ok
            result = '{"echo": 1.10}' if outcome == "SUCCEEDED" else None
            assert (await wc.finish(res, outcome, code=code, result_json=result)).ok


def test_wait_exit_code_says_how_the_task_ended(
    server: ServerProcess, admin_cli: Cli, tmp_path: Path
) -> None:
    _, producer, worker_file = lane(admin_cli, tmp_path)
    ok, failed, review = (submit(producer, ECHO.handler) for _ in range(3))
    asyncio.run(finish_each(server, worker_file, {
        ok: ("SUCCEEDED", None), failed: ("FAILED", "BAD_INPUT"),
        review: ("UNKNOWN", "HANDLER_ERROR"),
    }))
    expected = {ok: (0, "SUCCEEDED"), failed: (10, "FAILED"), review: (11, "NEEDS_REVIEW")}
    for task_id, (exit_code, state) in expected.items():
        task = producer.json_exit(exit_code, "tasks", "get", task_id, "--wait", "10")
        assert task["state"] == state, task
    assert '"result": {"echo": 1.10}' in producer.ok("tasks", "get", ok, "--wait", "10")

    pending = submit(producer, NOBODY)
    producer.json("tasks", "cancel", pending)
    assert producer.json_exit(12, "tasks", "get", pending, "--wait", "5")["state"] == "CANCELLED"
    # Nobody serves it: the wait ends first, and submit --wait says so the same way.
    result = producer.run("tasks", "submit", "--handler", NOBODY, "--handler-version", "v1",
                          "--payload-version", "v1", "--payload", "{}", "--wait", "0.3")
    assert result.returncode == 13, result.stderr
    assert orjson.loads(result.stdout)["state"] == "PENDING"
    # A plain read is not a wait: it succeeds whatever the task's state.
    assert producer.json("tasks", "get", failed)["state"] == "FAILED"


def test_human_output_on_a_terminal(
    server: ServerProcess, admin_cli: Cli, tmp_path: Path
) -> None:
    queue, producer, worker_file = lane(admin_cli, tmp_path)
    ok, review = submit(producer, ECHO.handler), submit(producer, ECHO.handler)
    asyncio.run(finish_each(server, worker_file, {
        ok: ("SUCCEEDED", None), review: ("UNKNOWN", "HANDLER_ERROR")}))

    shown = producer.tty("tasks", "get", ok, "--wait", "10")
    assert shown.returncode == 0, shown.text
    text = shown.text
    assert f"Task {ok}" in text and "SUCCEEDED" in text
    assert '{"echo": 1.10}' in text  # the result exactly as the handler produced it
    assert "just now" in text or " s ago" in text  # relative times, not epoch milliseconds
    assert "last attempt" in text and "#1 on worker" in text
    assert "\x1b[" in shown.raw  # coloured: it knows it is on a terminal
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)

    text = producer.tty("tasks", "get", review).text
    assert "NEEDS_REVIEW" in text and "orbit tasks review" in text
    assert "an operator decides" in text  # the decision rule, in words

    stats = producer.tty("queues", "stats").text  # the credential's one queue
    assert f"Queue {queue}" in stats
    assert any(line.split() == ["SUCCEEDED", "1"] for line in stats.splitlines()), stats
    assert any(line.split() == ["NEEDS_REVIEW", "1"] for line in stats.splitlines()), stats

    attempts = producer.tty("tasks", "attempts", review).text
    assert "outcome" in attempts and "UNKNOWN (HANDLER_ERROR)" in attempts
    audit = producer.tty("tasks", "audit", ok).text
    assert "task submitted" in audit and "→ SUCCEEDED" in audit

    # --json on a terminal, and --output json, are the script forms.
    assert orjson.loads(producer.tty("tasks", "get", ok, "--json").text)["id"] == ok
    stats_json = orjson.loads(producer.tty("--output", "json", "queues", "stats").text)
    assert stats_json["counts"]["SUCCEEDED"] == 1
    # On a pipe JSON is the default; --output human (or ORBIT_OUTPUT) asks for the tables.
    human = producer.run("--output", "human", "queues", "stats")
    assert human.returncode == 0 and "\x1b[" not in human.stdout
    assert f"Queue {queue}" in human.stdout


def test_wait_shows_progress_on_a_terminal(admin_cli: Cli, tmp_path: Path) -> None:
    _, producer, _ = lane(admin_cli, tmp_path)
    task_id = submit(producer, NOBODY)
    shown = producer.tty("tasks", "get", task_id, "--wait", "1.5")
    assert shown.returncode == 13, shown.text
    assert "PENDING · no attempt yet ·" in shown.text  # the status line, drawn as it waits
    assert "of 1.5 s" in shown.text


def test_ctrl_c_stops_the_wait_not_the_task(admin_cli: Cli, tmp_path: Path) -> None:
    _, producer, _ = lane(admin_cli, tmp_path)
    task_id = submit(producer, NOBODY)
    proc, master = spawn_tty("tasks", "get", task_id, "--wait", "60", env=producer.env)
    try:
        read_until(master, "PENDING · no attempt yet")  # the wait has begun
        os.kill(proc.pid, signal.SIGINT)
        ended = read_to_exit(proc, master, timeout=30)
    finally:
        os.close(master)
    assert ended.returncode == 130, ended.text
    assert "orbit: interrupted" in ended.text
    assert producer.json("tasks", "get", task_id)["state"] == "PENDING"


def test_errors_say_what_to_do_next(
    server: ServerProcess, admin_cli: Cli, tmp_path: Path
) -> None:
    url = closed_port_url()
    result = run_orbit("--url", url, "health")
    assert result.returncode == 4
    assert f"is orbit-server running at {url}?" in one_error_line(result, "UNAVAILABLE")

    result = run_orbit("tasks", "get", "f" * 32)
    assert result.returncode == 3
    assert "orbit credentials create" in one_error_line(result, "BAD_REQUEST")
    result = run_orbit("--credentials-file", str(tmp_path / "nope.json"), "tasks", "get",
                       "f" * 32)
    assert result.returncode == 3
    line = one_error_line(result, "BAD_REQUEST")
    assert "does not exist" in line and "orbit credentials create" in line

    # A review of a task that is not in review: operator words, no internal event names.
    _, producer, _ = lane(admin_cli, tmp_path)
    task_id = submit(producer, NOBODY)
    producer.json("tasks", "cancel", task_id)
    for action in (["--retry"], ["--succeed", "--result", "{}"], ["--fail"]):
        line = producer.fails("CONFLICT", 1, "tasks", "review", task_id, *action)
        assert "operator_" not in line and "NEEDS_REVIEW" in line, line
    line = admin_cli.fails("NOT_FOUND", 1, "tasks", "get", "f" * 32)
    assert "check the ID" in line


def test_health_needs_no_credentials(server: ServerProcess, tmp_path: Path) -> None:
    missing = {"ORBIT_CREDENTIALS_FILE": str(tmp_path / "nope.json")}
    result = run_orbit("--url", server.url, "health", env=missing)
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout) == {"status": "ok"}
    shown = run_orbit_tty("--url", server.url, "health")
    assert shown.returncode == 0
    assert f"orbit-server at {server.url} is ok" in shown.text


def test_certificate_failure_is_named(tmp_path: Path) -> None:
    srv, cert = https_server(tmp_path)
    try:
        srv.start()
        result = run_orbit("--url", srv.url, "health")  # self-signed: not trusted
        assert result.returncode == 5, result.stderr
        line = one_error_line(result, "UNAVAILABLE")
        assert "TLS certificate" in line and "refused" in line, line
        # Trusting the CA it was signed by makes it work.
        trusted = run_orbit("--url", srv.url, "health", env={"SSL_CERT_FILE": str(cert)})
        assert trusted.returncode == 0, trusted.stderr
    finally:
        srv.stop()


def test_queue_defaults_to_the_credentials_one_queue(admin_cli: Cli, tmp_path: Path) -> None:
    queue, producer, _ = lane(admin_cli, tmp_path)
    task_id = submit(producer, NOBODY)
    assert producer.json("tasks", "get", task_id)["queue_id"] == queue
    assert producer.json("queues", "stats")["queue_id"] == queue
    # A delayed, urgent task: the summary says when it may run and its priority.
    later = submit(producer, NOBODY, "{}", "--delay", "1h", "--priority", "9")
    assert producer.json("tasks", "get", later)["priority"] == 9
    rows = [line.split() for line in producer.tty("tasks", "get", later).text.splitlines()]
    assert ["priority", "9"] in rows
    assert any(r[:3] == ["next", "attempt", "in"] and ("min" in r or "h" in r)
               for r in rows), rows
    # An admin is not scoped to one queue: it must say which.
    result = admin_cli.run("tasks", "submit", "--handler", NOBODY, "--handler-version", "v1",
                           "--payload-version", "v1", "--payload", "{}")
    assert result.returncode == 2 and "--queue is needed" in result.stderr


def test_review_several_tasks_at_once(
    server: ServerProcess, admin_cli: Cli, tmp_path: Path
) -> None:
    _, producer, worker_file = lane(admin_cli, tmp_path)
    ids = [submit(producer, ECHO.handler, f'{{"i": {i}}}') for i in range(3)]
    asyncio.run(finish_each(server, worker_file,
                            {t: ("UNKNOWN", "HANDLER_ERROR") for t in ids}))
    for task_id in ids:
        producer.json_exit(11, "tasks", "get", task_id, "--wait", "10")
    not_in_review = submit(producer, NOBODY)
    result = producer.run("tasks", "review", "--retry", ids[0], not_in_review, ids[1],
                          "--reason", "fixed the input")
    assert result.returncode == 1  # one of them was refused; the others went ahead
    line = one_error_line(result, "CONFLICT")
    assert f"task {not_in_review}:" in line
    answer = orjson.loads(result.stdout)
    assert [t["id"] for t in answer["tasks"]] == [ids[0], ids[1]]
    assert all(t["state"] == "PENDING" for t in answer["tasks"])
    assert [e["task_id"] for e in answer["errors"]] == [not_in_review]
    for task_id in ids[:2]:
        events = producer.json("tasks", "audit", task_id)["events"]
        assert any(e["actor"].startswith("operator:") for e in events), events
    # The rest resolved on a terminal: one line per task.
    shown = producer.tty("tasks", "review", "--fail", ids[2], "--reason", "gave up")
    assert shown.returncode == 0, shown.text
    assert f"{ids[2]}  FAILED" in shown.text
