"""Throw-away MariaDB databases for the tests that run on both stores.

The server to use comes from ORBIT_TEST_MYSQL_URL (``.ci/run`` exports it). Each test
session creates its own databases there (``orbit_t_<random>``), migrates them once, hands
them to tests empty, and drops them at the end:

    pool = MariaDBPool.from_env()        # None when ORBIT_TEST_MYSQL_URL is unset
    url = pool.acquire()                 # a migrated database with no rows
    ...                                  # servers, services, engines on ``url``
    pool.release(url)                    # rows deleted by the next acquire
    pool.close()                         # DROP DATABASE for every one made

Without ORBIT_TEST_MYSQL_URL the MariaDB variants skip with a reason; with CI=true they fail
instead, so a CI run can never pass without having run them.
"""

from __future__ import annotations

import functools
import os
import secrets

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import URL

from orbit_server.store.db import create_engine_for, migrate, normalize_url
from orbit_server.store.tables import metadata

ENV = "ORBIT_TEST_MYSQL_URL"
# Children first is not needed (no foreign keys); every table of the schema.
TABLES = [t.name for t in reversed(metadata.sorted_tables)]


@functools.cache
def unavailable_reason() -> str | None:
    """Why the MariaDB variants cannot run here, or None when they can (asked once)."""
    url = os.environ.get(ENV)
    if not url:
        return f"{ENV} is not set (.ci/run sets it when MariaDB answers on 127.0.0.1:3306)"
    try:
        engine = create_engine_for(_server_url(url))
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        finally:
            engine.dispose()
    except Exception as exc:
        return f"MariaDB at {normalize_url(url).render_as_string()} is unreachable: {exc}"
    return None


def must_run() -> bool:
    """With CI=true an unavailable MariaDB is a failure, not a skip."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_mariadb() -> None:
    """Skip the calling test or fixture when MariaDB cannot run here; fail it with CI=true."""
    reason = unavailable_reason()
    if reason is not None:
        if must_run():
            pytest.fail(f"CI=true and MariaDB tests cannot run: {reason}")
        pytest.skip(reason)


def _server_url(url: str) -> str:
    return _with_database(normalize_url(url), None)


def _with_database(parsed: URL, database: str | None) -> str:
    return parsed.set(database=database).render_as_string(hide_password=False)


class MariaDBPool:
    """Migrated, empty databases made on demand and reused within one test session."""

    def __init__(self, base_url: str) -> None:
        self._base = normalize_url(base_url)
        self._admin: Engine = create_engine_for(_server_url(base_url))
        self._made: list[str] = []
        self._free: list[str] = []
        self._engines: dict[str, Engine] = {}

    @classmethod
    def from_env(cls) -> MariaDBPool | None:
        url = os.environ.get(ENV)
        return cls(url) if url else None

    def acquire(self) -> str:
        """A database URL at the head schema with every table empty."""
        if self._free:
            url = self._free.pop()
            self._empty(url)
            return url
        name = f"orbit_t_{secrets.token_hex(6)}"
        with self._admin.begin() as conn:
            conn.exec_driver_sql(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        self._made.append(name)
        url = _with_database(self._base, name)
        migrate(url)
        return url

    def release(self, url: str) -> None:
        self._free.append(url)

    def _empty(self, url: str) -> None:
        engine = self._engines.get(url)
        if engine is None:
            engine = self._engines[url] = create_engine_for(url)
        with engine.begin() as conn:
            for table in TABLES:
                conn.exec_driver_sql(f"DELETE FROM `{table}`")

    def close(self) -> None:
        for engine in self._engines.values():
            engine.dispose()
        try:
            with self._admin.begin() as conn:
                for name in self._made:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            self._admin.dispose()
