"""Engine creation and schema migration.

SQLite connections get WAL (checkpointed every WAL_AUTOCHECKPOINT_PAGES), synchronous=FULL
(``synchronous="NORMAL"`` for the server's own engine, whose WAL a thread of its own syncs:
orbit_server/wal_sync.py), a busy timeout and foreign keys, and every write transaction
starts with ``BEGIN IMMEDIATE`` so two writers never deadlock while upgrading a read lock
(the pysqlite recipe from the SQLAlchemy docs: the driver's own transaction handling is
switched off and the ``begin`` event emits BEGIN itself). A connection with the execution
option ``orbit_read_only=True`` begins a plain deferred transaction instead.

MySQL/MariaDB URLs (``mysql://`` or ``mariadb://``) run on PyMySQL: the server's store calls
are synchronous SQLAlchemy Core on a store thread (docs/deployment.md says why). Their
connections use READ COMMITTED (queue claims lock only the rows they take, with SKIP LOCKED),
utf8mb4, a short lock-wait timeout (a blocked transaction fails fast and is retried by
``orbit_server.store.retry``), and are checked before use (``pool_pre_ping``), so a connection
the database dropped is replaced instead of failing the next request.

``migrate(url)`` brings any database to the head revision with Alembic, programmatically; on
MySQL it holds a named lock so replicas starting together migrate one at a time. A database
already at head costs one version read: the head is read from the revision files' own
``revision``/``down_revision`` lines (``shipped_head``), and Alembic, whose import is a good
part of a process start (docs/benchmarks.md, "Test suite and process start"), is loaded only
when there is something to migrate.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import OperationalError

from orbit_wire.errors import ErrorCode, OrbitError

from .prepared import sqlite_driver_execute

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
BUSY_TIMEOUT_MS = 10_000
# WAL pages between automatic checkpoints (SQLite's default is 1000). Worker requests rewrite
# the same hot pages, so a rarer checkpoint copies each of them less often; the WAL file then
# grows to about 40 MiB (docs/benchmarks.md, "Store settings").
WAL_AUTOCHECKPOINT_PAGES = 10_000
# MySQL: seconds a statement waits for a row lock before failing (then retried, bounded).
LOCK_WAIT_TIMEOUT_S = 5
# MySQL: seconds to connect, and to wait for one answer, before the connection counts as lost.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 60
MIGRATE_LOCK = "orbit_migrate"
MIGRATE_LOCK_WAIT_S = 120


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def is_mysql(url: str | URL) -> bool:
    return make_url(url).get_backend_name() in ("mysql", "mariadb")


def normalize_url(url: str) -> URL:
    """``mysql://`` and ``mariadb://`` (no driver named) mean PyMySQL, with utf8mb4."""
    parsed = make_url(url)
    if parsed.get_backend_name() in ("mysql", "mariadb"):
        if parsed.get_driver_name() in ("mysqldb", "mariadbconnector") and "+" not in (
            parsed.drivername
        ):
            parsed = parsed.set(drivername=f"{parsed.get_backend_name()}+pymysql")
        if "charset" not in parsed.query:
            parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL naming a plain file; None for anything else
    (MySQL, ``:memory:``, ``file:`` URIs)."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:" or (
            database.startswith("file:")):
        return None
    return Path(database).expanduser()


def create_engine_for(url: str, *, synchronous: str = "FULL", **kwargs: Any) -> Engine:
    """A sync engine for ``url``; for a SQLite file its directory is created first.
    ``synchronous`` is SQLite's setting for every connection (FULL or NORMAL).

    Bound parameters never appear in error messages (they may hold payloads and hashes)."""
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
    parsed = normalize_url(url)
    kwargs.setdefault("hide_parameters", True)
    if parsed.get_backend_name() != "sqlite":
        return _create_mysql_engine(parsed, **kwargs)
    database = parsed.database
    if database and database != ":memory:" and not database.startswith("file:"):
        create_private_file(Path(database).expanduser())
    connect_args = dict(kwargs.pop("connect_args", {}))
    # One store thread uses each connection at a time, but not always the thread that made it.
    connect_args.setdefault("check_same_thread", False)
    engine = create_engine(parsed, connect_args=connect_args, **kwargs)
    event.listen(engine, "connect", functools.partial(_sqlite_on_connect, synchronous))
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def create_private_file(path: Path) -> None:
    """Create a SQLite database file 0600, and its missing directories 0700, before SQLite
    opens it: payloads and results must not be readable by other local users. SQLite gives
    the -wal and -shm files the database file's mode. An existing file is left as it is."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


def _create_mysql_engine(parsed: URL, **kwargs: Any) -> Engine:
    connect_args = dict(kwargs.pop("connect_args", {}))
    if parsed.get_driver_name() == "pymysql":
        connect_args.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
        connect_args.setdefault("read_timeout", READ_TIMEOUT_S)
        connect_args.setdefault("write_timeout", READ_TIMEOUT_S)
    kwargs.setdefault("pool_pre_ping", True)
    # A connection older than this is replaced (database-side idle timeouts, proxies).
    kwargs.setdefault("pool_recycle", 1800)
    kwargs.setdefault("isolation_level", "READ COMMITTED")
    engine = create_engine(parsed, connect_args=connect_args, **kwargs)
    event.listen(engine, "connect", _mysql_on_connect)
    return engine


def _mysql_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}")
        # Strict mode: a value that does not fit is an error, never silently truncated.
        cursor.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',STRICT_TRANS_TABLES')")
    finally:
        cursor.close()


def _sqlite_on_connect(synchronous: str, dbapi_connection: sqlite3.Connection,
                       _record: Any) -> None:
    # Let us emit BEGIN ourselves; pysqlite would otherwise defer it and commit before DDL.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA cache_size=-32768")  # 32 MiB of page cache
    finally:
        cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    # Straight to the driver: SQLAlchemy's statement execution cost every transaction about
    # as much as its BEGIN's own work (docs/benchmarks.md, "The server's CPU per task").
    read_only = conn.get_execution_options().get("orbit_read_only")
    sqlite_driver_execute(conn, "BEGIN" if read_only else "BEGIN IMMEDIATE")


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolation: a literal % in a password must be doubled.
    rendered = normalize_url(url).render_as_string(hide_password=False)
    cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return cfg


def migrate(url: str, engine: Engine | None = None) -> None:
    """Upgrade the database at ``url`` to the head revision (safe to run again). A SQLite
    file the server cannot write fails with OrbitError UNAVAILABLE naming the path and the
    cause (``sqlite_write_problem``), not SQLite's "attempt to write a readonly database"."""
    try:
        _migrate(url, engine)
    except (OperationalError, sqlite3.OperationalError, OSError) as exc:
        path = sqlite_file(url)
        problem = None if path is None else sqlite_write_problem(path)
        if problem is None:
            raise
        raise OrbitError(ErrorCode.UNAVAILABLE, problem) from exc


def sqlite_write_problem(path: Path) -> str | None:
    """Why a SQLite database at ``path`` cannot be written, naming the path: its folder
    missing or not writable (SQLite creates the ``-wal`` and ``-shm`` files beside the
    database), or the file or one of those not writable; None when nothing is in the way.
    Tried for real (open, create), so a read-only mount or an immutable folder counts."""
    folder = path.parent
    if not folder.is_dir():
        return f"the database folder {folder} does not exist"
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if file.exists():
            try:
                os.close(os.open(file, os.O_WRONLY | os.O_CLOEXEC))
            except OSError as exc:
                return f"cannot write {file}: {exc.strerror}"
    probe = folder / f".{path.name}-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except OSError as exc:
        return (f"cannot create files in the database folder {folder} ({exc.strerror}): "
                f"SQLite writes {path.name}-wal and {path.name}-shm beside {path.name}; "
                "make the folder writable by the server's user")
    probe.unlink()
    return None


def _migrate(url: str, engine: Engine | None) -> None:
    own = engine is None
    eng = create_engine_for(url) if engine is None else engine
    try:
        if _at_revision(eng, shipped_head()):
            return
        if is_mysql(url):
            _migrate_mysql(url, eng)
        else:
            from alembic import command

            with eng.begin() as conn:
                cfg = alembic_config(url)
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
    finally:
        if own:
            eng.dispose()


def _at_revision(engine: Engine, revision: str | None) -> bool:
    """Whether the database's one ``alembic_version`` row is ``revision`` (no Alembic)."""
    if revision is None:
        return False
    with engine.connect().execution_options(orbit_read_only=True) as conn:
        if not inspect(conn).has_table("alembic_version"):
            return False
        found = [row[0] for row in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]
    return found == [revision]


@functools.cache
def shipped_head() -> str | None:
    """The head of the revision files, read from their ``revision = "..."`` and
    ``down_revision = "..."`` assignments; None when they do not form one plain chain (a
    merge, a branch, a computed value), and then Alembic decides. Tests hold it equal to
    ``head_revision()``."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        found: dict[str, object] = {}
        for node in ast.parse(path.read_bytes(), filename=str(path)).body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value,
                                                                           ast.Constant):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = node.value.value
        if "revision" not in found:
            continue  # __init__.py
        revision, parent = found["revision"], found.get("down_revision")
        if not isinstance(revision, str) or not (parent is None or isinstance(parent, str)):
            return None
        revisions.add(revision)
        if parent is not None:
            parents.add(parent)
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 and parents <= revisions else None


def _migrate_mysql(url: str, engine: Engine) -> None:
    from alembic import command

    # MySQL DDL commits implicitly, so the migration cannot be one transaction; a named lock
    # (held by this connection) keeps replicas that start together from migrating at once.
    with engine.connect() as conn:
        got = conn.exec_driver_sql(
            f"SELECT GET_LOCK('{MIGRATE_LOCK}', {MIGRATE_LOCK_WAIT_S})").scalar()
        if got != 1:
            raise OrbitError(ErrorCode.UNAVAILABLE, "another server holds the migration lock; "
                             "try again", retryable=True)
        try:
            conn.commit()
            cfg = alembic_config(url)
            cfg.attributes["connection"] = conn
            with conn.begin():
                command.upgrade(cfg, "head")
        finally:
            conn.exec_driver_sql(f"SELECT RELEASE_LOCK('{MIGRATE_LOCK}')")
            conn.commit()


def head_revision() -> str:
    """The newest revision shipped in the migrations package (the chain must be linear)."""
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations must form one chain; heads: {sorted(heads)}")
    return str(heads[0])


def current_revision(engine: Engine) -> str | None:
    """The Alembic revision the database is at, or None for an empty database."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect().execution_options(orbit_read_only=True) as conn:
        return MigrationContext.configure(conn).get_current_revision()
