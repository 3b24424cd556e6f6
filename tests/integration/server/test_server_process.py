"""The server runs as a real process: starts, answers /healthz, stops by PID, restarts."""

from __future__ import annotations

import signal

import httpx
from support.server import ServerProcess


def test_server_starts_answers_health_and_stops_on_sigterm(server: ServerProcess) -> None:
    response = httpx.get(f"{server.url}/healthz", timeout=5)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert server.stop() == 0  # graceful SIGTERM: exit code 0
    assert server.proc is not None and server.proc.returncode == 0


def test_server_survives_sigkill_restart_on_same_db(server: ServerProcess) -> None:
    first_pid = server.pid
    server.restart(crash=True)
    assert server.proc is not None
    assert server.pid != first_pid
    assert server.starts == 2
    assert httpx.get(f"{server.url}/healthz", timeout=5).json() == {"status": "ok"}
    server.kill()
    assert server.proc.returncode == -signal.SIGKILL


def test_openapi_document_is_served(server: ServerProcess) -> None:
    doc = httpx.get(f"{server.url}/openapi.json", timeout=5).json()
    assert doc["openapi"].startswith("3.1")
    assert "/v1/tasks/{task_id}" in doc["paths"]
