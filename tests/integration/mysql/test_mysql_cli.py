"""`orbit-server` with a mysql:// URL: migrate and bootstrap-admin through ORBIT_DB, and a
database that cannot be reached is one line on stderr without the password."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.mariadb import ENV
from support.server import free_port, server_command
from support.waiting import UNIT

from orbit_host.credentials import load_credentials

pytestmark = pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True)


def _run(*args: str, db: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["ORBIT_DB"] = db
    return subprocess.run([*server_command(), *args], env=env, capture_output=True, text=True,
                          timeout=60 * UNIT)


def test_migrate_and_bootstrap_admin_on_mariadb(db_url: str, tmp_path: Path) -> None:
    done = _run("migrate", db=db_url)
    assert done.returncode == 0 and "latest schema" in done.stdout, done.stderr
    out = tmp_path / "admin.json"
    done = _run("bootstrap-admin", "-o", str(out), "--url", "http://127.0.0.1:8080", db=db_url)
    assert done.returncode == 0, done.stderr
    assert load_credentials(out).role == "admin"


def test_unreachable_database_is_one_line_without_password(orbit_store: str) -> None:
    url = f"mysql://orbit:pw-s3cret@127.0.0.1:{free_port()}/orbit"
    done = _run("migrate", db=url)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "2003" in done.stderr and "pw-s3cret" not in done.stderr + done.stdout
