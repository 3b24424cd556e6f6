"""Helpers for the MariaDB-only tests: kill a database's connections, run real supervisors.

A uniquely named module (not conftest) so it imports beside the other test directories."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pymysql
from sqlalchemy.engine import make_url
from support.orbit_http import new_credential
from support.waiting import UNIT

from orbit_host.credentials import Credentials, write_credentials

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures_handlers"
ORBIT_SUPERVISE = ROOT / ".venv" / "bin" / "orbit-supervise"


def _server_connection(db_url: str, port: int | None = None) -> pymysql.Connection:
    url = make_url(db_url)
    return pymysql.connect(host=url.host or "127.0.0.1", port=port or url.port or 3306,
                           user=url.username or "root", password=url.password or "",
                           autocommit=True, connect_timeout=5)


def kill_connections(db_url: str, port: int | None = None) -> int:
    """KILL every connection to the URL's database (the server's pool), as an operator or a
    failover would; returns how many were killed."""
    database = make_url(db_url).database
    conn = _server_connection(db_url, port)
    killed = 0
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM information_schema.processlist "
                        "WHERE db = %s AND id <> CONNECTION_ID()", (database,))
            for (conn_id,) in cur.fetchall():
                try:
                    cur.execute(f"KILL {int(conn_id)}")
                    killed += 1
                except pymysql.err.OperationalError:  # it ended by itself meanwhile
                    pass
    finally:
        conn.close()
    return killed


def query(db_url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Run one read-only statement on the URL's database (for checks after a run)."""
    conn = _server_connection(db_url)
    try:
        conn.select_db(make_url(db_url).database)
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())
    finally:
        conn.close()


def worker_credentials(admin_http: httpx.Client, queue_id: str, url: str,
                       path: Path) -> Path:
    made = new_credential(admin_http, "worker", [queue_id])
    write_credentials(path, Credentials(url, made["credential_id"], made["secret"], "worker",
                                        (queue_id,)))
    return path


class Supervisor:
    """One real ``orbit-supervise`` process; ``stop`` kills it by PID."""

    def __init__(self, workdir: Path, credentials: Path, queue_id: str, url: str,
                 workers: int = 2) -> None:
        self.log_path = workdir / f"supervise-{time.monotonic_ns()}.log"
        self.cmd = [str(ORBIT_SUPERVISE), "--credentials-file", str(credentials),
                    "--queue", queue_id, "--workers", str(workers), "--url", url,
                    "--reconnect-min-delay", "0.05", "--reconnect-max-delay", "0.5",
                    "supervisor_handlers:HANDLERS"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Supervisor:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=FIXTURES)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10 * UNIT)


def upper_spec(i: int, **policy: Any) -> dict[str, Any]:
    return {"handler": "sup.upper", "handler_version": "v1", "payload_version": "v1",
            "payload": {"text": f"t{i}"}, **policy}
