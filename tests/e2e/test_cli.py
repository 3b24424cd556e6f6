"""The real `orbit` command as a subprocess: exit codes, one-line errors, and (against a real
orbit-server process) the README flow end to end."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orbit_client import Credentials, write_credentials

ORBIT = Path(sys.executable).with_name("orbit")
QID = "0123456789abcdef0123456789abcdef"


def run_orbit(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `orbit ARGS` with a clean environment (no ORBIT_* leaking in from outside)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
    return subprocess.run(
        [str(ORBIT), *args],
        env={**base, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def closed_port_url() -> str:
    """A URL nobody listens on: bind port 0, note it, close it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def one_error_line(result: subprocess.CompletedProcess[str], code: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"orbit: {code}: "), lines[0]
    return lines[0]


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
    assert "does not exist" in one_error_line(result, "BAD_REQUEST")
    bad = tmp_path / "bad.json"
    bad.write_text('{"url": "ftp://x", "credential_id": "short", "secret": "s"}')
    result = run_orbit("queues", "create", env={"ORBIT_CREDENTIALS_FILE": str(bad)})
    assert result.returncode == 3
    assert "url" in one_error_line(result, "BAD_REQUEST")


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
    assert result.returncode == 2 and "exactly one of" in result.stderr
    result = run_orbit("tasks", "review", QID, "--retry", "--fail", env=env)
    assert result.returncode == 2
    result = run_orbit("tasks", "review", QID, "--fail", "--result", "{}", env=env)
    assert result.returncode == 2
    result = run_orbit("credentials", "create", "--role", "root", "-o", "-", env=env)
    assert result.returncode == 2
