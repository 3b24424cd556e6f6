"""Drain, shutdown timeout, signals and the CLI's exit codes, with real processes."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import orjson
from supervisor_support import (
    FIXTURES,
    ORBIT_SUPERVISE,
    SupEnv,
    alive,
    attempts,
    submit,
    wait_task,
)
from support.orbit_http import expect
from support.waiting import UNIT, wait_until

from orbit_host.credentials import Credentials, write_credentials


def _running(sup_env: SupEnv, task_id: str) -> bool:
    history = attempts(sup_env.producer, task_id)["attempts"]
    return any(a["state"] == "RUNNING" for a in history)


def test_sigterm_drains_running_tasks_and_confirms_them(sup_env: SupEnv) -> None:
    sup = sup_env.start(workers=2)
    ids = [submit(sup_env.producer, sup_env.queue_id, "sleep", {"seconds": 1.0})
           for _ in range(2)]
    wait_until(lambda: all(_running(sup_env, t) for t in ids), timeout=20, what="both running")
    sup.send(signal.SIGTERM)
    late = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "after drain"})
    assert sup.wait(20) == 0
    for task_id in ids:
        assert wait_task(sup_env.producer, task_id)["state"] == "SUCCEEDED"
    assert "drained started=2 confirmed=2 running=0" in sup.log()
    # Nothing was taken after the drain: the late task is still waiting for a worker.
    task = expect(sup_env.producer.get(f"/v1/tasks/{late}"), 200)
    assert task["state"] == "PENDING" and task["attempts"] == 0


def test_shutdown_timeout_kills_children_and_reports_counts(sup_env: SupEnv) -> None:
    sup = sup_env.start(workers=1, extra=("--shutdown-timeout", "0.5"))
    task_id = submit(sup_env.producer, sup_env.queue_id, "sleep", {"seconds": 60},
                     lease_ttl_ms=30000)
    wait_until(lambda: _running(sup_env, task_id), timeout=20, what="running")
    tree = sup.descendants()
    t0 = time.monotonic()
    sup.send(signal.SIGTERM)
    assert sup.wait(20) == 6
    assert time.monotonic() - t0 < 5.0 * UNIT
    assert "unconfirmed=1 running=1" in sup.log()
    wait_until(lambda: not alive(tree), timeout=5.0, what="children gone")


def test_second_sigint_takes_the_timeout_path_at_once(sup_env: SupEnv) -> None:
    sup = sup_env.start(workers=1)  # default shutdown timeout: 30 s
    task_id = submit(sup_env.producer, sup_env.queue_id, "sleep", {"seconds": 60},
                     lease_ttl_ms=30000)
    wait_until(lambda: _running(sup_env, task_id), timeout=20, what="running")
    t0 = time.monotonic()
    sup.send(signal.SIGINT)
    time.sleep(0.2 * UNIT)  # the scenario: a second SIGINT while the first one drains
    sup.send(signal.SIGINT)
    assert sup.wait(20) == 6
    assert time.monotonic() - t0 < 5.0 * UNIT
    assert "running=1" in sup.log()


def test_revoked_credential_is_a_fatal_session_error(sup_env: SupEnv) -> None:
    cred_id = orjson.loads(sup_env.credentials_file.read_bytes())["credential_id"]
    expect(sup_env.orbit.admin_http.delete(f"/v1/credentials/{cred_id}"), 200)
    sup = sup_env.start(workers=1)
    assert sup.wait(20) == 5
    log = sup.log()
    assert "fatal session error: UNAUTHENTICATED" in log
    assert "Traceback" not in log


def test_queue_outside_the_credential_scope_is_fatal(sup_env: SupEnv, tmp_path: Path) -> None:
    other = sup_env.orbit.queue()
    # A file that claims the queue: the server's hello check refuses it (a file that does
    # not list it is refused before connecting: test_supervise_queues.py).
    made = orjson.loads(sup_env.credentials_file.read_bytes())
    claims = tmp_path / "claims.json"
    write_credentials(claims, Credentials(made["url"], made["credential_id"], made["secret"],
                                          "worker", (other,)))
    sup = sup_env.start(workers=1, queue_id=other, credentials_file=claims)
    assert sup.wait(20) == 5
    assert "fatal session error: PERMISSION_DENIED" in sup.log()


def _cli(*args: str, cwd: Path = FIXTURES) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ORBIT_SUPERVISE), *args], capture_output=True, text=True,
                          timeout=60 * UNIT, cwd=cwd)


def test_errors_before_connecting_have_distinct_exit_codes(sup_env: SupEnv,
                                                            tmp_path: Path) -> None:
    creds = str(sup_env.credentials_file)
    missing = _cli("--credentials-file", str(tmp_path / "nope.json"), "m:x")
    assert missing.returncode == 3 and "does not exist" in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    bad.chmod(0o600)  # a looser mode is refused first (tests/integration/server/...file_modes)
    malformed = _cli("--credentials-file", str(bad), "m:x")
    assert malformed.returncode == 3 and "not valid JSON" in malformed.stderr
    no_module = _cli("--credentials-file", creds, "no_such_module_xyz:HANDLERS")
    assert no_module.returncode == 4, no_module.stderr
    duplicates = _cli("--credentials-file", creds, "supervisor_handlers:BROKEN_DUPLICATES")
    assert duplicates.returncode == 4, duplicates.stderr
    for done in (missing, malformed, no_module, duplicates):
        assert "Traceback" not in done.stderr
        assert len([line for line in done.stderr.splitlines() if "orbit-supervise:" in line]
                   ) == 1, done.stderr
    workers = _cli("--credentials-file", creds, "--workers", "300", "m:x")
    assert workers.returncode == 2 and "1<=x<=256" in workers.stderr
    delays = _cli("--credentials-file", creds, "--reconnect-min-delay", "2",
                  "--reconnect-max-delay", "1", "m:x")
    assert delays.returncode == 2 and "reconnect_max_delay" in delays.stderr
    timeout = _cli("--credentials-file", creds, "--shutdown-timeout", "301", "m:x")
    assert timeout.returncode == 2
    assert "Exit codes" in _cli("--help").stdout


def test_sigterm_while_the_server_is_unreachable_exits_at_once(sup_env: SupEnv) -> None:
    from support.server import free_port

    sup = sup_env.start(workers=1, url=f"http://127.0.0.1:{free_port()}")
    sup.wait_log("cannot reach", timeout_s=20)
    t0 = time.monotonic()
    sup.send(signal.SIGTERM)
    assert sup.wait(20) == 0  # nothing was reserved: nothing to drain
    assert time.monotonic() - t0 < 5.0 * UNIT
    assert "drained started=0 confirmed=0 running=0" in sup.log()
