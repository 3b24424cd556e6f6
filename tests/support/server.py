"""``ServerProcess``: a REAL ``orbit-server`` process on a SQLite file (or on ``db_url``, e.g.
a MariaDB database from tests/support/mariadb.py), for tests.

    srv = ServerProcess(tmp_path, session_ttl_ms=1000, kill_grace_ms=200)
    srv.start()                       # waits for /healthz (bounded), raises with the log tail
    admin = srv.bootstrap_admin()     # runs `orbit-server bootstrap-admin`, returns Credentials
    a, b, admin = replica_pair(server_factory)  # two servers on one database, and an admin
    srv.kill(); srv.start()           # SIGKILL, restart on the same DB and port
    srv.stop()                        # SIGTERM by PID, SIGKILL after a bound
    srv, cert = https_server(tmp_path)  # not started: HTTPS with a new self-signed cert

Every process is stopped by its PID; ``stop`` is safe to call twice. Use the ``server``
fixture (tests/conftest.py) rather than building one by hand unless a test needs flags.

``SeedDatabase`` makes, once per test session, a SQLite file that the real commands
migrated (``orbit-server migrate``) and gave an admin credential (``orbit-server
bootstrap-admin``); ``seed.copy_to(workdir)`` hands each server a private copy (mode 0600),
so a server start reads one schema version instead of running the migrations, and the
``admin_credentials`` fixture takes the seeded admin (``srv.seeded_admin``) instead of
starting ``bootstrap-admin`` again (docs/benchmarks.md, "Test suite and process start").
Servers built by hand start on an empty file and migrate it themselves.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from orbit_host.credentials import Credentials, load_credentials

from .waiting import UNIT, wait_until

ROOT = Path(__file__).resolve().parents[2]
ORBIT_SERVER = ROOT / ".venv" / "bin" / "orbit-server"
START_TIMEOUT_S = 30.0  # in units of support.waiting
STOP_TIMEOUT_S = 10.0 * UNIT


# Under pytest-xdist, worker gwN takes its servers' ports from its own block below the
# kernel's ephemeral range (32768 and up on Linux, where bind(0) and outgoing connections take
# theirs): a port one worker's server gave up, e.g. killed to restart on it, is then never
# handed to another worker's server (seen: a test's admin sent to the other worker's server).
PORT_BLOCKS_START = 20_000
PORT_BLOCK = 1_500
PORT_TRIES = 100


def free_port() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit() and int(worker[2:]) < 8:
        start = PORT_BLOCKS_START + int(worker[2:]) * PORT_BLOCK
        for port in random.sample(range(start, start + PORT_BLOCK), PORT_TRIES):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue  # in use (or TIME_WAIT): another one
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command() -> list[str]:
    if ORBIT_SERVER.exists():
        return [str(ORBIT_SERVER)]
    return [sys.executable, "-m", "orbit_server.cli"]


class ServerError(RuntimeError):
    """The server process did not come up (the message holds the tail of its log)."""


class ServerProcess:
    """One ``orbit-server serve`` process bound to 127.0.0.1 on a free port."""

    def __init__(self, workdir: Path, *, session_ttl_ms: int = 3000, kill_grace_ms: int = 200,
                 reaper_interval_ms: int = 50, extra_args: tuple[str, ...] = (),
                 port: int | None = None, db_url: str | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.db_url = db_url or f"sqlite:///{self.workdir / 'orbit.db'}"
        self.port = port or free_port()
        self.session_ttl_ms = session_ttl_ms
        self.kill_grace_ms = kill_grace_ms
        self.reaper_interval_ms = reaper_interval_ms
        self.extra_args = extra_args
        self.log_path = self.workdir / "orbit-server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.url_scheme = "http"  # "https" when extra_args hold --tls-cert/--tls-key
        # The admin already in the database (a SeedDatabase copy), else None.
        self.seeded_admin: Credentials | None = None

    # -------------------------------------------------------------- addresses

    @property
    def url(self) -> str:
        return f"{self.url_scheme}://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        scheme = "wss" if self.url_scheme == "https" else "ws"
        return f"{scheme}://127.0.0.1:{self.port}/v1/worker"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    # -------------------------------------------------------------- lifecycle

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ServerProcess:
        """Start the process and wait until /healthz answers; raise ServerError otherwise."""
        if self.proc is not None and self.proc.poll() is None:
            raise ServerError("server is already running")
        cmd = [*server_command(), "serve", "--db", self.db_url, "--host", "127.0.0.1",
               "--port", str(self.port), "--session-ttl-ms", str(self.session_ttl_ms),
               "--kill-grace-ms", str(self.kill_grace_ms),
               "--reaper-interval-ms", str(self.reaper_interval_ms), *self.extra_args]
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.workdir)
        finally:
            log.close()
        self.starts += 1
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise ServerError(f"orbit-server exited with {proc.returncode}:\n{self.log_tail()}")
            try:
                # Tests talk to a self-signed TLS server by address; skip verification here.
                return httpx.get(f"{self.url}/healthz", timeout=1.0 * UNIT,
                                 verify=False).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_until(healthy, timeout=timeout_s, interval=0.05, what="/healthz to answer")
        except AssertionError as exc:
            self.kill()
            raise ServerError(f"orbit-server: {exc}:\n{self.log_tail()}") from None
        return self

    def kill(self) -> None:
        """SIGKILL the process (a crash), by its PID, and reap it."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> int | None:
        """SIGTERM by PID, wait (bounded), SIGKILL if needed. Returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
        return proc.returncode

    def restart(self, *, crash: bool = True) -> ServerProcess:
        """Stop (SIGKILL when ``crash``) and start again on the same database and port."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start()

    # -------------------------------------------------------------- helpers

    def bootstrap_admin(self, name: str = "test-admin") -> Credentials:
        """Run ``orbit-server bootstrap-admin`` on this server's DB; return the credentials."""
        return run_bootstrap_admin(self.db_url, self.workdir, self.url, name)

    def admin(self) -> Credentials:
        """The seeded admin (with this server's URL) when there is one, else a new one."""
        if self.seeded_admin is not None:
            return dataclasses.replace(self.seeded_admin, url=self.url)
        return self.bootstrap_admin()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def https_server(workdir: Path, **kwargs: object) -> tuple[ServerProcess, Path]:
    """A server (not started) on HTTPS and wss:// in ``workdir / "tls"``, with a new
    self-signed certificate for 127.0.0.1, and that certificate: the CA a client must trust.
    Skips the test when openssl is not installed."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    workdir.mkdir(parents=True, exist_ok=True)
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60 * UNIT)
    srv = ServerProcess(workdir / "tls", extra_args=("--tls-cert", str(cert),
                                                     "--tls-key", str(key)),
                        **kwargs)  # type: ignore[arg-type]
    srv.url_scheme = "https"  # so start() waits for /healthz over TLS
    return srv, cert


def replica_pair(server_factory: Callable[..., ServerProcess], admin_on: int = 0,
             **flags: object) -> tuple[ServerProcess, ServerProcess, Credentials]:
    """Two started servers on one database (the second on the first's ``db_url``), both
    with ``flags``, and an admin credential made through one of them (``admin_on``: 0 or 1;
    the credential names its URL). ``server_factory`` is tests/conftest.py's fixture."""
    a = server_factory(**flags)
    b = server_factory(db_url=a.db_url, **flags)
    return a, b, (a, b)[admin_on].bootstrap_admin()


def run_bootstrap_admin(db_url: str, workdir: Path, url: str,
                        name: str = "test-admin") -> Credentials:
    """``orbit-server bootstrap-admin`` on ``db_url`` (a real process); its credentials."""
    path = workdir / f"admin-{time.monotonic_ns()}.json"
    cmd = [*server_command(), "bootstrap-admin", "--db", db_url, "-o", str(path),
           "--url", url, "--name", name]
    done = subprocess.run(cmd, capture_output=True, timeout=60 * UNIT, cwd=workdir)
    if done.returncode != 0:
        raise ServerError(f"bootstrap-admin failed ({done.returncode}): "
                          f"{done.stderr.decode(errors='replace')[-2000:]}")
    return load_credentials(path)


class SeedDatabase:
    """A migrated SQLite file with one admin credential, made by the real commands once;
    ``copy_to`` gives each server its own copy."""

    FILE = "orbit.db"

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.path = self.workdir / self.FILE
        db_url = f"sqlite:///{self.path}"
        cmd = [*server_command(), "migrate", "--db", db_url]
        done = subprocess.run(cmd, capture_output=True, timeout=60 * UNIT, cwd=self.workdir)
        if done.returncode != 0:
            raise ServerError(f"migrate failed ({done.returncode}): "
                              f"{done.stderr.decode(errors='replace')[-2000:]}")
        self.admin = run_bootstrap_admin(db_url, self.workdir, "http://127.0.0.1:0")
        # Every connection is closed, so the WAL is checkpointed into the file and removed.
        for suffix in ("-wal", "-shm"):
            if Path(f"{self.path}{suffix}").exists():
                raise ServerError(f"the seed database left {self.path}{suffix} behind")

    def copy_to(self, workdir: Path) -> str:
        """A private copy (mode 0600, like the server's own files) in ``workdir``; its URL."""
        workdir.mkdir(parents=True, exist_ok=True)
        target = workdir / self.FILE
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out, self.path.open("rb") as src:
            shutil.copyfileobj(src, out)
        return f"sqlite:///{target}"
