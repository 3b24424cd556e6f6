"""Finding 8 of the security review: a CA file for every client, and certificate errors
that say so. A real TLS server with a self-signed certificate; the ``orbit`` CLI, the
Python client and ``orbit-supervise`` each fail naming the certificate without a CA, and
work with ``--ca-file`` or ``ORBIT_CA_FILE``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.server import ServerProcess, https_server
from support.waiting import UNIT, wait_until

from orbit_client import OrbitClient
from orbit_client.errors import CertificateError
from orbit_host.credentials import Credentials, write_credentials

BIN = Path(sys.executable).parent
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures_handlers"


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path, Credentials, Path]]:
    srv, cert = https_server(tmp_path)
    srv.start()
    try:
        admin = srv.bootstrap_admin()
        admin_file = tmp_path / "admin.json"
        write_credentials(admin_file, admin)
        yield srv, cert, admin, admin_file
    finally:
        srv.stop()


def _wait_logged(log: Path, text: str) -> None:
    wait_until(lambda: text in log.read_text(), timeout=20,
               what=lambda: f"{text!r} in {log.read_text()[-2000:]}")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORBIT_", "SSL_CERT"))}
    env.update(extra)
    return env


def test_cli_and_client_take_a_ca_file(tls_server: tuple[ServerProcess, Path, Credentials, Path]
                                       ) -> None:
    _srv, cert, admin, admin_file = tls_server
    orbit = [str(BIN / "orbit"), "--credentials-file", str(admin_file)]
    refused = subprocess.run([*orbit, "queues", "create"], capture_output=True, text=True,
                             timeout=60 * UNIT, env=_env())
    assert refused.returncode == 5, refused.stderr  # a certificate error (docs/cli.md)
    assert "certificate" in refused.stderr and "--ca-file" in refused.stderr, refused.stderr
    for args, env in (([*orbit, "--ca-file", str(cert)], _env()),
                      (orbit, _env(ORBIT_CA_FILE=str(cert)))):
        done = subprocess.run([*args, "queues", "create"], capture_output=True, text=True,
                              timeout=60 * UNIT, env=env)
        assert done.returncode == 0, done.stderr
    with OrbitClient(credentials=admin) as plain, pytest.raises(CertificateError) as info:
        plain.create_queue()
    assert "certificate" in info.value.message
    with OrbitClient(credentials=admin, ca_file=str(cert)) as trusted:
        assert trusted.create_queue()["id"]


def test_supervisor_takes_a_ca_file(tls_server: tuple[ServerProcess, Path, Credentials, Path],
                                    tmp_path: Path) -> None:
    _srv, cert, admin, _ = tls_server
    with OrbitClient(credentials=admin, ca_file=str(cert)) as client:
        queue = client.create_queue()["id"]
        worker_file = tmp_path / "worker.json"
        client.create_credential("worker", [queue], path=worker_file)
        base = [str(BIN / "orbit-supervise"), "--credentials-file", str(worker_file),
                "--reconnect-min-delay", "0.05", "--reconnect-max-delay", "0.2",
                "supervisor_handlers:HANDLERS"]
        for args, env, expect in ((base, _env(), "certificate"),
                                  ([*base[:1], "--ca-file", str(cert), *base[1:]], _env(),
                                   "welcome"),
                                  (base, _env(ORBIT_CA_FILE=str(cert)), "welcome")):
            log = tmp_path / f"sup-{len(expect)}-{len(args)}-{len(env)}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                        cwd=FIXTURES, stdin=subprocess.DEVNULL)
            try:
                if expect == "welcome":
                    task = client.submit(queue, {"handler": "sup.upper", "handler_version": "v1",
                                                 "payload_version": "v1",
                                                 "payload": {"text": "tls"}})
                    done = client.wait(task["id"], timeout=20 * UNIT)
                    assert done["state"] == "SUCCEEDED", (done, log.read_text())
                else:
                    _wait_logged(log, expect)
                    assert "--ca-file" in log.read_text()
            finally:
                proc.kill()
                proc.wait(timeout=10 * UNIT)
