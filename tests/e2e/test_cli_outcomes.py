"""The `orbit` command as people and scripts meet it, against a real orbit-server: --wait
exit codes per outcome, human output on a terminal (a pseudo-terminal) and JSON on a pipe,
errors by exit code and error code, the default queue, and reviewing several tasks at once.
The words of the human views and of the error lines are tests/unit/client/test_cli_render.py's.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import orjson
import pytest
from support.cli import (
    Cli,
    TtyResult,
    closed_port_url,
    one_error_line,
    read_to_exit,
    read_until,
    run_orbit,
    run_orbit_tty,
    spawn_tty,
)
from support.lanes import ECHO_RESULT, Lane, finish_each
from support.orbit_http import OrbitEnv
from support.protocol_client import ECHO
from support.server import ServerProcess, https_server

from orbit_client import Credentials, write_credentials
from orbit_client.cli.render import progress_line
from orbit_client.cli.timefmt import stamp
from orbit_wire.ids import is_id

NOBODY = "nobody.serves.this"


@pytest.fixture
def admin_cli(server: ServerProcess, admin_credentials: Credentials, tmp_path: Path) -> Cli:
    path = tmp_path / "admin.json"
    write_credentials(path, admin_credentials)
    return Cli(path)


def lane(orbit: OrbitEnv, tmp_path: Path) -> tuple[Lane, Cli]:
    """A queue and `orbit` as its producer."""
    made = Lane.open(orbit)
    return made, Cli.producer_of(made, tmp_path)


def submit(cli: Cli, handler: str, payload: str = "{}", *extra: str) -> str:
    """Submit without --queue: a single-queue credential's queue is the default."""
    task_id = cli.ok("tasks", "submit", "--handler", handler, "--handler-version", "v1",
                     "--payload-version", "v1", "--payload", payload, *extra).strip()
    assert is_id(task_id)
    return task_id


def finish(made: Lane, outcomes: dict[str, tuple[str, str | None]]) -> None:
    asyncio.run(finish_each(made.ws_url, made.worker, outcomes))


def is_for_people(shown: TtyResult) -> bool:
    """A human view on a terminal: coloured, and not JSON."""
    try:
        orjson.loads(shown.text)
    except orjson.JSONDecodeError:
        return "\x1b[" in shown.raw
    return False


def test_wait_exit_code_says_how_the_task_ended(orbit: OrbitEnv, tmp_path: Path) -> None:
    made, producer = lane(orbit, tmp_path)
    ok, failed, review = (submit(producer, ECHO.handler) for _ in range(3))
    finish(made, {ok: ("SUCCEEDED", None), failed: ("FAILED", "BAD_INPUT"),
                  review: ("UNKNOWN", "HANDLER_ERROR")})
    expected = {ok: (0, "SUCCEEDED"), failed: (10, "FAILED"), review: (11, "NEEDS_REVIEW")}
    for task_id, (exit_code, state) in expected.items():
        task = producer.json_exit(exit_code, "tasks", "get", task_id, "--wait", "10")
        assert task["state"] == state, task
    assert f'"result": {ECHO_RESULT}' in producer.ok("tasks", "get", ok, "--wait", "10")

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


def test_human_output_on_a_terminal(orbit: OrbitEnv, tmp_path: Path) -> None:
    # What the views say is tests/unit/client/test_cli_render.py's; here: which form comes
    # where, and that the terminal's shows the task it was asked for.
    made, producer = lane(orbit, tmp_path)
    ok, review = submit(producer, ECHO.handler), submit(producer, ECHO.handler)
    finish(made, {ok: ("SUCCEEDED", None), review: ("UNKNOWN", "HANDLER_ERROR")})

    shown = producer.tty("tasks", "get", ok, "--wait", "10")
    assert shown.returncode == 0, shown.text
    assert is_for_people(shown), shown.text
    task = producer.json("tasks", "get", ok)
    assert ok in shown.text and ECHO_RESULT in shown.text  # the handler's exact result text
    # Times for people: the instant written out, not epoch milliseconds.
    assert stamp(task["created_at_ms"]) in shown.text
    assert str(task["created_at_ms"]) not in shown.text
    for args in (("tasks", "get", review), ("queues", "stats"), ("tasks", "attempts", review),
                 ("tasks", "audit", ok)):
        shown = producer.tty(*args)
        assert shown.returncode == 0 and is_for_people(shown), (args, shown.text)

    # --json on a terminal, and --output json, are the script forms.
    assert orjson.loads(producer.tty("tasks", "get", ok, "--json").text)["id"] == ok
    stats_json = orjson.loads(producer.tty("--output", "json", "queues", "stats").text)
    assert stats_json["counts"]["SUCCEEDED"] == stats_json["counts"]["NEEDS_REVIEW"] == 1
    # On a pipe JSON is the default; --output human (or ORBIT_OUTPUT) asks for the tables.
    human = producer.run("--output", "human", "queues", "stats")
    assert human.returncode == 0 and "\x1b[" not in human.stdout
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(human.stdout)
    assert made.queue in human.stdout


def test_wait_shows_progress_on_a_terminal(orbit: OrbitEnv, tmp_path: Path) -> None:
    _, producer = lane(orbit, tmp_path)
    task_id = submit(producer, NOBODY)
    shown = producer.tty("tasks", "get", task_id, "--wait", "1.5")
    assert shown.returncode == 13, shown.text
    # The status line (its words: test_cli_render.py), drawn when the wait begins.
    first = progress_line(producer.json("tasks", "get", task_id), 0, 1500)
    assert first in shown.text, (first, shown.text)


def test_ctrl_c_stops_the_wait_not_the_task(orbit: OrbitEnv, tmp_path: Path) -> None:
    _, producer = lane(orbit, tmp_path)
    task_id = submit(producer, NOBODY)
    proc, master = spawn_tty("tasks", "get", task_id, "--wait", "60", env=producer.env)
    try:
        read_until(master, "PENDING · no attempt yet")  # the wait has begun
        os.kill(proc.pid, signal.SIGINT)
        ended = read_to_exit(proc, master, timeout=30)
    finally:
        os.close(master)
    assert ended.returncode == 130, ended.text
    assert "orbit: interrupted" in ended.text  # the root group's own line: no unit test runs it
    assert producer.json("tasks", "get", task_id)["state"] == "PENDING"


def test_errors_exit_with_their_code(
    orbit: OrbitEnv, admin_cli: Cli, tmp_path: Path
) -> None:
    # What each error line says next is test_cli_render.py's; here: the exit code, and one
    # line on stderr that starts with the error code.
    result = run_orbit("--url", closed_port_url(), "health")
    assert result.returncode == 4
    one_error_line(result, "UNAVAILABLE")
    result = run_orbit("tasks", "get", "f" * 32)
    assert result.returncode == 3
    one_error_line(result, "BAD_REQUEST")
    result = run_orbit("--credentials-file", str(tmp_path / "nope.json"), "tasks", "get",
                       "f" * 32)
    assert result.returncode == 3
    one_error_line(result, "BAD_REQUEST")

    # A review of a task that is not in review: the server's words name the state, not its
    # internal event names.
    _, producer = lane(orbit, tmp_path)
    task_id = submit(producer, NOBODY)
    producer.json("tasks", "cancel", task_id)
    for action in (["--retry"], ["--succeed", "--result", "{}"], ["--fail"]):
        line = producer.fails("CONFLICT", 1, "tasks", "review", task_id, *action)
        assert "operator_" not in line and "NEEDS_REVIEW" in line, line
    admin_cli.fails("NOT_FOUND", 1, "tasks", "get", "f" * 32)


def test_health_needs_no_credentials(server: ServerProcess, tmp_path: Path) -> None:
    missing = {"ORBIT_CREDENTIALS_FILE": str(tmp_path / "nope.json")}
    result = run_orbit("--url", server.url, "health", env=missing)
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout) == {"status": "ok"}
    shown = run_orbit_tty("--url", server.url, "health")
    assert shown.returncode == 0
    # The command's own line (no view of render.py): no unit test runs it.
    assert f"orbit-server at {server.url} is ok" in shown.text


def test_certificate_failure_is_named(tmp_path: Path) -> None:
    srv, cert = https_server(tmp_path)
    try:
        srv.start()
        result = run_orbit("--url", srv.url, "health")  # self-signed: not trusted
        assert result.returncode == 5, result.stderr  # the exit code of a refused certificate
        one_error_line(result, "UNAVAILABLE")
        # Trusting the CA it was signed by makes it work.
        trusted = run_orbit("--url", srv.url, "health", env={"SSL_CERT_FILE": str(cert)})
        assert trusted.returncode == 0, trusted.stderr
    finally:
        srv.stop()


def test_queue_defaults_to_the_credentials_one_queue(
    orbit: OrbitEnv, admin_cli: Cli, tmp_path: Path
) -> None:
    made, producer = lane(orbit, tmp_path)
    task_id = submit(producer, NOBODY)
    assert producer.json("tasks", "get", task_id)["queue_id"] == made.queue
    assert producer.json("queues", "stats")["queue_id"] == made.queue
    later = submit(producer, NOBODY, "{}", "--delay", "1h", "--priority", "9")
    task = producer.json("tasks", "get", later)
    assert task["priority"] == 9 and task["queue_id"] == made.queue
    assert task["next_attempt_at_ms"] == task["created_at_ms"] + 3_600_000
    # An admin is not scoped to one queue: it must say which (a usage error).
    result = admin_cli.run("tasks", "submit", "--handler", NOBODY, "--handler-version", "v1",
                           "--payload-version", "v1", "--payload", "{}")
    assert result.returncode == 2 and result.stdout == "", result.stderr


def test_review_several_tasks_at_once(orbit: OrbitEnv, tmp_path: Path) -> None:
    made, producer = lane(orbit, tmp_path)
    ids = [submit(producer, ECHO.handler, f'{{"i": {i}}}') for i in range(3)]
    finish(made, {t: ("UNKNOWN", "HANDLER_ERROR") for t in ids})
    for task_id in ids:
        producer.json_exit(11, "tasks", "get", task_id, "--wait", "10")
    not_in_review = submit(producer, NOBODY)
    result = producer.run("tasks", "review", "--retry", ids[0], not_in_review, ids[1],
                          "--reason", "fixed the input")
    assert result.returncode == 1  # one of them was refused; the others went ahead
    one_error_line(result, "CONFLICT")
    answer = orjson.loads(result.stdout)
    assert [t["id"] for t in answer["tasks"]] == [ids[0], ids[1]]
    assert all(t["state"] == "PENDING" for t in answer["tasks"])
    assert [e["task_id"] for e in answer["errors"]] == [not_in_review]
    assert answer["errors"][0]["code"] == "CONFLICT"
    for task_id in ids[:2]:
        events = producer.json("tasks", "audit", task_id)["events"]
        assert any(e["actor"].startswith("operator:") for e in events), events
    # The rest resolved on a terminal: one line per task.
    shown = producer.tty("tasks", "review", "--fail", ids[2], "--reason", "gave up")
    assert shown.returncode == 0, shown.text
    assert ids[2] in shown.text
    assert producer.json("tasks", "get", ids[2])["state"] == "FAILED"
