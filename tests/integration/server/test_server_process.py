"""The server runs as a real process: starts, answers /healthz, stops by PID, restarts."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import select
from support.protocol_client import ProtocolClient
from support.server import ServerProcess, https_server, server_command
from support.waiting import UNIT, wait_until

from orbit_host.credentials import load_credentials
from orbit_server.store import create_engine_for, migrate
from orbit_server.store.rows import INSERT_RECEIPT
from orbit_server.store.tables import receipts


def test_server_starts_answers_health_and_stops_on_sigterm(server: ServerProcess) -> None:
    response = httpx.get(f"{server.url}/healthz", timeout=5 * UNIT)
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
    assert httpx.get(f"{server.url}/healthz", timeout=5 * UNIT).json() == {"status": "ok"}
    server.kill()
    assert server.proc.returncode == -signal.SIGKILL


def test_openapi_document_is_served(server: ServerProcess) -> None:
    doc = httpx.get(f"{server.url}/openapi.json", timeout=5 * UNIT).json()
    assert doc["openapi"].startswith("3.1")
    assert "/v1/tasks/{task_id}" in doc["paths"]


def test_migrate_and_bootstrap_admin_twice(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    migrated = subprocess.run([*server_command(), "migrate", "--db", db],
                              capture_output=True, text=True, timeout=60 * UNIT)
    assert migrated.returncode == 0, migrated.stderr
    again = subprocess.run([*server_command(), "migrate", "--db", db],
                           capture_output=True, text=True, timeout=60 * UNIT)
    assert again.returncode == 0, again.stderr  # safe to run twice
    files = []
    for i in range(2):
        out = tmp_path / f"admin{i}.json"
        made = subprocess.run([*server_command(), "bootstrap-admin", "--db", db, "-o", str(out),
                               "--url", "http://127.0.0.1:9"], capture_output=True, text=True,
                              timeout=60 * UNIT)
        assert made.returncode == 0, made.stderr
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        creds = load_credentials(out)
        assert creds.role == "admin" and creds.url == "http://127.0.0.1:9"
        assert creds.secret not in made.stdout + made.stderr  # never printed
        files.append(creds)
    assert files[0].credential_id != files[1].credential_id


def test_both_admin_credentials_work(server: ServerProcess) -> None:
    first, second = server.bootstrap_admin(), server.bootstrap_admin()
    for creds in (first, second):
        made = httpx.post(f"{server.url}/v1/queues", json={"name": "q"}, timeout=10 * UNIT,
                          headers={"Authorization": f"Bearer {creds.bearer}"})
        assert made.status_code == 201, made.text


def test_unknown_option_and_bad_tls_pair_fail_cleanly(tmp_path: Path) -> None:
    done = subprocess.run([*server_command(), "serve", "--port", "70000"],
                          capture_output=True, text=True, timeout=60 * UNIT)
    assert done.returncode == 2 and "70000" in done.stderr
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    done = subprocess.run([*server_command(), "serve", "--tls-cert", str(cert)],
                          capture_output=True, text=True, timeout=60 * UNIT)
    assert done.returncode == 2 and "--tls-key" in done.stderr


def test_tls_serves_https(tmp_path: Path) -> None:
    srv, cert = https_server(tmp_path)
    try:
        srv.start()
        trust = ssl.create_default_context(cafile=str(cert))
        got = httpx.get(f"https://127.0.0.1:{srv.port}/healthz", verify=trust, timeout=5 * UNIT)
        assert got.json() == {"status": "ok"}
        # The worker endpoint is served over wss:// on the same port.
        admin = srv.bootstrap_admin()
        with httpx.Client(base_url=srv.url, verify=trust, timeout=10 * UNIT,
                          headers={"Authorization": f"Bearer {admin.bearer}"}) as http:
            queue = http.post("/v1/queues", json={}).json()["id"]
            worker = http.post("/v1/credentials",
                               json={"role": "worker", "queues": [queue]}).json()

        async def hello_over_wss() -> int:
            async with await ProtocolClient.connect(srv.ws_url, ssl=trust) as wc:
                welcome = await wc.hello(worker["credential_id"], worker["secret"], queue)
                await wc.heartbeat()
                return welcome.session_ttl_ms

        assert srv.ws_url.startswith("wss://")
        assert asyncio.run(hello_over_wss()) == srv.session_ttl_ms
    finally:
        srv.stop()


def test_plain_orbit_server_serves_with_environment_settings(tmp_path: Path) -> None:
    from support.server import free_port

    port = free_port()
    env = {**os.environ, "ORBIT_DB": f"sqlite:///{tmp_path / 'env.db'}",
           "ORBIT_PORT": str(port), "ORBIT_HOST": "127.0.0.1"}
    proc = subprocess.Popen(server_command(), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def serving() -> bool:
            assert proc.poll() is None, "orbit-server without a subcommand exited"
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz",
                                 timeout=1 * UNIT).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(serving, timeout=30, interval=0.05,
                   what="orbit-server without a subcommand to serve")
        assert (tmp_path / "env.db").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10 * UNIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10 * UNIT)
    assert proc.returncode == 0


def test_database_errors_are_one_line(tmp_path: Path) -> None:
    for url in ("foo://bar", "sqlite:////proc/orbit-nope/a.db"):
        done = subprocess.run([*server_command(), "migrate", "--db", url],
                              capture_output=True, text=True, timeout=60 * UNIT)
        assert done.returncode == 1, done
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith("Error: ") and len(done.stderr.splitlines()) == 1, done


def test_the_running_server_deletes_receipts_past_the_retention(
        server_factory: Callable[..., ServerProcess], db_url: str) -> None:
    migrate(db_url)
    now = time.time_ns() // 1_000_000
    hour = 3_600_000
    rows = [{"instance_id": "e" * 32, "msg_id": f"old-{i}", "op": "renew", "answer": "{}",
             "created_at_ms": now - 3 * hour - i} for i in range(50)]
    rows += [{"instance_id": "e" * 32, "msg_id": f"young-{i}", "op": "renew", "answer": "{}",
              "created_at_ms": now - hour // 2} for i in range(3)]
    engine = create_engine_for(db_url)
    try:
        with engine.begin() as conn:
            INSERT_RECEIPT.run(conn, rows)
        srv = server_factory(db_url=db_url, extra_args=("--receipt-retention-hours", "2"))
        def pruned() -> list[str] | None:  # the first prune pass runs at start
            with engine.connect() as conn:
                left = sorted(conn.scalars(select(receipts.c.msg_id)))
            return None if any(m.startswith("old-") for m in left) else left

        left = wait_until(pruned, timeout=20, interval=0.1, what="the old receipts pruned")
        assert left == ["young-0", "young-1", "young-2"]
        assert srv.stop() == 0
    finally:
        engine.dispose()
