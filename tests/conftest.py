"""Shared fixtures: a real `orbit-server` process per test and HTTP helpers around it.

    def test_x(orbit):                      # server + admin + helpers
        queue = orbit.queue()
        producer = orbit.producer(queue)    # httpx.Client with a producer credential
        worker = orbit.worker_credential(queue)

``server`` is a started ServerProcess (short session TTL, kill grace and reaper interval so
tests are fast); ``server_factory(**kwargs)`` starts more with other flags. All are stopped
by PID at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support.orbit_http import OrbitEnv, http_client
from support.server import ServerProcess

from orbit_client.credentials import Credentials


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def make(**kwargs: object) -> ServerProcess:
        srv = ServerProcess(tmp_path / f"server{len(started)}", **kwargs)  # type: ignore[arg-type]
        started.append(srv)
        return srv.start()

    try:
        yield make
    finally:
        for srv in started:
            srv.stop()


@pytest.fixture
def server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    return server_factory()


@pytest.fixture
def admin_credentials(server: ServerProcess) -> Credentials:
    return server.bootstrap_admin()


@pytest.fixture
def admin_http(server: ServerProcess, admin_credentials: Credentials) -> Iterator[httpx.Client]:
    with http_client(server.url, admin_credentials.bearer) as client:
        yield client


@pytest.fixture
def orbit(server: ServerProcess, admin_credentials: Credentials,
          admin_http: httpx.Client) -> Iterator[OrbitEnv]:
    env = OrbitEnv(server, admin_credentials, admin_http)
    try:
        yield env
    finally:
        env.close()
