"""Shared fixtures: a real `orbit-server` process per test and HTTP helpers around it.

    def test_x(orbit):                      # server + admin + helpers
        queue = orbit.queue()
        producer = orbit.producer(queue)    # httpx.Client with a producer credential
        worker = orbit.worker_credential(queue)

``server`` is a started ServerProcess (short session TTL, kill grace and reaper interval so
tests are fast); ``server_factory(**kwargs)`` starts more with other flags. All are stopped
by PID at teardown. On SQLite each starts on a copy of the session's seed database (migrated
and given an admin by the real commands, tests/support/server.py ``SeedDatabase``).

Workers: scripts/test runs two pytest-xdist workers. A test marked ``serial`` runs while no
other worker runs one (``_serial_among_workers``); a module whose tests share a
module-scoped fixture carries ``pytest.mark.xdist_group`` so one worker runs it.

Stores: ``orbit_store`` is "sqlite" or "mariadb". Every test under the folders in
``BOTH_STORE_DIRS`` that uses a store (through ``server``, ``server_factory`` or ``db_url``)
runs once per store (test IDs end in ``[sqlite]``/``[mariadb]``); the few tests that build a
ServerProcess by hand, and the pool and unit tests, need no store choice. ``db_url`` is a
fresh, empty database of that store for the test: a SQLite file in tmp_path, or a migrated
MariaDB database of the session's pool (tests/support/mariadb.py), which skips without
ORBIT_TEST_MYSQL_URL and fails with CI=true.

Time: every timeout, poll interval and hold in the suite is in units of
``support.waiting.UNIT`` (ORBIT_TEST_TIME_UNIT, default 1.0); so is each test's
pytest-timeout limit.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support.mariadb import MariaDBPool, require_mariadb, unavailable_reason
from support.orbit_http import OrbitEnv, http_client
from support.server import SeedDatabase, ServerProcess
from support.waiting import UNIT

from orbit_host.credentials import Credentials

STORES = ("sqlite", "mariadb")
# Every store-dependent test runs on both stores (issue: one parametrised suite).
BOTH_STORE_DIRS = {"store", "server", "supervisor", "client", "e2e"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Scale each test's pytest-timeout limit (its marker's, else the configured one)."""
    if UNIT == 1.0:
        return
    default = config.getoption("timeout", None) or config.getini("timeout")
    for item in items:
        marker = item.get_closest_marker("timeout")
        limit = default
        if marker is not None:
            limit = marker.args[0] if marker.args else marker.kwargs.get("timeout", default)
        if limit:
            item.add_marker(pytest.mark.timeout(float(limit) * UNIT), append=False)


@pytest.fixture(autouse=True)
def _serial_among_workers(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under pytest-xdist a ``serial`` test (one that loads every core on purpose) runs
    while no other worker runs a test, and the others wait meanwhile: two flock()s on files
    beside the workers' temporary directories. A worker first takes the gate, so a waiting
    serial test holds back new tests rather than waiting for a moment when none runs."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    shared = tmp_path_factory.getbasetemp().parent
    serial = request.node.get_closest_marker("serial") is not None
    with (shared / "serial.gate").open("a") as gate, (shared / "serial.lock").open("a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "orbit_store" not in metafunc.fixturenames:
        return
    path = metafunc.definition.path
    if path.parent.name in BOTH_STORE_DIRS:
        metafunc.parametrize("orbit_store", STORES, indirect=True)


@pytest.fixture(scope="session")
def mariadb_pool() -> Iterator[MariaDBPool | None]:
    reason = unavailable_reason()
    pool = None if reason else MariaDBPool.from_env()
    try:
        yield pool
    finally:
        if pool is not None:
            pool.close()


@pytest.fixture
def orbit_store(request: pytest.FixtureRequest) -> str:
    """The store of this test: the parametrised one, else SQLite."""
    store = str(getattr(request, "param", "sqlite"))
    if store == "mariadb":
        require_mariadb()
    return store


@pytest.fixture
def db_url_factory(orbit_store: str, tmp_path: Path,
                   mariadb_pool: MariaDBPool | None) -> Iterator[Callable[[], str]]:
    """Fresh empty databases of the test's store; MariaDB ones go back to the pool after."""
    taken: list[str] = []

    def make() -> str:
        if orbit_store == "sqlite":
            return f"sqlite:///{tmp_path / f'orbit{len(taken)}.db'}"
        assert mariadb_pool is not None
        url = mariadb_pool.acquire()
        taken.append(url)
        return url

    try:
        yield make
    finally:
        if mariadb_pool is not None:
            for url in taken:
                mariadb_pool.release(url)


@pytest.fixture
def db_url(db_url_factory: Callable[[], str]) -> str:
    return db_url_factory()


@pytest.fixture(scope="session")
def sqlite_seed(tmp_path_factory: pytest.TempPathFactory) -> SeedDatabase:
    """A migrated SQLite file with an admin, made once; each server gets a copy of it."""
    return SeedDatabase(tmp_path_factory.mktemp("seed"))


@pytest.fixture
def server_factory(tmp_path: Path, orbit_store: str, db_url_factory: Callable[[], str],
                   request: pytest.FixtureRequest) -> Iterator[Callable[..., ServerProcess]]:
    """Start servers; each gets a fresh database of the test's store unless ``db_url`` is
    given (pass one server's ``db_url`` to another to run replicas on one database). A
    SQLite one is a copy of the session's ``sqlite_seed`` (migrated, one admin)."""
    started: list[ServerProcess] = []

    def make(**kwargs: object) -> ServerProcess:
        workdir = tmp_path / f"server{len(started)}"
        seed: SeedDatabase | None = None
        if "db_url" not in kwargs:
            if orbit_store == "sqlite":
                seed = request.getfixturevalue("sqlite_seed")
                kwargs["db_url"] = seed.copy_to(workdir)
            else:
                kwargs["db_url"] = db_url_factory()
        srv = ServerProcess(workdir, **kwargs)  # type: ignore[arg-type]
        if seed is not None:
            srv.seeded_admin = seed.admin
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
    return server.admin()


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
