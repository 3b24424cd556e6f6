"""The schema and the hot statements render for MySQL/MariaDB (no connection needed): the
migration in offline mode, and every prepared statement with the PyMySQL dialect."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

from alembic import command
from sqlalchemy.dialects import mysql, sqlite

from orbit_server.store import queries, rows
from orbit_server.store.db import alembic_config
from orbit_server.store.prepared import Prepared

SQLITE_ONLY = ("OR IGNORE", "OR REPLACE", "RETURNING", "AUTOINCREMENT", "PRAGMA")


def test_migration_renders_for_mysql_offline() -> None:
    cfg = alembic_config("mysql+pymysql://orbit@127.0.0.1/orbit")
    out = io.StringIO()
    with redirect_stdout(out):
        command.upgrade(cfg, "head", sql=True)
    ddl = out.getvalue()
    assert "CREATE TABLE tasks" in ddl and "LONGTEXT" in ddl
    assert "CREATE INDEX ix_tasks_dispatch ON tasks" in ddl
    assert "CONSTRAINT uq_tasks_queue_operation_key UNIQUE (queue_id, operation_key)" in ddl
    assert "id BIGINT NOT NULL AUTO_INCREMENT" in ddl  # audit ids
    # 0016: the dispatch index holds the requirement's digest after the capability.
    assert ("CREATE INDEX ix_tasks_dispatch ON tasks (queue_id, state, handler, "
            "handler_version, payload_version, requires_key, dispatch_rank, "
            "available_at_ms)") in ddl


def test_hot_statements_render_for_both_dialects() -> None:
    prepared = [rows.INSERT_ATTEMPT.with_columns(rows.INSERT_ATTEMPT.optional),
                rows.INSERT_ATTEMPT.with_columns(()), rows.INSERT_AUDIT, rows.INSERT_EVIDENCE,
                rows.INSERT_RECEIPT, rows.INSERT_TASK.with_columns(rows.INSERT_TASK.optional),
                Prepared(rows._TASK_CAS, ("state", "epoch", "updated_at_ms")),
                Prepared(rows._ATTEMPT_CAS, ("state", "lease_expires_at_ms"))]
    for dialect, marker in ((mysql.dialect(paramstyle="format"), "%s"),
                            (sqlite.dialect(), "?")):
        for p in prepared:
            sql = str(p.stmt.compile(dialect=dialect, column_keys=p.column_keys))
            assert marker in sql
            assert not any(word in sql.upper() for word in SQLITE_ONLY), sql
        for stmt in (queries.DISPATCH_ONE, queries.TASKS_BY_ID, queries.ATTEMPTS_BY_ID,
                     queries.ATTEMPTS_WITH_TASKS_BY_ID,
                     queries.RECEIPTS_BY_MSG, queries.EXPIRED_LEASES,
                     queries.STALE_RESERVATIONS, queries.OVERDUE_PENDING):
            sql = str(stmt.compile(dialect=dialect))
            assert not any(word in sql.upper() for word in SQLITE_ONLY), sql
    cas = str(rows._TASK_CAS.compile(dialect=mysql.dialect(), column_keys=["state"]))
    assert "WHERE tasks.id = " in cas and "tasks.epoch = " in cas
    locked = str(queries.TASKS_BY_ID.compile(dialect=mysql.dialect()))
    assert locked.rstrip().endswith("FOR UPDATE")
