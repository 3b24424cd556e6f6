"""Alembic on MariaDB: a fresh database reaches head and matches tables.py; a database made at
revision 0001 is upgraded in place (binary collation, DOUBLE factors) with its rows kept."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from mysql_support import query
from sqlalchemy import text
from support.server import server_command
from support.waiting import UNIT

from orbit_server.store.db import (
    alembic_config,
    create_engine_for,
    current_revision,
    head_revision,
    migrate,
)
from orbit_server.store.tables import metadata

pytestmark = pytest.mark.parametrize("orbit_store", ["mariadb"], indirect=True)


def _drop_all(url: str) -> None:
    engine = create_engine_for(url)
    try:
        with engine.begin() as conn:
            for table in [*(t.name for t in metadata.sorted_tables), "alembic_version"]:
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS `{table}`")
    finally:
        engine.dispose()


def test_fresh_database_matches_metadata_and_migrates_twice(db_url: str) -> None:
    migrate(db_url)  # already at head (the pool migrated it): a no-op
    engine = create_engine_for(db_url)
    try:
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
            isolation = conn.exec_driver_sql("SELECT @@tx_isolation").scalar()
            assert isolation == "READ-COMMITTED"
    finally:
        engine.dispose()
    collations = {c for (c,) in query(db_url, "SELECT DISTINCT table_collation FROM "
                                              "information_schema.tables WHERE table_schema "
                                              "= DATABASE() AND table_name <> 'alembic_version'")}
    assert collations == {"utf8mb4_bin"}


def test_upgrade_from_0001_in_place_keeps_rows(db_url: str) -> None:
    _drop_all(db_url)
    engine = create_engine_for(db_url)
    try:
        with engine.begin() as conn:
            # A database made with the server's default, case-insensitive collation.
            conn.exec_driver_sql("ALTER DATABASE CHARACTER SET utf8mb4 "
                                 "COLLATE utf8mb4_general_ci")
            cfg = alembic_config(db_url)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0001")
        with engine.begin() as conn:
            # Server default collation at 0001: case-insensitive; a float column.
            conn.execute(text("INSERT INTO queues (id, name, created_at_ms) "
                              "VALUES ('q1', 'Keep Me', 1)"))
        assert current_revision(engine) == "0001"
        with engine.connect() as conn:  # before: "keep me" matches "Keep Me"
            assert conn.execute(text("SELECT COUNT(*) FROM queues WHERE name = 'keep me'")
                                ).scalar_one() == 1
        migrate(db_url)
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT name FROM queues")).scalar_one() == "Keep Me"
            # Binary comparison now: case matters.
            assert conn.execute(text("SELECT COUNT(*) FROM queues WHERE name = 'keep me'")
                                ).scalar_one() == 0
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER DATABASE CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        engine.dispose()
    kinds = dict(query(db_url, "SELECT column_name, data_type FROM information_schema.columns "
                               "WHERE table_schema = DATABASE() AND table_name = 'tasks' AND "
                               "column_name LIKE 'backoff_%%'"))
    assert kinds["backoff_multiplier"] == "double" and kinds["backoff_jitter"] == "double"


def test_replicas_migrating_at_once_take_turns(db_url: str) -> None:
    """Two `orbit-server migrate` on one empty database at the same time: the named lock
    makes one wait for the other; both succeed and the schema is at head once."""
    _drop_all(db_url)
    env = {**os.environ, "ORBIT_DB": db_url}
    procs = [subprocess.Popen([*server_command(), "migrate"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for _ in range(2)]
    try:
        outputs = [p.communicate(timeout=120 * UNIT)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10 * UNIT)
    assert [p.returncode for p in procs] == [0, 0], outputs
    engine = create_engine_for(db_url)
    try:
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    finally:
        engine.dispose()
