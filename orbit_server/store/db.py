"""Engine creation and schema migration.

SQLite connections get WAL, synchronous=FULL, a busy timeout and foreign keys, and every
write transaction starts with ``BEGIN IMMEDIATE`` so two writers never deadlock while
upgrading a read lock (the pysqlite recipe from the SQLAlchemy docs: the driver's own
transaction handling is switched off and the ``begin`` event emits BEGIN itself). A
connection with the execution option ``orbit_read_only=True`` begins a plain deferred
transaction instead.

``migrate(url)`` brings any database to the head revision with Alembic, programmatically.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
BUSY_TIMEOUT_MS = 10_000


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def create_engine_for(url: str, **kwargs: Any) -> Engine:
    """A sync engine for ``url``; for a SQLite file its directory is created first."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        kwargs.setdefault("pool_pre_ping", True)
        return create_engine(url, **kwargs)
    database = parsed.database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    connect_args = dict(kwargs.pop("connect_args", {}))
    # One store thread uses each connection at a time, but not always the thread that made it.
    connect_args.setdefault("check_same_thread", False)
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
    # Let us emit BEGIN ourselves; pysqlite would otherwise defer it and commit before DDL.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA cache_size=-32768")  # 32 MiB of page cache
    finally:
        cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    if conn.get_execution_options().get("orbit_read_only"):
        conn.exec_driver_sql("BEGIN")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolation: a literal % in a password must be doubled.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str, engine: Engine | None = None) -> None:
    """Upgrade the database at ``url`` to the head revision (safe to run again)."""
    own = engine is None
    eng = create_engine_for(url) if engine is None else engine
    try:
        with eng.begin() as conn:
            cfg = alembic_config(url)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    finally:
        if own:
            eng.dispose()


def current_revision(engine: Engine) -> str | None:
    """The Alembic revision the database is at, or None for an empty database."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect().execution_options(orbit_read_only=True) as conn:
        return MigrationContext.configure(conn).get_current_revision()
