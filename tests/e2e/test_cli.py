"""The real `orbit` command as a subprocess: exit codes, one-line errors, and (against a real
orbit-server process) the README flow end to end."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from support.cli import ORBIT, Cli, closed_port_url, one_error_line, run_orbit
from support.lanes import finish_each
from support.orbit_http import WorkerCredential
from support.protocol_client import ECHO
from support.server import ServerProcess
from support.waiting import UNIT

from examples.worker.handlers import NORMALIZE
from orbit_client import Credentials, OrbitClient, load_credentials, write_credentials
from orbit_wire.ids import is_id

QID = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def offline_creds(tmp_path: Path) -> Path:
    path = tmp_path / "producer.json"
    write_credentials(path, Credentials(closed_port_url(), QID, "not-a-real-secret", "producer",
                                        (QID,)))
    return path


# ----------------------------------------------------------------------- without a server


def test_unreachable_server_exits_4(offline_creds: Path) -> None:
    result = run_orbit("--credentials-file", str(offline_creds), "queues", "stats", QID)
    assert result.returncode == 4
    line = one_error_line(result, "UNAVAILABLE")
    assert "not-a-real-secret" not in line


def test_health_needs_no_credentials_but_a_server() -> None:
    result = run_orbit("--url", closed_port_url(), "health")
    assert result.returncode == 4
    one_error_line(result, "UNAVAILABLE")


def test_missing_or_malformed_credentials_exit_3(tmp_path: Path) -> None:
    result = run_orbit("queues", "create")
    assert result.returncode == 3
    one_error_line(result, "BAD_REQUEST")
    result = run_orbit("--credentials-file", str(tmp_path / "nope.json"), "queues", "create")
    assert result.returncode == 3
    one_error_line(result, "BAD_REQUEST")
    bad = tmp_path / "bad.json"
    bad.write_text('{"url": "ftp://x", "credential_id": "short", "secret": "s"}')
    bad.chmod(0o600)  # a looser mode is refused before the content is read
    result = run_orbit("queues", "create", env={"ORBIT_CREDENTIALS_FILE": str(bad)})
    assert result.returncode == 3
    one_error_line(result, "BAD_REQUEST")


def test_input_refused_before_sending_exits_2(offline_creds: Path) -> None:
    env = {"ORBIT_CREDENTIALS_FILE": str(offline_creds)}
    submit = ["tasks", "submit", "--queue", QID, "--handler", "h", "--handler-version", "v1",
              "--payload-version", "v1", "--payload"]
    result = run_orbit(*submit, "{not json", env=env)
    assert result.returncode == 2
    one_error_line(result, "INVALID_JSON")
    result = run_orbit(*submit, '{"n": 99999999999999999999}', env=env)
    assert result.returncode == 2
    one_error_line(result, "NUMBER_OUT_OF_RANGE")
    result = run_orbit(*submit, "null", env=env)  # a bad request, never a "result" error
    assert result.returncode == 2
    line = one_error_line(result, "BAD_REQUEST")
    assert "payload must not be null" in line and "RESULT" not in line
    result = run_orbit(*submit, "@" + str(offline_creds.parent / "missing.json"), env=env)
    assert result.returncode == 2
    one_error_line(result, "BAD_REQUEST")
    result = run_orbit("tasks", "get", "../../v1/queues", env=env)
    assert result.returncode == 2
    one_error_line(result, "BAD_REQUEST")


def test_usage_errors_exit_2(offline_creds: Path) -> None:
    env = {"ORBIT_CREDENTIALS_FILE": str(offline_creds)}
    assert run_orbit("tasks", "frobnicate", env=env).returncode == 2
    result = run_orbit("tasks", "review", QID, env=env)
    assert result.returncode == 2 and result.stdout == ""
    result = run_orbit("tasks", "review", QID, "--retry", "--fail", env=env)
    assert result.returncode == 2
    result = run_orbit("tasks", "review", QID, "--fail", "--result", "{}", env=env)
    assert result.returncode == 2
    result = run_orbit("credentials", "create", "--role", "root", "-o", "-", env=env)
    assert result.returncode == 2


# ------------------------------------------------------------ against a real orbit-server

ROOT = Path(__file__).resolve().parents[2]
SUPERVISE = Path(sys.executable).with_name("orbit-supervise")
STOP_BOUND_S = 30.0 * UNIT


@pytest.fixture
def admin_cli(server: ServerProcess, admin_credentials: Credentials, tmp_path: Path) -> Cli:
    path = tmp_path / "admin.json"
    write_credentials(path, admin_credentials)
    return Cli(path)


def submit_args(queue: str, payload: str, handler: str = "text.normalize") -> list[str]:
    return ["tasks", "submit", "--queue", queue, "--handler", handler, "--handler-version",
            "v1", "--payload-version", "v1", "--payload", payload]


def make_lane(admin_cli: Cli, tmp_path: Path) -> tuple[str, Path, Path]:
    """A queue plus producer and worker credentials files made with the CLI."""
    queue = admin_cli.ok("queues", "create", "--name", "demo").strip()
    assert is_id(queue)
    files = []
    for role in ("producer", "worker"):
        path = tmp_path / f"{role}.json"
        out = admin_cli.ok("credentials", "create", "--role", role, "--queue", queue,
                           "-o", str(path))
        creds = load_credentials(path)
        assert out == creds.credential_id + "\n"  # the ID only, never the secret
        assert creds.role == role and creds.queues == (queue,)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        files.append(path)
    return queue, files[0], files[1]


def test_readme_flow_with_a_real_supervisor(
    server: ServerProcess, admin_cli: Cli, tmp_path: Path
) -> None:
    queue, producer_file, worker_file = make_lane(admin_cli, tmp_path)
    producer = Cli(producer_file)
    supervise = subprocess.Popen(
        [str(SUPERVISE), "--credentials-file", str(worker_file), "--queue", queue,
         "--workers", "2", "--shutdown-timeout", "10", "examples.worker.handlers:HANDLERS"],
        cwd=ROOT, env={k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        task = producer.json(*submit_args(queue, '{"text": "  hello   orbit "}'),
                             "--wait", "20")
        assert task["state"] == "SUCCEEDED", task
        assert task["result"] == {"text": "HELLO ORBIT"}
        assert "result_json" not in task  # the CLI prints the server's shape
        # The README's Python example: the shared declaration, a typed submit and result.
        with OrbitClient(credentials=producer_file) as orbit:
            typed = orbit.submit(NORMALIZE, {"text": "  hello   orbit "}, priority=7)
            assert typed.priority == 7
            assert orbit.result(typed, timeout=20 * UNIT) == {"text": "HELLO ORBIT"}
    finally:
        os.kill(supervise.pid, signal.SIGTERM)
        try:
            _, err = supervise.communicate(timeout=STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            os.kill(supervise.pid, signal.SIGKILL)
            supervise.wait(timeout=STOP_BOUND_S)
            raise
    assert supervise.returncode == 0, err.decode(errors="replace")[-2000:]

    # The exact text the handler produced: orjson writes it compact.
    shown = producer.ok("tasks", "get", task["id"])
    assert '"result": {"text":"HELLO ORBIT"}' in shown
    history = producer.json("tasks", "attempts", task["id"])
    [attempt] = history["attempts"]
    assert attempt["outcome"] == "SUCCEEDED" and attempt["decision"] == "SUCCEEDED"
    assert attempt["child_pid"] and attempt["epoch"] == 1
    assert history["evidence"] == []
    events = producer.json("tasks", "audit", task["id"])["events"]
    assert events[-1]["to_state"] == "SUCCEEDED"
    stats = producer.json("queues", "stats", queue)
    assert stats["counts"]["SUCCEEDED"] == 2  # the CLI's task and the typed one


def test_submit_get_cancel_and_json_output(admin_cli: Cli, tmp_path: Path) -> None:
    queue, producer_file, _ = make_lane(admin_cli, tmp_path)
    producer = Cli(producer_file)
    payload_file = tmp_path / "payload.json"
    payload_file.write_text('{"text": "from a file", "n": 1.10}')
    task_id = producer.ok(*submit_args(queue, "@" + str(payload_file), "nobody.serves.this"),
                          "--idempotent", "--max-attempts", "5",
                          "--operation-key", "k-1").strip()
    assert is_id(task_id)
    again = producer.json(*submit_args(queue, "@" + str(payload_file), "nobody.serves.this"),
                          "--idempotent", "--max-attempts", "5", "--operation-key", "k-1",
                          "--json")
    assert again["id"] == task_id
    # The same key with another spec is refused, naming the task the key belongs to.
    line = producer.fails("CONFLICT", 1, *submit_args(queue, "{}", "nobody.serves.this"),
                          "--operation-key", "k-1")
    assert task_id in line
    task = producer.json("tasks", "get", task_id)
    assert task["state"] == "PENDING"
    assert task["policy"]["idempotency"] == "IDEMPOTENT"
    assert task["policy"]["max_attempts"] == 5
    assert task["payload"] == {"text": "from a file", "n": 1.1}
    waited = producer.json_exit(13, "tasks", "get", task_id, "--wait", "0.3")
    assert waited["state"] == "PENDING"
    cancelled = producer.json("tasks", "cancel", task_id, "--reason", "test")
    assert cancelled["state"] == "CANCELLED"
    assert producer.json("tasks", "attempts", task_id) == {"attempts": [], "evidence": []}
    producer.fails("CONFLICT", 1, "tasks", "review", task_id, "--retry")
    producer.fails("NOT_FOUND", 1, "tasks", "get", "f" * 32)
    queue_json = admin_cli.json("queues", "create", "--json")
    assert is_id(queue_json["id"]) and "created_at_ms" in queue_json


def test_credential_errors_have_codes(
    server: ServerProcess, admin_cli: Cli, tmp_path: Path
) -> None:
    queue, producer_file, worker_file = make_lane(admin_cli, tmp_path)
    producer = Cli(producer_file)
    # Wrong role: producers cannot create queues, workers cannot use the HTTP API.
    producer.fails("PERMISSION_DENIED", 1, "queues", "create")
    Cli(worker_file).fails("PERMISSION_DENIED", 1, *submit_args(queue, "{}"))
    # A wrong secret.
    good = load_credentials(producer_file)
    forged_file = tmp_path / "forged.json"
    write_credentials(forged_file, Credentials(good.url, good.credential_id, "0" * 64,
                                               good.role, good.queues))
    line = Cli(forged_file).fails("UNAUTHENTICATED", 1, "queues", "stats", queue)
    assert "0" * 64 not in line
    # Revoked with the CLI: refused from then on.
    revoked = admin_cli.json("credentials", "revoke", good.credential_id)
    assert revoked == {"credential_id": good.credential_id, "revoked": True}
    line = producer.fails("UNAUTHENTICATED", 1, "queues", "stats", queue)
    assert good.secret not in line
    # '-o -' is the one way to see a secret, and it is a complete credentials file.
    out = admin_cli.ok("credentials", "create", "--role", "producer", "--queue", queue,
                       "-o", "-")
    shown = orjson.loads(out)
    assert shown["url"] == server.url and shown["secret"] and shown["queues"] == [queue]
    # --url overrides the credentials file's URL (here: to a dead port).
    result = run_orbit("--url", closed_port_url(), "queues", "stats", queue, env=admin_cli.env)
    assert result.returncode == 4


def test_review_flow(server: ServerProcess, admin_cli: Cli, tmp_path: Path) -> None:
    queue, producer_file, worker_file = make_lane(admin_cli, tmp_path)
    producer = Cli(producer_file)
    ids = [producer.ok(*submit_args(queue, f'{{"i": {i}}}', ECHO.handler)).strip()
           for i in range(3)]
    worker = WorkerCredential.of(load_credentials(worker_file))
    asyncio.run(finish_each(server.ws_url, worker,
                            {t: ("UNKNOWN", "HANDLER_ERROR") for t in ids}))
    for task_id in ids:
        task = producer.json_exit(11, "tasks", "get", task_id, "--wait", "10")
        assert task["state"] == "NEEDS_REVIEW", task
    out = producer.ok("tasks", "review", ids[0], "--succeed", "--result", '{"v": 1.10}',
                      "--reason", "checked by hand")
    reviewed = orjson.loads(out)
    assert reviewed["state"] == "SUCCEEDED"
    # The server stores an operator's result as a parsed value (its number text is the
    # server's encoding), unlike a handler's result, whose text is kept exactly.
    assert reviewed["result"] == {"v": 1.1}
    assert producer.json("tasks", "review", ids[1], "--fail")["state"] == "FAILED"
    assert producer.json("tasks", "review", ids[2], "--retry")["state"] == "PENDING"
    events = producer.json("tasks", "audit", ids[0])["events"]
    assert any(e["actor"].startswith("operator:") for e in events), events


def test_a_server_that_stops_answering_times_out_as_unreachable(
    server: ServerProcess, admin_cli: Cli
) -> None:
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # the kernel still accepts connections; nobody answers
    try:
        result = run_orbit("--timeout", "0.5", "queues", "create", env=admin_cli.env,
                           timeout=30)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert result.returncode == 4
    one_error_line(result, "UNAVAILABLE")
    assert admin_cli.ok("health")  # and it serves again once resumed


def test_submit_with_delay_and_priority(admin_cli: Cli, tmp_path: Path) -> None:
    queue, producer_file, _ = make_lane(admin_cli, tmp_path)
    producer = Cli(producer_file)
    task = producer.json(*submit_args(queue, "{}", "nobody.serves.this"),
                         "--delay", "1h", "--priority", "8", "--json")
    assert task["priority"] == 8
    assert task["next_attempt_at_ms"] == task["created_at_ms"] + 3_600_000
    when = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    at = producer.json(*submit_args(queue, "{}", "nobody.serves.this"),
                       "--not-before", when.isoformat(), "--json")
    assert at["priority"] == 5
    assert at["next_attempt_at_ms"] == int(when.timestamp()) * 1000
    stats = producer.json("queues", "stats", queue)
    assert stats["pending_by_priority"] == {"8": 1, "5": 1}
    assert stats["pending_delayed"] == 2
    producer.fails("BAD_REQUEST", 1, *submit_args(queue, "{}"), "--delay", "1h",
                   "--not-before", "1")
    producer.fails("BAD_REQUEST", 2, *submit_args(queue, "{}"), "--delay", "soon")
    producer.fails("BAD_REQUEST", 2, *submit_args(queue, "{}"), "--not-before", "tomorrow")


def test_schedules_commands(admin_cli: Cli, tmp_path: Path) -> None:
    queue, producer_file, _ = make_lane(admin_cli, tmp_path)
    producer = Cli(producer_file)
    base = ["schedules", "create", "--queue", queue, "--handler", "nobody.serves.this",
            "--handler-version", "v1", "--payload-version", "v1", "--payload", '{"n": 1}']
    sid = producer.ok(*base, "--cron", "0 9 * * 1-5", "--timezone", "Europe/Paris",
                      "--name", "weekday", "--priority", "7", "--idempotent").strip()
    assert is_id(sid)
    listed = producer.json("schedules", "list", "--queue", queue)["schedules"]
    assert [s["id"] for s in listed] == [sid]
    shown = producer.json("schedules", "get", sid)
    assert shown["cron"] == "0 9 * * 1-5" and shown["timezone"] == "Europe/Paris"
    assert shown["task"]["priority"] == 7 and shown["firings"] == []
    assert shown["next_fire_at_ms"] > shown["created_at_ms"]
    assert producer.json("schedules", "pause", sid)["state"] == "PAUSED"
    assert producer.json("schedules", "resume", sid)["state"] == "ACTIVE"
    assert producer.json("schedules", "delete", sid) == {"schedule_id": sid, "deleted": True}
    producer.fails("NOT_FOUND", 1, "schedules", "get", sid)
    producer.fails("BAD_REQUEST", 1, *base, "--cron", "every day")
    producer.fails("BAD_REQUEST", 1, *base, "--cron", "* * * * *", "--timezone", "Nowhere/X")


def test_every_command_shows_the_distribution_version() -> None:
    from importlib.metadata import version

    expected = version("orbit-tasks")
    for command in ("orbit", "orbit-server", "orbit-supervise"):
        done = subprocess.run([str(ORBIT.with_name(command)), "--version"],
                              capture_output=True, text=True, timeout=60 * UNIT, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"{command}, version {expected}"
