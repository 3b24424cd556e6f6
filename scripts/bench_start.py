#!/usr/bin/env python3
"""CPU time (user+sys) of starting Orbit's processes, the cost every test setup pays.

    .venv/bin/python scripts/bench_start.py [--runs 5] [--db mysql://root@127.0.0.1:3306/x]
    .venv/bin/python scripts/bench_start.py --quick        # one run of each, ~15 s

CPU time, not wall time: it stays meaningful while other work loads the machine. Each
figure is the median over ``--runs`` of one process's own user+sys (``os.wait4`` for the
processes that exit; psutil for ``serve``, read the moment /healthz first answers):

  - ``orbit-server migrate`` on a fresh, empty database, and again on one already at head;
  - ``orbit-server bootstrap-admin`` on a fresh database (it migrates first) and on one at
    head;
  - ``orbit-server serve`` on a database at head, up to its first /healthz answer;
  - ``orbit --help``, ``orbit-supervise --help`` (the commands' import cost).

SQLite files live in a temporary directory; ``--db`` names a MariaDB server URL whose
database is dropped and recreated before each fresh-database run (use a scratch name).
Every process is stopped by PID; every wait is bounded.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
WAIT_S = 60.0


def run_cpu(cmd: list[str], cwd: Path) -> float:
    """Run ``cmd`` to its end; its own user+sys CPU seconds."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + WAIT_S
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            os.kill(proc.pid, signal.SIGKILL)
            os.wait4(proc.pid, 0)
            raise RuntimeError(f"{cmd[:2]} did not end within {WAIT_S} s")
        time.sleep(0.005)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise RuntimeError(f"{cmd} failed ({proc.returncode}): {err[-1000:]}")
    return usage.ru_utime + usage.ru_stime


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_cpu(db: str, cwd: Path) -> float:
    """Start ``orbit-server serve``; its CPU seconds when /healthz first answers."""
    port = free_port()
    proc = subprocess.Popen([str(BIN / "orbit-server"), "serve", "--db", db, "--port", str(port),
                             "--log-level", "warning"], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        handle = psutil.Process(proc.pid)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"orbit-server exited with {proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0).status_code == 200:
                    times = handle.cpu_times()
                    return float(times.user + times.system)
            except httpx.HTTPError:
                pass
            time.sleep(0.01)
        raise RuntimeError("orbit-server did not answer /healthz")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


class Databases:
    """Fresh databases: new SQLite files, or one MariaDB database dropped and recreated."""

    def __init__(self, workdir: Path, mysql: str | None) -> None:
        self.workdir = workdir
        self.mysql = mysql
        self.made = 0

    def fresh(self) -> str:
        self.made += 1
        if self.mysql is None:
            return f"sqlite:///{self.workdir / f'bench{self.made}.db'}"
        import sqlalchemy

        from orbit_server.store.db import normalize_url

        url = normalize_url(self.mysql)
        name = url.database
        engine = sqlalchemy.create_engine(url.set(database=""))
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
                conn.exec_driver_sql(f"CREATE DATABASE `{name}`")
        finally:
            engine.dispose()
        return self.mysql


def median_of(runs: int, one: Callable[[], float]) -> float:
    return statistics.median(one() for _ in range(runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one run of each (a smoke run)")
    parser.add_argument("--db", default=None, help="a MariaDB URL (scratch database name)")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    server = str(BIN / "orbit-server")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dbs = Databases(work, args.db)

        def migrated() -> str:
            db = dbs.fresh()
            run_cpu([server, "migrate", "--db", db], work)
            return db

        def admin(db: str) -> float:
            out = work / f"admin-{time.monotonic_ns()}.json"
            return run_cpu([server, "bootstrap-admin", "--db", db, "-o", str(out)], work)

        rows = [
            ("orbit-server migrate, empty database",
             median_of(runs, lambda: run_cpu([server, "migrate", "--db", dbs.fresh()], work))),
            ("orbit-server migrate, at head",
             median_of(runs, lambda: run_cpu([server, "migrate", "--db", migrated()], work))),
            ("orbit-server bootstrap-admin, empty database",
             median_of(runs, lambda: admin(dbs.fresh()))),
            ("orbit-server bootstrap-admin, at head", median_of(runs, lambda: admin(migrated()))),
            ("orbit-server serve to /healthz, at head",
             median_of(runs, lambda: serve_cpu(migrated(), work))),
            ("orbit --help", median_of(runs, lambda: run_cpu([str(BIN / "orbit"), "--help"],
                                                             work))),
            ("orbit-supervise --help",
             median_of(runs, lambda: run_cpu([str(BIN / "orbit-supervise"), "--help"], work))),
        ]
    load = os.getloadavg()[0]
    store = "MariaDB" if args.db else "SQLite"
    print(f"# {store}, median of {runs} run(s), CPU s (user+sys); load average {load:.1f}")
    for name, cpu in rows:
        print(f"{name:<48} {cpu:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
